package commit

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/internal/store"
)

// genDir writes a deterministic directory for seed, mtimes included, so
// that the parent can rebuild what the child committed.
func genDir(t testing.TB, dir string, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 7))
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "sub"), 0o755))
	for i := range 3 + r.IntN(4) {
		b := make([]byte, r.IntN(4000))
		for j := range b {
			b[j] = byte(r.Uint32())
		}
		require.NoError(t, os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%d", i)), b, 0o644))
	}
	big := make([]byte, 100<<10+r.IntN(200<<10)) // chunked: several pack records
	for j := range big {
		big[j] = byte(r.Uint32())
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "sub/big"), big, 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "seed"), []byte(strconv.FormatUint(seed, 10)), 0o644))
	ts := time.Unix(1_600_000_000+int64(seed), 0)
	for _, p := range []string{"sub/big", "sub", "seed", "."} {
		require.NoError(t, os.Chtimes(filepath.Join(dir, p), ts, ts))
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		require.NoError(t, os.Chtimes(filepath.Join(dir, e.Name()), ts, ts))
	}
}

// TestCrashChild is the child of TestCrashSafety: it commits directories
// in a loop and prints an ACK line after each acknowledged publish.
func TestCrashChild(t *testing.T) {
	dir := os.Getenv("LAYERFS_CRASH_STORE")
	if dir == "" {
		t.Skip("child process of TestCrashSafety")
	}
	round, _ := strconv.ParseUint(os.Getenv("LAYERFS_CRASH_ROUND"), 10, 64)
	ctx := t.Context()
	db, err := store.Open(ctx, dir, store.Options{})
	if err != nil {
		fmt.Println("ERR", err)
		os.Exit(3)
	}
	work := filepath.Join(dir, "..", "work", strconv.FormatUint(round, 10))
	for i := uint64(0); ; i++ {
		seed := round*10000 + i
		w := filepath.Join(work, strconv.FormatUint(seed, 10))
		genDir(t, w, seed)
		p, _, err := FromDir(ctx, db, "p", "main", w, Meta{Message: strconv.FormatUint(seed, 10)}, nil)
		if err == nil {
			err = p.Err()
		}
		if err != nil {
			fmt.Println("ERR", err)
			os.Exit(3)
		}
		fmt.Printf("ACK %d %s\n", seed, p.Commit)
	}
}

// TestCrashSafety SIGKILLs a committing child at random points, then
// checks that the store opens, fsck passes and every acknowledged commit
// is on the branch and checks out byte-exact.
func TestCrashSafety(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	ctx := t.Context()
	base := t.TempDir()
	dir := filepath.Join(base, "store")
	db, err := store.Init(ctx, dir, store.Options{})
	require.NoError(t, err)
	_, _, _, err = CreateProject(ctx, db, "p", "", Meta{}, nil)
	require.NoError(t, err)
	require.NoError(t, db.Close())

	type ack struct {
		seed uint64
		id   store.ID
	}
	var acked []ack
	r := rand.New(rand.NewPCG(1, 2))
	const rounds = 55
	kills := 0
	for round := range uint64(rounds) {
		cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), "LAYERFS_CRASH_STORE="+dir, "LAYERFS_CRASH_ROUND="+strconv.FormatUint(round+1, 10))
		out, err := cmd.StdoutPipe()
		require.NoError(t, err)
		cmd.Stderr = os.Stderr
		require.NoError(t, cmd.Start())
		lines := make(chan string)
		go func() {
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				lines <- sc.Text()
			}
			close(lines)
		}()
		// Kill after the child's first acknowledged commit plus a random
		// delay, or at a random point of its start-up.
		delay := time.Duration(r.IntN(120)) * time.Millisecond
		var timer <-chan time.Time
		if r.IntN(5) == 0 {
			timer = time.After(delay)
		}
		var fresh []ack
		killed := false
		deadline := time.After(30 * time.Second)
	read:
		for {
			select {
			case line, ok := <-lines:
				if !ok {
					break read
				}
				if strings.HasPrefix(line, "ERR") {
					t.Fatalf("child: %s", line)
				}
				if f := strings.Fields(line); len(f) == 3 && f[0] == "ACK" {
					seed, _ := strconv.ParseUint(f[1], 10, 64)
					id, err := store.ParseID(f[2])
					require.NoError(t, err)
					fresh = append(fresh, ack{seed, id})
					if timer == nil {
						timer = time.After(delay)
					}
				}
			case <-timer:
				require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
				killed, timer = true, nil
			case <-deadline:
				t.Fatalf("round %d: the child made no progress", round)
			}
		}
		if !killed {
			t.Fatalf("round %d: the child exited by itself", round)
		}
		err = cmd.Wait()
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() {
			t.Fatalf("round %d: child ended with %v, want SIGKILL", round, err)
		}
		kills++
		acked = append(acked, fresh...)

		db, err := store.Open(ctx, dir, store.Options{})
		require.NoError(t, err, "round %d: store does not open after SIGKILL", round)
		rep, err := db.Fsck(ctx, nil)
		require.NoError(t, err)
		require.NoError(t, rep.Err(), "round %d", round)
		head, err := db.Branch(ctx, "p", "main")
		require.NoError(t, err)
		onBranch := map[store.ID]bool{}
		log, err := Log(ctx, db, "p", "main", store.ZeroID, 0)
		require.NoError(t, err)
		for _, e := range log {
			onBranch[e.ID] = true
		}
		for _, a := range acked {
			if !onBranch[a.id] {
				t.Fatalf("round %d: acknowledged commit %s (seed %d) is not on main (head %s)", round, a.id.Short(), a.seed, head.Head.Short())
			}
		}
		for _, a := range fresh {
			c, err := db.Commit(ctx, a.id)
			require.NoError(t, err)
			want := filepath.Join(base, "want", strconv.FormatUint(a.seed, 10))
			genDir(t, want, a.seed)
			got := filepath.Join(base, "got", strconv.FormatUint(a.seed, 10))
			_, err = Checkout(ctx, db, c.Root, got, nil)
			require.NoError(t, err, "round %d: checkout of %s", round, a.id.Short())
			compareDirs(t, want, got, cmpOpts{dirTime: true})
			require.NoError(t, os.RemoveAll(want))
			require.NoError(t, os.RemoveAll(got))
		}
		require.NoError(t, db.Close())
		require.NoError(t, os.RemoveAll(filepath.Join(base, "work")))
		if t.Failed() {
			return
		}
	}
	t.Logf("%d kills, %d acknowledged commits, all present and byte-exact", kills, len(acked))
	if kills < 50 || len(acked) < 50 {
		t.Errorf("only %d kills and %d acknowledged commits", kills, len(acked))
	}
}
