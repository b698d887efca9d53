// Package client is the Go SDK of LayerFS: it speaks the daemon's HTTP API
// (layerfsd, on a unix socket or TCP with a bearer token) and depends only
// on the wire types and the standard library.
//
//	c, err := client.Dial(ctx, "unix:///home/me/.local/share/layerfs/layerfsd.sock")
//	ws, err := c.CreateWorkspace(ctx, client.WorkspaceSpec{Project: "p", Branch: "main"})
//	res, err := ws.Exec(ctx, "make test", client.ExecOptions{Timeout: time.Minute})
//	fmt.Println(res.ExitCode, string(res.Stdout))
//	_, err = ws.Commit(ctx, "tests pass")
//	err = ws.End(ctx, client.EndOptions{})
//
// A command's exit status is a result, not an error: Exec returns an error
// only when the API call failed. API errors are *wire.Error values (use
// errors.As, or the helpers IsNotFound, IsHeadMoved, ...).
//
// Exec collects output whole by default; give ExecOptions.Stdout or Stderr
// and the output streams to them as the command writes it.
//
// Download treats the daemon's tar stream as untrusted: it writes through an
// os.Root at the destination, and refuses absolute or ".." entry names and
// links that point outside the destination, so a hostile or buggy daemon
// cannot make it write elsewhere.
package client
