package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
)

var staticInit struct {
	once sync.Once
	path string
	err  string
}

// StaticInit returns a statically linked build of cmd/layerfs-sandbox-init
// (CGO_ENABLED=0, as the Makefile builds it), built once per test process
// into the system's temporary directory, for tests whose sandboxes must
// run from a static init (a checkpoint refuses a dynamically linked one,
// and a test binary is linked dynamically when cgo is on). It skips when
// the go command cannot build it.
func StaticInit(t testing.TB) string {
	t.Helper()
	staticInit.once.Do(func() {
		goBin, err := exec.LookPath("go")
		if err != nil {
			goBin = "/usr/local/go/bin/go" // where the project's scripts install Go
		}
		dir := filepath.Join(os.TempDir(), "layerfs-static-init")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			staticInit.err = err.Error()
			return
		}
		p := filepath.Join(dir, "layerfs-sandbox-init")
		tmp := p + "." + strconv.Itoa(os.Getpid())
		cmd := exec.Command(goBin, "build", "-o", tmp, "layerfs.dev/layerfs/cmd/layerfs-sandbox-init")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			staticInit.err = "build a static sandbox init: " + err.Error() + ": " + string(out)
			return
		}
		// Renamed into place: concurrent test processes each put theirs.
		if err := os.Rename(tmp, p); err != nil {
			staticInit.err = err.Error()
			return
		}
		staticInit.path = p
	})
	if staticInit.err != "" {
		Skip(t, staticInit.err)
	}
	return staticInit.path
}
