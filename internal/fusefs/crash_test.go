package fusefs_test

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
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/internal/fusefs"
	"layerfs.dev/layerfs/internal/kerneloverlay"
	"layerfs.dev/layerfs/internal/mountinfo"
	"layerfs.dev/layerfs/internal/overlay"
	"layerfs.dev/layerfs/internal/overlay/overlaytest"
	"layerfs.dev/layerfs/internal/store"
	"layerfs.dev/layerfs/internal/testenv"
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
	var wait func()
	if os.Getenv(pathEnv) == "overlay" {
		// The workspace directory is the upper's parent.
		m, err := kerneloverlay.New(ctx, kerneloverlay.Config{Lower: db, Root: root,
			Dir: filepath.Dir(os.Getenv("LAYERFS_UPPER")), Target: os.Getenv("LAYERFS_MNT"), Committed: overlay.EmptyUpper()})
		if err != nil {
			fmt.Println("error:", err)
			return 1
		}
		_ = m
		wait = func() { select {} }
	} else {
		ov, err := overlay.Open(ctx, overlay.Config{Lower: db, Root: root, UpperDir: os.Getenv("LAYERFS_UPPER")})
		if err != nil {
			fmt.Println("error:", err)
			return 1
		}
		m, err := fusefs.Mount(ctx, os.Getenv("LAYERFS_MNT"), ov, fusefs.Options{})
		if err != nil {
			fmt.Println("error:", err)
			return 1
		}
		wait = m.Wait
	}
	if os.Getenv(holdEnv) == "1" {
		// Hand the FUSE device to a sleeping child, as a leak into a
		// sandbox did: the connection then outlives this server.
		holder := exec.Command("sleep", "1000")
		holder.ExtraFiles = []*os.File{fuseDevice()}
		if err := holder.Start(); err != nil {
			fmt.Println("error:", err)
			return 1
		}
		fmt.Println("holder", holder.Process.Pid)
	}
	fmt.Println("ready")
	wait()
	return 0
}

// pathEnv names the data path serve mounts: "overlay", else fuse.
const pathEnv = "LAYERFS_FSTEST_PATH"

// holdEnv asks serve to start a process that holds its FUSE device.
const holdEnv = "LAYERFS_FSTEST_HOLD"

// fuseDevice finds this process's /dev/fuse descriptor.
func fuseDevice() *os.File {
	ents, _ := os.ReadDir("/proc/self/fd")
	for _, e := range ents {
		if target, _ := os.Readlink("/proc/self/fd/" + e.Name()); target == "/dev/fuse" {
			fd, _ := strconv.Atoi(e.Name())
			// A duplicate: the *os.File closes its descriptor when it is
			// collected, which must not be the server's own.
			dup, err := unix.Dup(fd)
			if err != nil {
				return nil
			}
			return os.NewFile(uintptr(dup), "/dev/fuse")
		}
	}
	return nil
}

// startServer serves a workspace of e at mnt in a child process and waits
// until it is mounted. The extra environment is added to the child's.
func startServer(t *testing.T, e *env, upper, mnt string, extra ...string) (*exec.Cmd, *bufio.Reader) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), serveEnv+"=1", "LAYERFS_STORE="+e.DB.Dir(),
		"LAYERFS_ROOT="+e.Root.String(), "LAYERFS_UPPER="+upper, "LAYERFS_MNT="+mnt), extra...)
	cmd.Dir = "/"
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	return cmd, bufio.NewReader(out)
}

