package guest_test

import (
	"errors"
	"testing"

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
		if got, err := guest.Name(tc.Project); err != nil || got != tc.Want {
			t.Errorf("Name(%q) = %q, %v; want %q", tc.Project, got, err, tc.Want)
		}
	}
	if _, err := guest.Name(""); !errors.Is(err, guest.ErrNoProject) || err.Error() != "project name is empty" {
		t.Errorf("Name(\"\"): got %v, want ErrNoProject", err)
	}
}
