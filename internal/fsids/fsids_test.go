package fsids_test

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"layerfs.dev/layerfs/internal/fsids"
	"layerfs.dev/layerfs/internal/testenv"
)

// TestDo: what fn creates is owned by the id, root's privileges over files
// stay (it writes into a directory of another owner, mode 0755), and the
// thread is root again afterwards.
func TestDo(t *testing.T) {
	testenv.RequireRoot(t)
	dir := t.TempDir()
	const id = 2_000_000_123
	sentinel := errors.New("from fn")
	err := fsids.Do(id, func() error {
		if err := os.WriteFile(filepath.Join(dir, "in"), nil, 0o644); err != nil {
			return err
		}
		return sentinel
	})
	if !errors.Is(err, sentinel) {
		t.Fatalf("Do: %v, want fn's error", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "after"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]uint32{"in": id, "after": 0} {
		st, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		s := st.Sys().(*syscall.Stat_t)
		if s.Uid != want || s.Gid != want {
			t.Errorf("%s owned by %d:%d, want %d:%d", name, s.Uid, s.Gid, want, want)
		}
	}
}
