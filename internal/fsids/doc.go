// Package fsids runs file system calls as another uid and gid: Do runs a
// function on an OS thread of its own whose file system uid and gid
// (setfsuid, setfsgid: per thread, used for permission checks and for the
// owner of what is created) are the given ones, keeping the thread's
// capabilities, and puts the thread back as it was.
//
// The daemon needs it for a workspace served by kernel overlayfs over
// id-mapped layers (package kerneloverlay): through such a mount, a file
// on disk owned by 0 belongs to the host id the layers map 0 to, and only
// those host ids can create files there (any other gets EOVERFLOW). The
// overlay is made, and the daemon writes through it, as that host id.
package fsids
