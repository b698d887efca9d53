package store

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The test binary re-executes itself as a child process that opens the
// same store; childEnv selects what the child does.
const (
	childEnv    = "LAYERFS_STORE_TEST_CHILD"
	childDirEnv = "LAYERFS_STORE_TEST_DIR"
	childArgEnv = "LAYERFS_STORE_TEST_ARG"
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(childEnv); mode != "" {
		if err := runChild(mode, os.Getenv(childDirEnv), os.Getenv(childArgEnv)); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func runChild(mode, dir, arg string) error {
	ctx := context.Background() // a child process: no test to take a context from
	opts := Options{}
	if mode == "lease" {
		ttl, err := time.ParseDuration(arg)
		if err != nil {
			return err
		}
		opts.LeaseTTL = ttl
	}
	db, err := Open(ctx, dir, opts)
	if err != nil {
		return err
	}
	defer db.Close()
	out := os.Stdout // unbuffered: a printed line is acknowledged
	switch mode {
	case "hold":
		fmt.Fprintln(out, "ready")
		_, err := io.Copy(io.Discard, os.Stdin)
		return err
	case "writer":
		// arg is "branch count": commit count times on branch, CAS-publishing each.
		branch, n, _ := strings.Cut(arg, " ")
		count, _ := strconv.Atoi(n)
		for i := 0; i < count; i++ {
			if err := publishOne(ctx, db, out, branch, uint64(os.Getpid())<<24|uint64(i)); err != nil {
				return err
			}
		}
		return nil
	case "gc":
		fmt.Fprintln(out, "ready")
		start := time.Now()
		if _, err := db.GC(ctx, GCOptions{}); err != nil {
			return err
		}
		fmt.Fprintln(out, "took", time.Since(start).Nanoseconds())
		return nil
	case "lease":
		// A host of a shared Store whose lease lives arg: it stores a
		// commit no branch names, opens a workspace on it, and waits.
		c, err := writeSeeded(ctx, db, ZeroID, uint64(os.Getpid()))
		if err != nil {
			return err
		}
		if _, err := db.CreateWorkspace(ctx, Workspace{ID: "ws", Project: "p", Branch: DefaultBranch, Base: c, Head: c, State: "live"}); err != nil {
			return err
		}
		fmt.Fprintf(out, "ACK %s\nready\n", c)
		_, err = io.Copy(io.Discard, os.Stdin)
		return err
	case "crash":
		fmt.Fprintln(out, "ready")
		for i := 0; ; i++ {
			if err := publishOne(ctx, db, out, "main", uint64(os.Getpid())<<24|uint64(i)); err != nil {
				return err
			}
		}
	}
	return fmt.Errorf("unknown mode %q", mode)
}

// publishOne writes a commit on the branch's head and publishes it,
// printing "ACK <id>" once SetBranchHead reported it created.
func publishOne(ctx context.Context, db *DB, out io.Writer, branch string, seed uint64) error {
	for {
		b, err := db.Branch(ctx, "p", branch)
		if err != nil {
			return err
		}
		c, err := writeSeeded(ctx, db, b.Head, seed)
		if err != nil {
			return err
		}
		r, err := db.SetBranchHead(ctx, "p", branch, b.Head, c)
		if err != nil {
			return err
		}
		if r == PublishCreated {
			_, err := fmt.Fprintf(out, "ACK %s\n", c)
			return err
		}
	}
}

// seededFiles is the content of the commit made from seed: a small file,
// a multi-chunk file, a file shared by all commits and one in a subdir.
func seededFiles(seed uint64) (files map[string][]byte, sub []byte) {
	r := rand.New(rand.NewPCG(seed, 1))
	return map[string][]byte{
		"a":      randBytes(seed, r.IntN(8<<10)),
		"b":      randBytes(seed+1, testChunkSize+r.IntN(6*testChunkSize)),
		"shared": randBytes(42, 100<<10),
	}, randBytes(seed+2, r.IntN(3000))
}

func writeSeeded(ctx context.Context, db *DB, parent ID, seed uint64) (ID, error) {
	b, err := db.NewBatch(ctx)
	if err != nil {
		return ZeroID, err
	}
	defer b.Abort()
	files, subData := seededFiles(seed)
	put := func(name string, data []byte) (Entry, error) {
		e := Entry{Name: name, Type: TypeFile, Mode: 0o644, Size: int64(len(data))}
		if len(data) == 0 {
			return e, nil
		}
		if len(data) <= testChunkSize {
			e.Object, e.ObjectKind = Hash(KindChunk, data), KindChunk
			_, err := b.PutChunk(e.Object, data)
			return e, err
		}
		m := &Manifest{Size: int64(len(data))}
		for off := 0; off < len(data); off += testChunkSize {
			c := data[off:min(off+testChunkSize, len(data))]
			id := Hash(KindChunk, c)
			if _, err := b.PutChunk(id, c); err != nil {
				return e, err
			}
			m.Extents = append(m.Extents, Extent{Chunk: id, Length: int64(len(c))})
		}
		id, err := b.PutManifest(m)
		e.Object, e.ObjectKind = id, KindManifest
		return e, err
	}
	se, err := put("c", subData)
	if err != nil {
		return ZeroID, err
	}
	subID, err := b.PutTree(&Tree{Entries: []Entry{se}})
	if err != nil {
		return ZeroID, err
	}
	root := &Tree{}
	for _, name := range sortedKeys(files) {
		e, err := put(name, files[name])
		if err != nil {
			return ZeroID, err
		}
		root.Entries = append(root.Entries, e)
	}
	root.Entries = append(root.Entries, Entry{Name: "sub", Type: TypeDir, Mode: 0o755, Object: subID, ObjectKind: KindTree})
	rootID, err := b.PutTree(root)
	if err != nil {
		return ZeroID, err
	}
	c, err := b.PutCommit(&Commit{Root: rootID, Parents: parentsOf(parent), Message: fmt.Sprint("seed ", seed), TimeNs: time.Now().UnixNano()})
	if err != nil {
		return ZeroID, err
	}
	return c, b.Flush(ctx)
}

// verifySeeded checks that commit c holds exactly what its seed made.
func verifySeeded(t *testing.T, db *DB, c ID) {
	t.Helper()
	ctx := t.Context()
	cm, err := db.Commit(ctx, c)
	require.NoError(t, err, "acknowledged commit %s", c.Short())
	seed, err := strconv.ParseUint(strings.TrimPrefix(cm.Message, "seed "), 10, 64)
	require.NoError(t, err, "commit %s message %q", c.Short(), cm.Message)
	files, subData := seededFiles(seed)
	got := readAll(t, db, c)
	for n, want := range files {
		require.True(t, bytes.Equal(want, got[n]), "commit %s: %s reads back wrong", c.Short(), n)
	}
	tr, _ := db.Tree(ctx, cm.Root)
	se, _ := tr.Find("sub")
	sub, err := db.Tree(ctx, se.Object)
	require.NoError(t, err)
	rc, err := db.OpenContent(ctx, &sub.Entries[0])
	require.NoError(t, err)
	d, err := readCloser(rc)
	require.NoError(t, err, "commit %s: sub/c", c.Short())
	require.True(t, bytes.Equal(subData, d), "commit %s: sub/c reads back wrong", c.Short())
}

func child(t *testing.T, dir, mode, arg string) *exec.Cmd {
	t.Helper()
	exe, err := os.Executable()
	require.NoError(t, err)
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+mode, childDirEnv+"="+dir, childArgEnv+"="+arg)
	cmd.Stderr = os.Stderr
	return cmd
}

// acks collects the ACK lines of a child's stdout; ready is closed at its
// "ready" line.
func acks(t *testing.T, cmd *exec.Cmd) (ready chan struct{}, done func() []ID) {
	ready, _, done = acksFirst(t, cmd)
	return ready, done
}

// acksFirst is acks with a channel closed at the first ACK.
func acksFirst(t *testing.T, cmd *exec.Cmd) (ready, first chan struct{}, done func() []ID) {
	t.Helper()
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	ready, first = make(chan struct{}), make(chan struct{})
	var ids []ID
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			line := sc.Text()
			if line == "ready" {
				close(ready)
				continue
			}
			if s, ok := strings.CutPrefix(line, "ACK "); ok {
				if id, err := ParseID(s); err == nil {
					if len(ids) == 0 {
						close(first)
					}
					ids = append(ids, id)
				}
			}
		}
	}()
	return ready, first, func() []ID { wg.Wait(); return ids }
}

