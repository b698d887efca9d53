package fusefs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/internal/account"
	"layerfs.dev/layerfs/internal/cloexec"
	"layerfs.dev/layerfs/internal/mountinfo"
	"layerfs.dev/layerfs/internal/overlay"
	"layerfs.dev/layerfs/internal/store"
	"layerfs.dev/layerfs/wire/errclass"
)

// Options configure a mount.
type Options struct {
	// Logger receives rare diagnostics (an unexpected error, passthrough
	// refused); nil is silent.
	Logger *slog.Logger
	// NoPassthrough serves file data through the daemon even where the
	// kernel supports FUSE passthrough (for comparison).
	NoPassthrough bool
	// Timeout is the kernel's entry, attribute and negative-entry cache
	// time. Every change goes through the mount, so it can be long.
	// Default: one hour.
	Timeout time.Duration
	// Debug logs every FUSE request (to Logger).
	Debug bool
	// Source names the mount in /proc/self/mountinfo (its "source" field);
	// default "layerfs". A daemon gives every mount of its Store one
	// source, so that a successor can find and abort them without
	// touching them (AbortSource).
	Source string
	// Lower makes the mount a read-only lower for kernel overlayfs: mounted
	// read-only, with a passthrough stacking depth of 1 (overlayfs refuses
	// a lower whose depth is 2: "maximum fs stacking depth exceeded"), and
	// inode generations unique to the mount.
	Lower bool
	// NoSync answers fsync(2) without syncing: a workspace of durability
	// commit, whose writes reach the disk with its commits (see
	// wire.DurabilityCommit).
	NoSync bool
	// Account, when set, returns the account that a request made by the
	// process pid (as the mount's PID namespace numbers it) is counted in,
	// or nil; it is called once per request, after the request is served,
	// and never for requests the kernel makes of its own (pid 0). The Store
	// work a request causes is counted where the overlay's Lower finds it:
	// see CallerPid.
	Account func(pid uint32) *account.Account
}

// Server serves one workspace mount; Mount returns it.
type Server struct {
	dir    string
	ov     *overlay.Overlay
	server *fuse.Server
	log    *slog.Logger
	mapper errnoMapper
	tel    account.Requests

	// gen is the generation of every inode: random per mount for a lower
	// (see Options.Lower), else 0; plus, for a node whose kernel inode was
	// retired (see node.newHandle), the count in regens.
	gen     uint64
	regens  sync.Map // overlay inode number -> uint64
	regenMu sync.Mutex

	noSync      bool // Options.NoSync
	passthrough atomic.Bool
	whyDaemon   atomic.Value // string: why passthrough is off
	pending     sync.Map     // request cancel channel -> backing id for its OPEN reply
	unmountOnce sync.Once
	unmountErr  error
	// device is the mount's anonymous device ("0:N"), for aborting its
	// connection when an unmount does not end the server ("" unknown).
	device string
}

// ErrStale is wrapped when a mountpoint is left over from a dead server.
var ErrStale = errclass.New(errclass.Unavailable, "stale mount")

