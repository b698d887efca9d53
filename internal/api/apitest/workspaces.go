package apitest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/wire"
	"layerfs.dev/layerfs/wire/errclass"
)

// workspaceChecks are those of WorkspaceManager.
var workspaceChecks = []check{
	{"WorkspaceLifecycle", checkWorkspaceLifecycle},
	{"Network", checkNetwork},
	{"WorkspaceAtRef", checkWorkspaceAtRef},
	{"HeadMoved", checkHeadMoved},
	{"UnknownWorkspace", checkUnknownWorkspace},
}

// execChecks are those of Executor.
var execChecks = []check{
	{"ExecOutput", checkExecOutput},
	{"ExecRequest", checkExecRequest},
	{"ExecTimeout", checkExecTimeout},
	{"ExecCanceled", checkExecCanceled},
	{"Attach", checkAttach},
	{"ExecReceiptIsItsOwn", checkExecReceiptIsItsOwn},
}

// ids lists the ids of workspaces.
func ids(wss []wire.Workspace) []string {
	var out []string
	for _, ws := range wss {
		out = append(out, ws.ID)
	}
	return out
}

// checkNetwork: a live workspace's network changes and is listed as
// changed; a bad change is refused as invalid and leaves it as it was; a
// workspace that does not exist is not found.
func checkNetwork(f *fixture) {
	p := f.project()
	ws := f.workspace(p, "main")
	got, err := f.eng.SetNetwork(f.ctx, ws.ID, wire.NetworkChange{Mode: wire.NetworkHost})
	require.NoError(f.t, err)
	assert.Equal(f.t, wire.NetworkHost, got.Network)
	for _, bad := range []wire.NetworkChange{{Mode: "bridge"}, {Mode: wire.NetworkEgress, Egress: []wire.NetworkRule{{CIDR: "0.0.0.0/0"}}},
		{Mode: wire.NetworkNone, Egress: []wire.NetworkRule{{Domain: "example.com"}}}, {}} {
		_, err := f.eng.SetNetwork(f.ctx, ws.ID, bad)
		assert.ErrorIs(f.t, err, errclass.Invalid, "%+v", bad)
	}
	st, err := f.eng.WorkspaceStatus(f.ctx, ws.ID)
	require.NoError(f.t, err)
	assert.Equal(f.t, wire.NetworkHost, st.Network, "the network after refused changes")
	got, err = f.eng.SetNetwork(f.ctx, ws.ID, wire.NetworkChange{Mode: wire.NetworkNone})
	require.NoError(f.t, err)
	assert.Equal(f.t, wire.NetworkNone, got.Network)
	_, err = f.eng.SetNetwork(f.ctx, "ws-000000000000", wire.NetworkChange{Mode: wire.NetworkNone})
	assert.Error(f.t, err, "a workspace that does not exist")
}