// crashChild waits for a started "crash" child's ready line (in odd rounds
// k, its first acknowledged commit, so that the test keeps checking
// acknowledged commits however slow the machine is), at most limit, lets it
// run for pause, kills it with SIGKILL and returns the commits it
// acknowledged. It fails the test if the child ended on its own.
func crashChild(t *testing.T, cmd *exec.Cmd, ready, first chan struct{}, k int, limit, pause time.Duration, done func() []ID) []ID {
	t.Helper()
	start := ready
	if k%2 == 1 {
		start = first
	}
	select {
	case <-start:
	case <-time.After(limit):
		cmd.Process.Kill()
		t.Fatalf("kill %d: the child did not start in %v", k, limit)
	}
	time.Sleep(pause)
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	ids := done()
	err := cmd.Wait()
	ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
	require.True(t, ok && ws.Signaled(), "kill %d: the child ended on its own: %v", k, err)
	return ids
}

// newProjectStore makes a store with project p whose main head is a
// seeded commit, and closes it.
func newProjectStore(t *testing.T) string {
	t.Helper()
	ctx := t.Context()
	dir := t.TempDir()
	db, err := Init(ctx, dir, Options{})
	require.NoError(t, err)
	c, err := writeSeeded(ctx, db, ZeroID, 1)
	require.NoError(t, err)
	_, err = db.CreateProject(ctx, "p", c)
	require.NoError(t, err)
	require.NoError(t, db.Close())
	return dir
}

