package local_test

import (
	"os"
	"testing"

	"layerfs.dev/layerfs/engine/sandbox"
	"layerfs.dev/layerfs/internal/testenv"
	"layerfs.dev/layerfs/platforms"
	"layerfs.dev/layerfs/platforms/escapetest"
	"layerfs.dev/layerfs/platforms/local"
	"layerfs.dev/layerfs/platforms/platformtest"
)

// The test binary is the sandbox init too.
func TestMain(m *testing.M) {
	if sandbox.InitMain() {
		return
	}
	os.Exit(m.Run())
}

func TestConformance(t *testing.T) {
	testenv.RequireRoot(t)
	platformtest.Run(t, func(t *testing.T) platforms.Platform { return local.New(local.Options{}) })
}

func TestConformanceCold(t *testing.T) {
	testenv.RequireRoot(t)
	platformtest.Run(t, func(t *testing.T) platforms.Platform { return local.New(local.Options{Warm: -1}) })
}

func TestConformanceWithoutCgroups(t *testing.T) {
	testenv.RequireRoot(t)
	platformtest.Run(t, func(t *testing.T) platforms.Platform { return local.New(local.Options{NoCgroups: true, Warm: 1}) })
}

func TestEscapes(t *testing.T) {
	testenv.RequireRoot(t)
	escapetest.Run(t, local.New(local.Options{}))
}