// checkWorkspaceLifecycle: a workspace is mounted on its branch's head,
// listed, changed, committed (created, then up-to-date), remounted, and
// ended only with its changes committed or discarded.
func checkWorkspaceLifecycle(f *fixture) {
	p := f.project()
	head := f.head(p, "main")
	ws := f.workspace(p, "main")
	assert.NotEmpty(f.t, ws.ID)
	assert.Equal(f.t, wire.StateMounted, ws.State)
	assert.Equal(f.t, []string{p, "main", head, head}, []string{ws.Project, ws.Branch, ws.Base, ws.Head}, "project, branch, base and head")
	assert.Equal(f.t, wire.NetworkNone, ws.Network, "no network unless asked")
	for name, list := range map[string]func(context.Context) ([]wire.Workspace, error){
		"Workspaces": f.eng.Workspaces, "FleetWorkspaces": f.eng.FleetWorkspaces,
	} {
		wss, err := list(f.ctx)
		require.NoError(f.t, err, name)
		assert.Contains(f.t, ids(wss), ws.ID, name)
	}
	st, err := f.eng.WorkspaceStatus(f.ctx, ws.ID)
	require.NoError(f.t, err)
	assert.Equal(f.t, ws.ID, st.ID)
	assert.Empty(f.t, st.Changes, "a new workspace's changes")

	f.write(ws.ID, "a.txt", "a")
	st, err = f.eng.WorkspaceStatus(f.ctx, ws.ID)
	require.NoError(f.t, err)
	assert.Equal(f.t, []wire.Change{{Path: "a.txt", Kind: wire.Added, NewType: "file"}}, st.Changes)
	f.isClass(f.eng.EndWorkspace(f.ctx, ws.ID, false), errclass.Uncommitted, "a plain end with changes")

	cr, err := f.eng.CommitWorkspace(f.ctx, ws.ID, wire.CommitRequest{Message: "add a", Author: "suite <suite@example.org>"})
	require.NoError(f.t, err)
	assert.Equal(f.t, wire.Created, cr.Result)
	assert.Equal(f.t, cr.Commit, cr.Head, "the new commit is the head")
	assert.Equal(f.t, cr.Commit, f.head(p, "main"), "main's head")
	c, err := f.eng.Commit(f.ctx, p, cr.Commit)
	require.NoError(f.t, err)
	assert.Equal(f.t, []string{"add a", "suite <suite@example.org>", head}, []string{c.Message, c.Author, c.Parent}, "message, author, parent")
	st, err = f.eng.WorkspaceStatus(f.ctx, ws.ID)
	require.NoError(f.t, err)
	assert.Equal(f.t, cr.Commit, st.Head, "the workspace's head after its commit")
	assert.Empty(f.t, st.Changes, "changes after the commit")
	again, err := f.eng.CommitWorkspace(f.ctx, ws.ID, wire.CommitRequest{})
	require.NoError(f.t, err)
	assert.Equal(f.t, wire.UpToDate, again.Result, "a commit with nothing changed")
	assert.Equal(f.t, "a", f.read(ws.ID, "a.txt"), "the mount after the commit")

	m, err := f.eng.MountWorkspace(f.ctx, ws.ID)
	require.NoError(f.t, err, "mount a mounted workspace")
	assert.Equal(f.t, wire.StateMounted, m.State)
	assert.Equal(f.t, "a", f.read(ws.ID, "a.txt"), "the mount after a remount")

	require.NoError(f.t, f.eng.EndWorkspace(f.ctx, ws.ID, false), "a plain end with nothing to commit")
	_, err = f.eng.WorkspaceStatus(f.ctx, ws.ID)
	f.isClass(err, errclass.NotFound, "an ended workspace")
	wss, err := f.eng.Workspaces(f.ctx)
	require.NoError(f.t, err)
	assert.NotContains(f.t, ids(wss), ws.ID, "an ended workspace is not listed")

	gone := f.workspace(p, "main")
	f.write(gone.ID, "b.txt", "b")
	require.NoError(f.t, f.eng.EndWorkspace(f.ctx, gone.ID, true), "an end that discards")
	assert.Equal(f.t, cr.Commit, f.head(p, "main"), "a discarded workspace commits nothing")
}

// checkWorkspaceAtRef: a workspace can start at any ref of the project
// and commits to its branch; a missing project or branch is not found.
func checkWorkspaceAtRef(f *fixture) {
	p := f.project()
	first := f.head(p, "main")
	ws := f.workspace(p, "main")
	f.write(ws.ID, "later.txt", "later")
	_, err := f.eng.CommitWorkspace(f.ctx, ws.ID, wire.CommitRequest{Message: "later"})
	require.NoError(f.t, err)
	_, err = f.eng.ForkBranch(f.ctx, p, wire.ForkBranch{Name: "old", From: "layer:1"})
	require.NoError(f.t, err)
	old := f.workspaceWith(wire.WorkspaceSpec{Project: p, Branch: "old", At: "layer:1"})
	assert.Equal(f.t, first, old.Base, "a workspace at layer:1")
	_, err = f.eng.Stat(f.ctx, old.ID, "later.txt")
	f.isClass(err, errclass.NotFound, "a file of a later commit")
	_, err = f.eng.CreateWorkspace(f.ctx, wire.WorkspaceSpec{Project: p, Branch: "none"})
	f.isClass(err, errclass.NotFound, "a workspace on an unknown branch")
	_, err = f.eng.CreateWorkspace(f.ctx, wire.WorkspaceSpec{Project: p + "-none", Branch: "main"})
	f.isClass(err, errclass.NotFound, "a workspace in an unknown project")
}