func TestTwoProcessesWrite(t *testing.T) {
	ctx := t.Context()
	dir := newProjectStore(t)
	db, err := Open(ctx, dir, Options{})
	require.NoError(t, err)
	defer db.Close()
	var waits []func() []ID
	var cmds []*exec.Cmd
	for _, br := range []string{"b1", "b2", "b3"} {
		b, _ := db.Branch(ctx, "p", "main")
		_, err := db.CreateBranch(ctx, "p", br, b.Head)
		require.NoError(t, err)
	}
	for _, br := range []string{"b1", "b2"} {
		cmd := child(t, dir, "writer", br+" 15")
		_, done := acks(t, cmd)
		require.NoError(t, cmd.Start())
		cmds = append(cmds, cmd)
		waits = append(waits, done)
	}
	// This process writes at the same time, from two goroutines.
	var wg sync.WaitGroup
	var mu sync.Mutex
	var mine []ID
	for g := 0; g < 2; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 10; i++ {
				var out strings.Builder
				if !assert.NoError(t, publishOne(ctx, db, &out, "b3", uint64(1000+g*100+i))) {
					return
				}
				id, _ := ParseID(strings.TrimSpace(strings.TrimPrefix(out.String(), "ACK ")))
				mu.Lock()
				mine = append(mine, id)
				mu.Unlock()
			}
		}(g)
	}
	wg.Wait()
	var all []ID
	for i, cmd := range cmds {
		ids := waits[i]()
		require.NoError(t, cmd.Wait(), "child %d", i)
		require.Len(t, ids, 15, "child %d's acknowledged commits", i)
		all = append(all, ids...)
	}
	require.Len(t, mine, 20, "commits this process published")
	all = append(all, mine...)
	for _, c := range all {
		verifySeeded(t, db, c)
	}
	for _, br := range []string{"b1", "b2", "b3"} {
		b, _ := db.Branch(ctx, "p", br)
		n := 0
		for c := b.Head; !c.IsZero(); n++ {
			c = mustCommit(t, db, c).Parent()
		}
		want := map[string]int{"b1": 17, "b2": 17, "b3": 22}[br] // + the first commit and the genesis parent chain
		assert.Equal(t, want-1, n, "commits on branch %s", br)
	}
	nums, _ := db.packs.List()
	assert.GreaterOrEqual(t, len(nums), 3, "packs three writing processes wrote; each writer needs its own")
	mustFsck(t, db)
}

