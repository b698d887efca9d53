package python

import (
	"os"
	"testing"

	"layerfs.dev/layerfs/internal/daemontest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	daemontest.RemoveBinaries()
	os.Exit(code)
}