// checkHeadMoved: of two workspaces committing on one head, the second
// loses the race: head-moved, which is a result, its commit stored, the
// branch's head the winner's and the loser's changes kept.
func checkHeadMoved(f *fixture) {
	p := f.project()
	a, b := f.workspace(p, "main"), f.workspace(p, "main")
	f.write(a.ID, "x", "a")
	f.write(b.ID, "x", "b")
	won, err := f.eng.CommitWorkspace(f.ctx, a.ID, wire.CommitRequest{Message: "a"})
	require.NoError(f.t, err)
	require.Equal(f.t, wire.Created, won.Result)
	lost, err := f.eng.CommitWorkspace(f.ctx, b.ID, wire.CommitRequest{Message: "b"})
	require.NoError(f.t, err, "a lost race is a result")
	assert.Equal(f.t, wire.HeadMoved, lost.Result)
	assert.Equal(f.t, won.Commit, lost.Head, "the head is the winner's")
	assert.NotEqual(f.t, won.Commit, lost.Commit, "the loser's commit")
	c, err := f.eng.Commit(f.ctx, p, lost.Commit)
	if assert.NoError(f.t, err, "the loser's commit is stored") {
		assert.Equal(f.t, "b", c.Message)
	}
	assert.Equal(f.t, won.Commit, f.head(p, "main"), "main's head")
	st, err := f.eng.WorkspaceStatus(f.ctx, b.ID)
	require.NoError(f.t, err)
	assert.NotEmpty(f.t, st.Changes, "the loser keeps its changes")
	assert.Equal(f.t, "b", f.read(b.ID, "x"))
	f.isClass(f.eng.EndWorkspace(f.ctx, b.ID, false), errclass.Uncommitted, "a plain end of the loser")
}

// checkUnknownWorkspace: every call on a workspace the engine does not
// know is not found.
func checkUnknownWorkspace(f *fixture) {
	const id = "ws-0123456789ab"
	for _, c := range workspaceCalls(f, id) {
		f.isClass(c.call(), errclass.NotFound, c.name+" of an unknown workspace")
	}
}

// workspaceCall is one call on a workspace, for the checks that every
// call answers alike.
type workspaceCall struct {
	name string
	call func() error
}

// workspaceCalls are a call of every method that takes a workspace id.
func workspaceCalls(f *fixture, id string) []workspaceCall {
	ctx := f.ctx
	return append([]workspaceCall{
		{"WorkspaceStatus", func() error { _, err := f.eng.WorkspaceStatus(ctx, id); return err }},
		{"MountWorkspace", func() error { _, err := f.eng.MountWorkspace(ctx, id); return err }},
		{"CommitWorkspace", func() error { _, err := f.eng.CommitWorkspace(ctx, id, wire.CommitRequest{}); return err }},
		{"EndWorkspace", func() error { return f.eng.EndWorkspace(ctx, id, true) }},
		{"UpdateWorkspace", func() error { _, err := f.eng.UpdateWorkspace(ctx, id, wire.UpdateRequest{}); return err }},
		{"ResolveConflicts", func() error { _, err := f.eng.ResolveConflicts(ctx, id, wire.ResolveRequest{}); return err }},
		{"ForkWorkspace", func() error { _, err := f.eng.ForkWorkspace(ctx, id, wire.ForkRequest{}); return err }},
		{"Exec", func() error {
			_, err := f.eng.Exec(ctx, id, wire.ExecRequest{Argv: []string{"true"}}, &bytes.Buffer{}, &bytes.Buffer{})
			return err
		}},
		{"WriteFile", func() error { return f.eng.WriteFile(ctx, id, "f", 0o644, strings.NewReader("x")) }},
		{"ReadFile", func() error { _, err := f.eng.ReadFile(ctx, id, "f", &bytes.Buffer{}); return err }},
		{"PutTar", func() error { return f.eng.PutTar(ctx, id, ".", bytes.NewReader(tarOf(f.t, tarFile("f", "x")))) }},
		{"GetTar", func() error { return f.eng.GetTar(ctx, id, ".", &bytes.Buffer{}) }},
		{"Stat", func() error { _, err := f.eng.Stat(ctx, id, "."); return err }},
		{"List", func() error { _, err := f.eng.List(ctx, id, ".", false, "", 10); return err }},
		{"WatchWorkspace", func() error {
			return f.eng.WatchWorkspace(ctx, id, ".", func([]wire.FileEvent) error { return errors.New("emitted") })
		}},
	}, serviceCalls(f, id)...)
}