func TestGCBusyWhileAnotherProcessHasTheStore(t *testing.T) {
	ctx := t.Context()
	dir := newProjectStore(t)
	cmd := child(t, dir, "hold", "")
	stdin, _ := cmd.StdinPipe()
	ready, done := acks(t, cmd)
	require.NoError(t, cmd.Start())
	<-ready
	db, err := Open(ctx, dir, Options{})
	require.NoError(t, err)
	defer db.Close()
	start := time.Now()
	_, err = db.GC(ctx, GCOptions{})
	require.ErrorIs(t, err, ErrBusy)
	if time.Since(start) > time.Second {
		t.Fatalf("GC took %v to fail; it must fail fast", time.Since(start))
	}
	// The failed attempt must not have lost this handle's shared lock:
	// the store still works and GC succeeds once the other process left.
	readAll(t, db, mustBranch(t, db, "main"))
	stdin.Close()
	done()
	require.NoError(t, cmd.Wait())
	_, err = db.GC(ctx, GCOptions{})
	require.NoError(t, err, "GC after the other process closed")
}

func mustBranch(t *testing.T, db *DB, name string) ID {
	t.Helper()
	b, err := db.Branch(t.Context(), "p", name)
	require.NoError(t, err)
	return b.Head
}

// TestCrashSafety SIGKILLs a child that writes batches and publishes
// commits in a loop, at random points, many times. After each kill the
// store opens, passes Fsck, and holds every acknowledged commit intact.
func TestCrashSafety(t *testing.T) {
	kills := 60
	if testing.Short() {
		kills = 10
	}
	ctx := t.Context()
	dir := newProjectStore(t)
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	var acked []ID
	for k := 0; k < kills; k++ {
		cmd := child(t, dir, "crash", "")
		ready, first, done := acksFirst(t, cmd)
		require.NoError(t, cmd.Start())
		// Every other round lets the child publish at least once, so the
		// test keeps checking acknowledged commits however slow the
		// machine is; the others may kill it anywhere from the start.
		ids := crashChild(t, cmd, ready, first, k, 60*time.Second, time.Duration(rng.IntN(150_000))*time.Microsecond, done)

		db, err := Open(ctx, dir, Options{})
		require.NoError(t, err, "kill %d: open", k)
		rep, err := db.Fsck(ctx, nil)
		require.NoError(t, err, "kill %d: fsck", k)
		require.NoError(t, rep.Err(), "kill %d: fsck", k)
		for _, c := range ids {
			verifySeeded(t, db, c)
		}
		// Every acknowledged commit is on main's history: the head is the
		// last one or a commit published after it.
		if len(ids) > 0 {
			last := ids[len(ids)-1]
			found := false
			for c := mustBranch(t, db, "main"); !c.IsZero() && !found; c = mustCommit(t, db, c).Parent() {
				found = c == last
			}
			require.True(t, found, "kill %d: acknowledged commit %s is not in main's history", k, last.Short())
		}
		acked = append(acked, ids...)
		// Earlier rounds' commits are still there (a sample, to stay fast).
		for i := 0; i < 3 && len(acked) > 0; i++ {
			verifySeeded(t, db, acked[rng.IntN(len(acked))])
		}
		if k%20 == 19 {
			// GC after crashes: dead pack tails and orphans go, nothing live.
			_, err := db.GC(ctx, GCOptions{})
			require.NoError(t, err, "kill %d: gc", k)
			mustFsck(t, db)
		}
		require.NoError(t, db.Close())
	}
	t.Logf("%d kills, %d acknowledged commits", kills, len(acked))
	require.GreaterOrEqual(t, len(acked), kills/2, "commits acknowledged over %d runs: the test exercised little", kills)
}