// Mount mounts ov at dir (an existing directory) and serves it until
// Unmount. The mount is made with mount(2) directly (no fusermount), is
// visible to every user (allow_other, with the kernel checking
// permissions), and registers upper and materialized lower files as FUSE
// passthrough backing files where the kernel allows it.
//
// The serving process must never start a child whose working directory is
// on the mount: the fork would wait on the mount's own server. The server
// owns ov from then on: Unmount closes it once the server has stopped.
func Mount(ctx context.Context, dir string, ov *overlay.Overlay, opts Options) (*Server, error) {
	if err := CleanStale(dir); err != nil {
		return nil, err
	}
	m := &Server{dir: dir, ov: ov, log: opts.Logger, noSync: opts.NoSync}
	if opts.Lower {
		// Kernel overlayfs keeps the lower's file handles (nodeid and
		// generation) in the upper's origin xattrs and decodes them on
		// lookup. Node ids are not stable across mounts: with the same
		// generation, a handle of the last mount could name another file
		// of this one (seen: one file's data served under another's name).
		// A generation new to each mount makes such a handle stale, which
		// overlayfs takes as "origin unknown".
		for m.gen&0xffffffff == 0 {
			m.gen = rand.Uint64()
		}
	}
	m.mapper.log = opts.Logger
	m.passthrough.Store(!opts.NoPassthrough)
	if opts.NoPassthrough {
		m.whyDaemon.Store("disabled by option")
	}
	timeout := opts.Timeout
	if timeout == 0 {
		timeout = time.Hour
	}
	source := opts.Source
	if source == "" {
		source = "layerfs"
	}
	root := &node{m: m, on: ov.Root()}
	gopts := &gofs.Options{
		MountOptions: fuse.MountOptions{
			AllowOther:        true,
			DirectMount:       true,
			DirectMountStrict: true,
			FsName:            source,
			Name:              "layerfs",
			Options:           []string{"default_permissions"},
			MaxWrite:          1 << 20,
			MaxStackDepth:     2,
			// (READDIRPLUS_AUTO was measured and left out: on the real-work
			// cell it split the listings between READDIR and READDIRPLUS
			// and added GETATTRs, 139,567 -> 139,792 requests.)
			ExtraCapabilities: fuse.CAP_ATOMIC_O_TRUNC | fuse.CAP_HANDLE_KILLPRIV_V2,
			// A symlink's target never changes (a new target is a new
			// inode), so the kernel may keep every target it has read.
			EnableSymlinkCaching: true,
			Debug:                opts.Debug,
			// Sandboxes id-map the workspace for their user namespace
			// (engine/sandbox). The kernel then sends the mapped ids with
			// creations and -1 with every other request.
			IDMappedMount: true,
		},
		EntryTimeout:    &timeout,
		AttrTimeout:     &timeout,
		NegativeTimeout: &timeout,
		NullPermissions: true,
		RootStableAttr:  &gofs.StableAttr{Ino: ov.Root().Ino(), Gen: m.gen},
	}
	if opts.Lower {
		gopts.MountOptions.DirectMountFlags = unix.MS_NOSUID | unix.MS_NODEV | unix.MS_RDONLY
		gopts.MountOptions.MaxStackDepth = 1
	}
	if opts.Debug && opts.Logger != nil {
		gopts.MountOptions.Logger = slog.NewLogLogger(opts.Logger.Handler(), slog.LevelDebug)
	}
	raw := &counting{RawFileSystem: gofs.NewNodeFS(root, gopts), t: &m.tel, account: opts.Account, onOpen: m.fillOpen}
	// go-fuse opens /dev/fuse without O_CLOEXEC: no child may inherit it
	// (see package cloexec).
	var server *fuse.Server
	err := cloexec.Around(func() (err error) {
		server, err = fuse.NewServer(raw, dir, &gopts.MountOptions)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("mount %s: %w", dir, err)
	}
	m.server = server
	go server.Serve()
	if err := server.WaitMount(); err != nil {
		server.Unmount()
		return nil, fmt.Errorf("mount %s: %w", dir, err)
	}
	m.device = MountDevice(dir)
	return m, nil
}

// Dir returns the mountpoint.
func (m *Server) Dir() string { return m.dir }

// Overlay returns the overlay the mount serves.
func (m *Server) Overlay() *overlay.Overlay { return m.ov }

// Changes lists the served overlay's changes since its last commit.
func (m *Server) Changes(ctx context.Context) (*overlay.ChangeSet, error) { return m.ov.Changes(ctx) }

// MarkCommitted records that cs was committed as root newRoot.
func (m *Server) MarkCommitted(newRoot store.ID, cs *overlay.ChangeSet) {
	m.ov.MarkCommitted(newRoot, cs)
}

// Settle waits, a second at most, until no file is open for writing
// through the mount. A close returns before the kernel sends its release,
// and a release counts the file as changed since the last commit
// (overlay.File.Close): a caller that wrote files through the mount and
// now records them as committed settles first.
func (m *Server) Settle(ctx context.Context) {
	for range 1000 {
		if m.ov.Writers() == 0 || ctx.Err() != nil {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// UpperDir returns the served overlay's upper directory.
func (m *Server) UpperDir() string { return m.ov.UpperDir() }

// Stats returns a snapshot of the request telemetry.
func (m *Server) Stats() Stats {
	return Stats{RequestStats: m.tel.Snapshot(), DataPath: m.DataPath()}
}

// CallerPid returns the process that made the FUSE request whose context
// ctx is (as the mount's PID namespace numbers it; 0 for the kernel), and
// false for a context that is not a FUSE request's: what a Lower that
// counts the Store work of a request in its account needs.
func CallerPid(ctx context.Context) (uint32, bool) {
	c, ok := fuse.FromContext(ctx)
	if !ok {
		return 0, false
	}
	return c.Pid, true
}

// DataPath says how file data is served: "passthrough", or "daemon: why".
func (m *Server) DataPath() string {
	if m.passthrough.Load() {
		return "passthrough"
	}
	why, _ := m.whyDaemon.Load().(string)
	return "daemon: " + why
}

// Unmount unmounts and waits for the server to stop.
func (m *Server) Unmount(ctx context.Context) error {
	m.unmountOnce.Do(func() {
		done := make(chan error, 1)
		go func() { done <- m.server.Unmount() }()
		select {
		case err := <-done:
			if err != nil {
				// Busy: detach, so the mountpoint is usable at once.
				err = unix.Unmount(m.dir, unix.MNT_DETACH)
			}
			m.unmountErr = err
		case <-time.After(UnmountGrace):
			// The kernel keeps a connection while anything still holds
			// its mount (a lazily detached overlay stacked on it, another
			// mount namespace): the server's loops then never end.
			// Aborting the connection ends them.
			m.unmountErr = m.abort()
			if m.unmountErr == nil {
				m.unmountErr = <-done
			}
		case <-ctx.Done():
			m.unmountErr = errors.Join(ctx.Err(), unix.Unmount(m.dir, unix.MNT_DETACH))
		}
		if m.unmountErr == nil {
			m.server.Wait()
			m.unmountErr = m.ov.Close()
		}
	})
	return m.unmountErr
}

// UnmountGrace is how long an unmount may wait for a server's loops
// before its connection is aborted.
const UnmountGrace = 10 * time.Second

// abort aborts the mount's connection, so that its server ends.
func (m *Server) abort() error {
	if err := Abort(m.dir, m.device); err != nil {
		return fmt.Errorf("unmount %s: the server does not end: %w", m.dir, err)
	}
	if m.log != nil {
		m.log.Warn("fuse server did not end at its unmount; its connection was aborted", "dir", m.dir, "device", m.device)
	}
	return nil
}

// MountDevice is the anonymous device ("0:N") of the mount at dir, asked
// of the VFS without a request to its server (statx without sync); ""
// when it is not known.
func MountDevice(dir string) string {
	var stx unix.Statx_t
	if unix.Statx(unix.AT_FDCWD, dir, unix.AT_STATX_DONT_SYNC, 0, &stx) != nil || stx.Dev_major != 0 {
		return ""
	}
	return "0:" + strconv.FormatUint(uint64(stx.Dev_minor), 10)
}

// Abort aborts the FUSE connection on device (as MountDevice gave it)
// through the fuse control file system, so that every request to it
// fails and its server's loops end, and detaches dir if that file system
// is still mounted there. A server whose unmount left its connection held
// (a lazily detached overlay stacked on it, a bind, another mount
// namespace) never ends otherwise.
func Abort(dir, device string) error {
	if device == "" {
		return fmt.Errorf("abort the fuse connection at %s: its device is unknown", dir)
	}
	ms, err := mountinfo.Read(mountinfo.Self)
	if err == nil {
		err = abortConnection(ms, device)
	}
	if err != nil {
		return err
	}
	if top, ok := topMountAt(ms, filepath.Clean(dir)); ok && top.Device == device {
		_ = unix.Unmount(dir, unix.MNT_DETACH)
	}
	return nil
}

// Wait blocks until the mount is unmounted (by Unmount or from outside).
func (m *Server) Wait() { m.server.Wait() }

func (m *Server) errno(err error) syscall.Errno { return m.mapper.errno(err) }

// register registers fd as a passthrough backing file; a refusal turns
// passthrough off for the mount (the reason is reported by DataPath).
func (m *Server) register(fd int) int32 {
	id, errno := m.server.RegisterBackingFd(&fuse.BackingMap{Fd: int32(fd)})
	if errno != 0 {
		if m.passthrough.CompareAndSwap(true, false) {
			m.whyDaemon.Store(fmt.Sprintf("kernel refused a backing file: %v", errno))
			if m.log != nil {
				m.log.Warn("fuse passthrough refused; serving data through the daemon", "dir", m.dir, "err", errno)
			}
		}
		return 0
	}
	return id
}

func (m *Server) unregister(id int32) {
	if errno := m.server.UnregisterBackingFd(id); errno != 0 && m.log != nil {
		m.log.Debug("unregister backing file", "id", id, "err", errno)
	}
}

// fillOpen puts the backing id chosen by the node's Open or Create into
// the reply.
func (m *Server) fillOpen(cancel <-chan struct{}, out *fuse.OpenOut) {
	v, ok := m.pending.LoadAndDelete(cancel)
	if !ok {
		return
	}
	out.BackingID = v.(int32)
	out.OpenFlags |= fuse.FOPEN_PASSTHROUGH
	out.OpenFlags &^= fuse.FOPEN_KEEP_CACHE
}