// checkExecOutput: stdout and stderr apart, the exit code a result, the
// command in the workspace at /workspace, its writes seen by the files.
func checkExecOutput(f *fixture) {
	ws := f.workspace(f.project(), "main")
	var out, errb bytes.Buffer
	res, err := f.eng.Exec(f.ctx, ws.ID, wire.ExecRequest{Body: "pwd; echo to stderr >&2; echo made > made.txt; exit 3"}, &out, &errb)
	require.NoError(f.t, err, "a command that exits non-zero is a result")
	assert.Equal(f.t, 3, res.ExitCode)
	assert.Equal(f.t, "/workspace\n", out.String())
	assert.Equal(f.t, "to stderr\n", errb.String())
	assert.Equal(f.t, "made\n", f.read(ws.ID, "made.txt"), "the command's file")
	f.write(ws.ID, "given.txt", "given")
	out.Reset()
	res, err = f.eng.Exec(f.ctx, ws.ID, wire.ExecRequest{Argv: []string{"cat", "given.txt"}}, &out, &errb)
	require.NoError(f.t, err)
	assert.Equal(f.t, 0, res.ExitCode)
	assert.Equal(f.t, "given", out.String(), "argv runs as given, reading the API's file")
}

// checkExecRequest: the request's directory, environment and stdin reach
// the command; malformed requests are invalid.
func checkExecRequest(f *fixture) {
	ws := f.workspace(f.project(), "main")
	f.sh(ws.ID, "mkdir sub")
	var out bytes.Buffer
	res, err := f.eng.Exec(f.ctx, ws.ID, wire.ExecRequest{Body: `pwd; echo "$GREETING"; cat`, Dir: "sub",
		Env: []string{"GREETING=hello"}, Stdin: []byte("from stdin\n")}, &out, &bytes.Buffer{})
	require.NoError(f.t, err)
	assert.Equal(f.t, 0, res.ExitCode)
	assert.Equal(f.t, "/workspace/sub\nhello\nfrom stdin\n", out.String())
	for _, bad := range []struct {
		name string
		req  wire.ExecRequest
	}{
		{"nothing to run", wire.ExecRequest{}},
		{"argv and body", wire.ExecRequest{Argv: []string{"true"}, Body: "true"}},
		{"a negative timeout", wire.ExecRequest{Body: "true", TimeoutMs: -1}},
		{"an env entry without =", wire.ExecRequest{Body: "true", Env: []string{"NOEQUALS"}}},
		{"a dir above the root", wire.ExecRequest{Body: "true", Dir: "../.."}},
	} {
		_, err := f.eng.Exec(f.ctx, ws.ID, bad.req, &bytes.Buffer{}, &bytes.Buffer{})
		f.isClass(err, errclass.Invalid, "an exec with "+bad.name)
	}
}

// checkExecTimeout: a command past its timeout is killed, and that is a
// result.
func checkExecTimeout(f *fixture) {
	ws := f.workspace(f.project(), "main")
	start := time.Now()
	res, err := f.eng.Exec(f.ctx, ws.ID, wire.ExecRequest{Argv: []string{"sleep", "60"}, TimeoutMs: 200}, &bytes.Buffer{}, &bytes.Buffer{})
	require.NoError(f.t, err, "a timeout is a result")
	assert.True(f.t, res.TimedOut, "timed out: %+v", res)
	assert.NotEqual(f.t, 0, res.ExitCode, "the exit code of a killed command")
	assert.Less(f.t, time.Since(start), 30*time.Second, "the kill")
}

// checkExecCanceled: when the context ends first the command is killed and
// the exec fails with the context's error.
func checkExecCanceled(f *fixture) {
	ws := f.workspace(f.project(), "main")
	ctx, cancel := context.WithCancel(f.ctx)
	out := &startWriter{started: make(chan struct{})}
	done := make(chan error, 1)
	go func() {
		_, err := f.eng.Exec(ctx, ws.ID, wire.ExecRequest{Body: "echo started; sleep 60"}, out, &bytes.Buffer{})
		done <- err
	}()
	select {
	case <-out.started:
	case <-time.After(30 * time.Second):
		cancel()
		f.t.Fatal("the command did not start in 30s")
	}
	cancel()
	select {
	case err := <-done:
		assert.ErrorIs(f.t, err, context.Canceled, "an exec whose context ended")
	case <-time.After(30 * time.Second):
		f.t.Fatal("the exec did not end in 30s after its context")
	}
	// The workspace serves the next exec.
	assert.Equal(f.t, "after\n", f.sh(ws.ID, "echo after"))
}

// startWriter closes started on its first write and drops what it is
// given.
type startWriter struct {
	started chan struct{}
	once    sync.Once
}

func (w *startWriter) Write(p []byte) (int, error) {
	w.once.Do(func() { close(w.started) })
	return len(p), nil
}

