// Package local is the platform that runs sandboxes on this Linux host:
// each exec is a fresh set of namespaces started by engine/sandbox's
// launcher, with the workspace (a FUSE mount, or a plain directory for the
// bench's native arm) bound at /workspace.
//
// Up checks that the host can make sandboxes at all by running one (a
// binary that does not call sandbox.InitMain first thing in main fails
// here, not at the first exec). By default the platform keeps DefaultWarm
// inits started ahead (fresh processes in fresh namespaces, their root
// already built, waiting for their config), which takes most of the fixed
// cost off an exec's latency; Down kills them. Attach only records the workspace: the
// namespaces are made per exec, so there is nothing to create or remove
// per workspace. Close and Down cancel the execs still running (killing
// their process trees) and wait for them, so a workspace can be unmounted
// as soon as Close returns.
package local
