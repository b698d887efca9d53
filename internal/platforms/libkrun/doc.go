// Package libkrun runs LayerFS's daemon in a libkrun microVM, driven through
// microsandbox's `msb` CLI. It is a platforms.Platform with
// Features{RemoteDaemon: true}: layerfsd runs as root in the microVM, serves
// the workspaces' FUSE mounts there and launches its namespace sandboxes
// there; the host drives it through the ordinary API over a loopback TCP
// port that msb publishes, with a bearer token (platforms.Remote).
//
// # Why msb and not krunvm
//
// The platform needs a guest that outlives the command that started it, a
// way to run commands in it afterwards, and the daemon's API reachable from
// the host. krunvm's `start` attaches the terminal to the microVM's console
// and the VM lives exactly as long as that foreground command; it has no
// detach and no exec, so a long-lived daemon would have to be a child
// process this platform babysits, and Identity could not look inside.
// msb runs a named sandbox detached with its command in the background
// (`msb run --detach`), runs further commands in it (`msb exec`), publishes
// guest TCP ports on the host's loopback (`--port`), patches files into the
// root file system before boot (`--copy-file`), and lists sandboxes as JSON.
// Unix sockets do not cross msb's boundary (its --vsock goes guest to host),
// hence TCP plus a token.
//
// # Lifecycle
//
//	Up:   msb --version                     (present, >= MinVersion)
//	      msb ls --format json              (exists? running?)
//	      msb rm --force N                  (when it exists without an answering daemon)
//	      msb run --detach --quiet --name N --label layerfs.project=P [--cpus C] [--memory M]
//	          --port 127.0.0.1:HOSTPORT:7411
//	          --copy-file LAYERFSD:/usr/local/bin/layerfsd --copy-file TOKEN:/etc/layerfs/token
//	          IMAGE -- sh -c BOOT           (BOOT makes /dev/fuse and execs layerfsd serve
//	                                         --tcp 0.0.0.0:7411 --token-file ...)
//	      GET /v1/version on http://127.0.0.1:HOSTPORT, bounded by DaemonTimeout
//	Down: msb rm --force N, and the state files
//
// The port and the token live in StateDir so that another process can reach
// the same daemon. A stopped microVM is replaced, not restarted: the guest
// Store does not survive Down or a stop. The command lines, the JSON of
// `msb ls --format json`, the version line ("msb 0.7.8") and the error
// format ("error: ...") were read from microsandbox's sources
// (crates/cli) and documentation.
//
// Every msb call goes through a Runner, so tests check the exact argv
// against fixtures and replay recorded outputs (testdata/).
package libkrun
