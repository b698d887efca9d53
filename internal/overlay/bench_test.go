package overlay_test

import (
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/internal/overlay"
)

// BenchmarkUpperOps measures the upper-layer syscalls of one create, stat,
// chmod and unlink of a file four directories below the root (each
// operation names its parent by path, or by a descriptor opened beneath
// the upper).
func BenchmarkUpperOps(b *testing.B) {
	e := newEnv(b, false)
	d := e.ov.Root()
	for _, name := range []string{"a", "b", "c", "d"} {
		n, err := e.ov.Mkdir(e.ctx, d, name, 0o755, overlay.Caller{})
		require.NoError(b, err)
		d = n
	}
	b.ResetTimer()
	for b.Loop() {
		n, f, err := e.ov.Create(e.ctx, d, "f", os.O_RDWR, 0o644, overlay.Caller{})
		require.NoError(b, err)
		f.Close()
		_, err = e.ov.Getattr(e.ctx, n, nil)
		require.NoError(b, err)
		_, err = e.ov.Setattr(e.ctx, n, overlay.SetAttr{Valid: overlay.SetMode, Mode: 0o600}, nil)
		require.NoError(b, err)
		require.NoError(b, e.ov.Unlink(e.ctx, d, "f"))
	}
}
