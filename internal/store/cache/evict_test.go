package cache

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestDefaultBound: a limit of 0 bounds the cache by a share of its file
// system; a negative one leaves it unbounded.
func TestDefaultBound(t *testing.T) {
	assert.Positive(t, boundOf(t.TempDir(), 0), "the default bound")
	assert.Zero(t, boundOf(t.TempDir(), -1))
	assert.EqualValues(t, 7, boundOf(t.TempDir(), 7))
}
