package guest_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"layerfs.dev/layerfs/internal/platforms/internal/guest"
	"layerfs.dev/layerfs/internal/platforms/internal/guest/guesttest"
)

func TestName(t *testing.T) {
	guesttest.CheckNames(t, "Name", guest.Name)
	for _, tc := range []guesttest.NameCase{
		{Project: "A--B", Want: "layerfs-a-b-067f91"},
		// Nothing of the name is left but its hash.
		{Project: "___", Want: "layerfs-bda251"},
	} {
		got, err := guest.Name(tc.Project)
		if assert.NoError(t, err, "Name(%q)", tc.Project) {
			assert.Equal(t, tc.Want, got, "Name(%q)", tc.Project)
		}
	}
	_, err := guest.Name("")
	assert.ErrorIs(t, err, guest.ErrNoProject, `Name("")`)
	assert.EqualError(t, err, "project name is empty", `Name("")`)
}
