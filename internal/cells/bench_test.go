package cells

import (
	"errors"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// BenchmarkNative times each cell's body run natively with bash in a fresh
// copy of its base on the disk of the temporary directory: the floor the
// LayerFS arm is compared with, and the check that every extended cell
// stays well under two seconds. The base build and the copy are untimed.
//
//	go test ./cells -run '^$' -bench Native -benchtime 5x
func BenchmarkNative(b *testing.B) {
	ctx := b.Context()
	for _, c := range All() {
		b.Run(c.ID, func(b *testing.B) {
			base := b.TempDir()
			if err := c.WriteBase(ctx, base); err != nil {
				if errors.Is(err, ErrUnavailable) {
					b.Skip(err)
				}
				b.Fatal(err)
			}
			if err := Eligible(ctx, bash{base}, c); err != nil {
				b.Skip(err)
			}
			for i := 0; b.Loop(); i++ {
				b.StopTimer()
				dir := filepath.Join(b.TempDir(), "ws"+strconv.Itoa(i))
				out, err := exec.Command("cp", "-a", base, dir).CombinedOutput()
				require.NoError(b, err, "copy base: %s", out)
				cmd := exec.Command("bash", "-o", "pipefail", "-c", Wrap(c.Body))
				cmd.Dir = dir
				b.StartTimer()
				out, err = cmd.CombinedOutput()
				require.NoError(b, err, "body: %s", out)
			}
		})
	}
}
