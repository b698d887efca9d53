// Package api is the server side of LayerFS's HTTP API: JSON over HTTP,
// resource-shaped and versioned under /v1, served by layerfsd on a unix
// socket (and optionally TCP with a bearer token).
//
// The package translates HTTP into calls on the engine's services, small
// interfaces declared here by the handlers that use them (ProjectManager,
// BranchManager, History, WorkspaceManager, Executor, Files, Watcher,
// Maintenance, MetricsWriter); Engine is all of them at once, what
// NewServer takes and layerfsd passes. Nothing here touches the Store or a
// mount.
//
// # Input is hostile
//
// Every request body is decoded strictly: one JSON value, no unknown fields,
// at most 1 MiB, and a type error names the field. Names, refs, workspace ids
// and workspace paths (but an exec's, see below) are validated before the engine sees them (no absolute
// paths, no "..", no NUL), and uploads are capped (Options.MaxUpload, 413
// past it, up front when Content-Length says so). The engine resolves every
// path beneath the workspace root and checks a tar upload whole before it
// extracts anything; the API does not buffer uploads a second time.
//
// # Errors
//
// Every error is {"error": {"code": ..., "message": ...}} (wire.ErrorBody).
// Errors are mapped by their class (package errclass, which every layer's
// errors wrap and which holds the one table of codes and statuses): not
// found 404, exists, head moved, uncommitted changes and busy 409, invalid
// 400, unavailable 503, no space 507, corrupt 500 with its message.
// Anything else is logged and answered with a generic 500, so internal
// details do not leak to clients.
//
// # Streaming execs
//
// POST /v1/workspaces/{id}/execs answers one JSON wire.ExecResult, or, when
// the client sends Accept: application/x-ndjson, a stream of wire.ExecEvent
// lines flushed as output arrives and closed by one event carrying the result
// (or an error). Once a stream has begun the status is 200 and errors travel
// in the last event.
//
// An exec's request is checked by the engine (platforms.FromRequest, the one
// place), not here: its refusal comes before any output, so it is still an
// ordinary JSON error.
//
// # Attached execs
//
// POST /v1/workspaces/{id}/attach upgrades its connection
// (wire.AttachProtocol) once the command first reads or writes, then carries
// wire frames both ways: input as the client sends it, a terminal's sizes,
// output, and the last event. A client that leaves ends the command's input
// (a terminal hangs up), and a command still running hangupGrace later is
// killed.
//
// # Shutdown
//
// Drain makes the server refuse new work (mutating requests answer 503)
// while requests already running go on; WaitIdle waits for them and Abort
// cancels what is left when the grace period runs out. Read-only requests
// keep working while draining so that clients can watch the shutdown.
package api
