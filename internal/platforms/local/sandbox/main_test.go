package sandbox_test

import (
	"os"
	"testing"

	"layerfs.dev/layerfs/internal/platforms/local/sandbox"
)

// The test binary is also the sandbox init: the launcher re-executes it.
func TestMain(m *testing.M) {
	if sandbox.InitMain() {
		return
	}
	os.Exit(m.Run())
}