// checkAttach: an attached exec reads its input as it comes, and one on a
// terminal sees a terminal, ends with its exit code, and is hung up when
// its input ends; a terminal is refused to Exec, and stdin in an attached
// request.
func checkAttach(f *fixture) {
	ws := f.workspace(f.project(), "main")
	inR, inW := io.Pipe()
	var out bytes.Buffer
	done := make(chan struct{})
	var res wire.ExecResult
	var err error
	go func() {
		defer close(done)
		res, err = f.eng.Attach(f.ctx, ws.ID, wire.ExecRequest{Body: "read a; echo got-$a; read b; echo got-$b"}, inR, &out, &bytes.Buffer{}, nil)
	}()
	_, _ = inW.Write([]byte("one\n"))
	time.Sleep(50 * time.Millisecond)
	_, _ = inW.Write([]byte("two\n"))
	inW.Close()
	<-done
	require.NoError(f.t, err)
	assert.Equal(f.t, "got-one\ngot-two\n", out.String(), "input streamed")

	inR, inW = io.Pipe()
	out.Reset()
	done = make(chan struct{})
	go func() {
		defer close(done)
		res, err = f.eng.Attach(f.ctx, ws.ID, wire.ExecRequest{Body: "tty; exit 4", TTY: &wire.TerminalSize{Rows: 10, Cols: 40}}, inR, &out, &bytes.Buffer{}, nil)
	}()
	<-done
	inW.Close()
	if errors.Is(err, errclass.Unavailable) {
		f.t.Logf("this platform runs no terminals: %v", err)
	} else {
		require.NoError(f.t, err)
		assert.Equal(f.t, 4, res.ExitCode)
		assert.Contains(f.t, out.String(), "/dev/pts/", "the command's terminal")
	}

	_, err = f.eng.Exec(f.ctx, ws.ID, wire.ExecRequest{Body: "true", TTY: &wire.TerminalSize{}}, &bytes.Buffer{}, &bytes.Buffer{})
	f.isClass(err, errclass.Invalid, "a terminal without attach")
	_, err = f.eng.Attach(f.ctx, ws.ID, wire.ExecRequest{Body: "true", Stdin: []byte("x")}, strings.NewReader(""), &bytes.Buffer{}, &bytes.Buffer{}, nil)
	f.isClass(err, errclass.Invalid, "stdin in an attached request")
}

// checkExecReceiptIsItsOwn: a receipt counts what its request did, not
// what others did meanwhile: the receipts of sleeps in one workspace show
// no SQL statement and no Store byte while another workspace writes and
// commits, and the commits' receipts show their own.
func checkExecReceiptIsItsOwn(f *fixture) {
	p := f.project()
	busy, quiet := f.workspace(p, "main"), f.workspace(p, "main")
	var commits []wire.Receipt
	var busyErr error
	done, first := make(chan struct{}), make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		defer close(first)
		for i := 0; busyErr == nil; i++ {
			body := fmt.Sprintf("head -c 20000 /dev/urandom > f%d", i%2)
			var res wire.ExecResult
			if res, busyErr = f.eng.Exec(f.ctx, busy.ID, wire.ExecRequest{Body: body}, io.Discard, io.Discard); busyErr != nil || res.ExitCode != 0 {
				busyErr = errors.Join(busyErr, fmt.Errorf("exec %q: exit %d", body, res.ExitCode))
				return
			}
			c, err := f.eng.CommitWorkspace(f.ctx, busy.ID, wire.CommitRequest{Message: "busy"})
			if busyErr = err; err != nil {
				return
			}
			commits = append(commits, *c.Receipt)
			if i == 0 {
				first <- struct{}{}
			}
			select {
			case <-done:
				return
			default:
			}
		}
	})
	<-first
	for i := range 5 {
		res, err := f.eng.Exec(f.ctx, quiet.ID, wire.ExecRequest{Body: "sleep 0.05"}, io.Discard, io.Discard)
		require.NoError(f.t, err)
		r := res.Receipt
		assert.Zero(f.t, r.SQL.Statements, "sleep %d: SQL statements", i)
		assert.Zero(f.t, r.StoreBytesWritten, "sleep %d: Store bytes written", i)
	}
	close(done)
	wg.Wait()
	require.NoError(f.t, busyErr, "the busy workspace")
	for i, r := range commits {
		assert.Positive(f.t, r.SQL.Statements, "commit %d: SQL statements", i)
		assert.Positive(f.t, r.StoreBytesWritten, "commit %d: Store bytes written", i)
	}
}