// TestGCCrashSafety SIGKILLs a GC at random points while it deletes rows,
// rewrites packs and removes files. After each kill the store opens,
// passes Fsck and every published commit reads back.
func TestGCCrashSafety(t *testing.T) {
	rounds := 10
	if testing.Short() {
		rounds = 4
	}
	ctx := t.Context()
	dir := newProjectStore(t)
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 9))
	var live []ID
	killed := 0
	window := 100 * time.Millisecond
	for k := 0; k < rounds; k++ {
		db, err := Open(ctx, dir, Options{})
		require.NoError(t, err)
		// Live commits on main and dead ones on a deleted branch, mixed
		// in the same packs so that GC must rewrite them.
		for i := 0; i < 3; i++ {
			var out strings.Builder
			require.NoError(t, publishOne(ctx, db, &out, "main", uint64(k*100+i)))
			id, _ := ParseID(strings.TrimSpace(strings.TrimPrefix(out.String(), "ACK ")))
			live = append(live, id)
		}
		head := mustBranch(t, db, "main")
		_, err = db.CreateBranch(ctx, "p", "doomed", head)
		require.NoError(t, err)
		for i := 0; i < 3; i++ {
			require.NoError(t, publishOne(ctx, db, io.Discard, "doomed", uint64(k*100+50+i)))
			commitFiles(t, db, head, "dead", map[string][]byte{"x": randBytes(uint64(k*1000+i), 2<<20)})
		}
		require.NoError(t, db.DeleteBranch(ctx, "p", "doomed"))
		require.NoError(t, db.Close())

		cmd := child(t, dir, "gc", "")
		out, err := cmd.StdoutPipe()
		require.NoError(t, err)
		require.NoError(t, cmd.Start())
		sc := bufio.NewScanner(out)
		sc.Scan() // ready
		time.Sleep(time.Duration(rng.Int64N(int64(window))))
		cmd.Process.Signal(syscall.SIGKILL)
		for sc.Scan() {
			// A GC that finished first says how long it took: aim the
			// next kills inside that span.
			if ns, ok := strings.CutPrefix(sc.Text(), "took "); ok {
				if n, err := strconv.ParseInt(ns, 10, 64); err == nil {
					window = time.Duration(n)
				}
			}
		}
		cmd.Wait()
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			killed++
		}

		db, err = Open(ctx, dir, Options{})
		require.NoError(t, err, "round %d: open", k)
		rep, err := db.Fsck(ctx, nil)
		require.NoError(t, err, "round %d: fsck after a killed GC", k)
		require.NoError(t, rep.Err(), "round %d: fsck after a killed GC", k)
		for _, c := range live {
			verifySeeded(t, db, c)
		}
		require.NoError(t, db.Close())
	}
	t.Logf("%d of %d GCs killed before they finished", killed, rounds)
	require.GreaterOrEqual(t, killed, rounds/3, "GCs of %d killed mid-way: the test exercised little", rounds)
	// A GC that completes leaves no pack without live chunks behind.
	db, err := Open(ctx, dir, Options{})
	require.NoError(t, err)
	defer db.Close()
	_, err = db.GC(ctx, GCOptions{})
	require.NoError(t, err)
	packs := livePackBytes(t, db)
	nums, _ := db.packs.List()
	for _, n := range nums {
		assert.NotZero(t, packs[n], "pack %d has no live chunk after GC", n)
	}
	for _, c := range live {
		verifySeeded(t, db, c)
	}
	mustFsck(t, db)
}
