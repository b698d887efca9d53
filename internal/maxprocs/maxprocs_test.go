package maxprocs

import (
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestWithHeadroom(t *testing.T) {
	def := runtime.GOMAXPROCS(0)
	t.Cleanup(func() { runtime.GOMAXPROCS(def) })

	t.Setenv("GOMAXPROCS", "")
	assert.Equal(t, def+Headroom, WithHeadroom())
	assert.Equal(t, def+Headroom, runtime.GOMAXPROCS(0))

	runtime.GOMAXPROCS(def)
	t.Setenv("GOMAXPROCS", "1") // the user's choice stays
	assert.Equal(t, def, WithHeadroom())
	assert.Equal(t, def, runtime.GOMAXPROCS(0))
}