func TestCrash(t *testing.T) {
	testenv.RequireFUSE(t)
	e := newEnv(t, true)
	upper := filepath.Join(e.DB.WorkspacesDir(), "crash", "upper")
	mnt := filepath.Join(t.TempDir(), "mnt")
	require.NoError(t, os.Mkdir(mnt, 0o755))
	rnd := rand.New(rand.NewPCG(3, 4))
	acked := map[string][]byte{} // file -> bytes whose writes returned
	for iter := 0; iter < 20; iter++ {
		cmd, out := startServer(t, e, upper, mnt)
		line, _ := out.ReadString('\n')
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
		require.NoError(t, fusefs.CleanStale(mnt), "iteration %d", iter)
		ov, err := overlay.Open(e.ctx, overlay.Config{Lower: e.DB, Root: e.Root, UpperDir: upper})
		require.NoError(t, err, "iteration %d: reopen", iter)
		m, err := fusefs.Mount(e.ctx, mnt, ov, fusefs.Options{})
		require.NoError(t, err, "iteration %d: remount", iter)
		for name, want := range acked {
			got, err := os.ReadFile(filepath.Join(mnt, name))
			require.NoError(t, err, "iteration %d", iter)
			// Writes that were in flight at the kill may have landed
			// too; every acknowledged byte must be there.
			if !bytes.HasPrefix(got, want) {
				t.Fatalf("iteration %d: %s lost acknowledged data: %d bytes, want at least %d", iter, name, len(got), len(want))
			}
			acked[name] = got
		}
		root := e.Commit(ov)
		rep, err := e.DB.Fsck(e.ctx, nil)
		require.NoError(t, err, "iteration %d: fsck", iter)
		require.NoError(t, rep.Err(), "iteration %d: fsck", iter)
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

// TestCleanHungMount is the crash that used to take a Store out of service:
// the server dies while another process still holds its FUSE device, so
// the connection never aborts and any request to the mount (a statfs, a
// stat) waits forever. CleanStale must neither send one nor wait: it
// aborts the connection through the fuse control file system and detaches
// the mount, after which the mountpoint is usable and a new server mounts.
func TestCleanHungMount(t *testing.T) {
	testenv.RequireFUSE(t)
	e := newEnv(t, true)
	upper := filepath.Join(e.DB.WorkspacesDir(), "hung", "upper")
	mnt := filepath.Join(t.TempDir(), "mnt")
	require.NoError(t, os.Mkdir(mnt, 0o755))
	cmd, out := startServer(t, e, upper, mnt, holdEnv+"=1")
	var holder int
	if _, err := fmt.Fscanf(out, "holder %d\nready\n", &holder); err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("server: %v", err)
	}
	defer syscall.Kill(holder, syscall.SIGKILL)
	cmd.Process.Kill()
	cmd.Wait()

	done := make(chan error, 1)
	go func() { done <- fusefs.CleanStale(mnt) }()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(time.Minute):
		t.Fatal("CleanStale of a hung mount did not return in a minute")
	}
	ms, err := mountinfo.Read(mountinfo.Self)
	require.NoError(t, err)
	if left := mountinfo.Below(ms, mnt); len(left) > 0 {
		t.Fatalf("mounts left at %s: %+v", mnt, left)
	}
	if ents, err := os.ReadDir(mnt); err != nil || len(ents) > 0 {
		t.Fatalf("mountpoint after clean: %v entries, %v", len(ents), err)
	}
	ov, err := overlay.Open(e.ctx, overlay.Config{Lower: e.DB, Root: e.Root, UpperDir: upper})
	require.NoError(t, err)
	m, err := fusefs.Mount(e.ctx, mnt, ov, fusefs.Options{})
	require.NoError(t, err, "remount")
	defer m.Unmount(e.ctx)
	if b, err := os.ReadFile(filepath.Join(mnt, "f1")); err != nil || string(b) != "hello\n" {
		t.Fatalf("f1 after remount: %q, %v", b, err)
	}
}

// TestCrashOverlay kills the daemon serving an overlay workspace's FUSE
// lower, once with its FUSE device held by another process (the connection
// then never aborts by itself): kerneloverlay.Detach must take the overlay
// and the lower down without sending them a request, and a remount of the
// same upper must show and commit everything written before the kill.
func TestCrashOverlay(t *testing.T) {
	for _, hold := range []bool{false, true} {
		t.Run(fmt.Sprintf("held=%v", hold), func(t *testing.T) {
			e := newEnvOn(t, true, "overlay")
			ws := filepath.Join(e.DB.WorkspacesDir(), "crash")
			upper := filepath.Join(ws, "upper")
			mnt := filepath.Join(t.TempDir(), "mnt")
			require.NoError(t, os.Mkdir(mnt, 0o755))
			extra := []string{pathEnv + "=overlay"}
			if hold {
				extra = append(extra, holdEnv+"=1")
			}
			cmd, out := startServer(t, e, upper, mnt, extra...)
			if hold {
				var holder int
				if _, err := fmt.Fscanf(out, "holder %d\n", &holder); err != nil {
					cmd.Process.Kill()
					cmd.Wait()
					t.Fatalf("server: %v", err)
				}
				defer syscall.Kill(holder, syscall.SIGKILL)
			}
			if line, _ := out.ReadString('\n'); line != "ready\n" {
				cmd.Process.Kill()
				cmd.Wait()
				t.Fatalf("server: %q", line)
			}
			sh(t, mnt, "echo new > created && cat f1 > copy && echo more >> a/f2 && rm a/b/f3 && mkdir -p n && echo deep > n/x")
			ref := filepath.Join(t.TempDir(), "ref")
			sh(t, "/", "cp -a "+e.Base+" "+ref)
			sh(t, ref, "echo new > created && cat f1 > copy && echo more >> a/f2 && rm a/b/f3 && mkdir -p n && echo deep > n/x")
			cmd.Process.Kill()
			cmd.Wait()

			done := make(chan error, 1)
			go func() { done <- kerneloverlay.Detach(mnt, ws) }()
			select {
			case err := <-done:
				require.NoError(t, err)
			case <-time.After(time.Minute):
				t.Fatal("Detach of a crashed overlay workspace did not return in a minute")
			}
			ms, err := mountinfo.Read(mountinfo.Self)
			require.NoError(t, err)
			if left := append(mountinfo.Below(ms, mnt), mountinfo.Below(ms, ws)...); len(left) > 0 {
				t.Fatalf("mounts left: %+v", left)
			}
			m, err := e.serve(ws, mnt, e.Root, store.ZeroID, nil)
			require.NoError(t, err, "remount")
			defer m.Unmount(e.ctx)
			overlaytest.RequireSame(t, ref, mnt, "remounted workspace")
			root := e.Commit(m)
			overlaytest.RequireSame(t, ref, e.Checkout(root), "commit after the crash")
		})
	}
}
