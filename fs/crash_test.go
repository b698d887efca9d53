package fs_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"layerfs.dev/layerfs/fs"
	"layerfs.dev/layerfs/internal/testenv"
	"layerfs.dev/layerfs/overlay"
	"layerfs.dev/layerfs/store"
)

// The crash test re-executes the test binary as the serving process, so it
// can be killed with SIGKILL while this process writes through the mount.
const serveEnv = "LAYERFS_FSTEST_SERVE"

func TestMain(m *testing.M) {
	if os.Getenv(serveEnv) == "1" {
		os.Exit(serve())
	}
	os.Exit(m.Run())
}

// serve mounts the workspace described by the environment and serves it
// until killed.
func serve() int {
	ctx := context.Background()
	db, err := store.Open(ctx, os.Getenv("LAYERFS_STORE"), store.Options{})
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	root, err := store.ParseID(os.Getenv("LAYERFS_ROOT"))
	if err != nil {
		root = store.ZeroID
	}
	ov, err := overlay.Open(ctx, overlay.Config{Lower: db, Root: root, UpperDir: os.Getenv("LAYERFS_UPPER")})
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	m, err := fs.Mount(ctx, os.Getenv("LAYERFS_MNT"), ov, fs.Options{})
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	fmt.Println("ready")
	m.Wait()
	return 0
}

func TestCrash(t *testing.T) {
	testenv.RequireFUSE(t)
	e := newEnv(t, true)
	upper := filepath.Join(e.DB.WorkspacesDir(), "crash", "upper")
	mnt := filepath.Join(t.TempDir(), "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	rnd := rand.New(rand.NewPCG(3, 4))
	acked := map[string][]byte{} // file -> bytes whose writes returned
	for iter := 0; iter < 20; iter++ {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), serveEnv+"=1", "LAYERFS_STORE="+e.DB.Dir(),
			"LAYERFS_ROOT="+e.Root.String(), "LAYERFS_UPPER="+upper, "LAYERFS_MNT="+mnt)
		cmd.Dir = "/"
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		line, _ := bufio.NewReader(out).ReadString('\n')
		if line != "ready\n" {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("iteration %d: server: %q", iter, line)
		}
		// Write in a loop (new files, appends, and overwrites of a lower
		// file) until the server is killed under us.
		name := fmt.Sprintf("log%d", iter%3)
		killAt := time.Duration(5+rnd.IntN(60)) * time.Millisecond
		killed := make(chan struct{})
		time.AfterFunc(killAt, func() {
			cmd.Process.Kill()
			close(killed)
		})
		f, err := os.OpenFile(filepath.Join(mnt, name), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err == nil {
			for seq := 0; ; seq++ {
				rec := []byte(fmt.Sprintf("iter %d seq %d %s\n", iter, seq, bytes.Repeat([]byte{'x'}, rnd.IntN(3000))))
				if _, err := f.Write(rec); err != nil {
					break
				}
				acked[name] = append(acked[name], rec...)
				if seq%50 == 0 {
					select {
					case <-killed:
					default:
						continue
					}
					break
				}
			}
			f.Close()
		}
		<-killed
		cmd.Wait()
		// The mountpoint is stale now; clean it and remount here.
		if err := fs.CleanStale(mnt); err != nil {
			t.Fatalf("iteration %d: %v", iter, err)
		}
		ov, err := overlay.Open(e.ctx, overlay.Config{Lower: e.DB, Root: e.Root, UpperDir: upper})
		if err != nil {
			t.Fatalf("iteration %d: reopen: %v", iter, err)
		}
		m, err := fs.Mount(e.ctx, mnt, ov, fs.Options{})
		if err != nil {
			t.Fatalf("iteration %d: remount: %v", iter, err)
		}
		for name, want := range acked {
			got, err := os.ReadFile(filepath.Join(mnt, name))
			if err != nil {
				t.Fatalf("iteration %d: %v", iter, err)
			}
			// Writes that were in flight at the kill may have landed
			// too; every acknowledged byte must be there.
			if !bytes.HasPrefix(got, want) {
				t.Fatalf("iteration %d: %s lost acknowledged data: %d bytes, want at least %d", iter, name, len(got), len(want))
			}
			acked[name] = got
		}
		root := e.Commit(ov)
		rep, err := e.DB.Fsck(e.ctx, nil)
		if err != nil {
			t.Fatalf("iteration %d: fsck: %v", iter, err)
		}
		if err := rep.Err(); err != nil {
			t.Fatalf("iteration %d: fsck: %v", iter, err)
		}
		co := e.Checkout(root)
		for name, want := range acked {
			got, err := os.ReadFile(filepath.Join(co, name))
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("iteration %d: commit of %s: %d bytes (%v), want %d", iter, name, len(got), err, len(want))
			}
		}
		if err := m.Unmount(e.ctx); err != nil && !errors.Is(err, syscall.EINVAL) {
			t.Fatalf("iteration %d: unmount: %v", iter, err)
		}
		if n := mountsAt(mnt); n != 0 {
			t.Fatalf("iteration %d: %d mounts left at %s", iter, n, mnt)
		}
	}
}

// mountsAt counts the mounts at dir.
func mountsAt(dir string) int {
	b, _ := os.ReadFile("/proc/self/mountinfo")
	n := 0
	for _, line := range bytes.Split(b, []byte("\n")) {
		f := bytes.Fields(line)
		if len(f) > 4 && string(f[4]) == dir {
			n++
		}
	}
	return n
}
