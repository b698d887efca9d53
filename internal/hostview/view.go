package hostview

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/internal/cloexec"
	"layerfs.dev/layerfs/internal/fusefs"
)

// Options say what a view shows and how.
type Options struct {
	Owner Owner
	Range Range
	// Upper is the upper directory of the kernel overlay the view is of:
	// files there are the backing files of passthrough opens. "" serves
	// all file data through the daemon.
	Upper string
	// Source names the mount in mountinfo (as fusefs.Options.Source), so
	// that a successor daemon finds it if this one dies.
	Source string
	// Logger receives rare diagnostics; nil is silent.
	Logger *slog.Logger
}

// Server serves one view; Mount returns it.
type Server struct {
	target string
	device string // the view's own mount's, for aborting its connection
	root   int    // the inner mount's root, O_PATH
	upper  int    // the overlay's upper directory, O_PATH; -1: none
	uids   idMap
	gids   idMap
	// umask is the daemon's, which the kernel applies again to what the
	// daemon creates: the bits it takes are given back (see fixMode).
	umask   uint32
	rootDev uint64
	log     *slog.Logger
	server  *fuse.Server

	passthrough atomic.Bool
	daemonIO    atomic.Int64 // reads and writes served by the daemon
	pending     sync.Map     // request cancel channel -> backing id for its OPEN reply
	regens      sync.Map     // ino -> uint64, see retire
	regenMu     sync.Mutex
	handles     sync.Map // *handle -> struct{}: open files, closed at Unmount

	unmountOnce sync.Once
	unmountErr  error
}

// Mount serves the directory root (an O_PATH descriptor of the inner
// mount's root, which the Server owns from then on, also on error) at
// target, an existing directory.
func Mount(ctx context.Context, target string, root int, opts Options) (*Server, error) {
	s := &Server{target: target, root: root, upper: -1, log: opts.Logger}
	fail := func(err error) (*Server, error) {
		s.closeFds()
		return nil, fmt.Errorf("host view at %s: %w", target, err)
	}
	if err := check(opts.Range, opts.Owner); err != nil {
		return fail(err)
	}
	s.uids, s.gids = newIDMaps(opts.Range, opts.Owner)
	if opts.Upper != "" {
		fd, err := unix.Open(opts.Upper, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fail(err)
		}
		s.upper = fd
		s.passthrough.Store(true)
	}
	var err error
	if s.umask, err = processUmask(); err != nil {
		return fail(err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(root, &st); err != nil {
		return fail(err)
	}
	s.rootDev = st.Dev
	if err := fusefs.CleanStale(target); err != nil {
		return fail(err)
	}
	var zero time.Duration
	source := opts.Source
	if source == "" {
		source = "layerfs"
	}
	gopts := &gofs.Options{
		MountOptions: fuse.MountOptions{
			AllowOther:         true,
			DirectMount:        true,
			DirectMountStrict:  true,
			DirectMountFlags:   unix.MS_NOSUID | unix.MS_NODEV,
			FsName:             source,
			Name:               "layerfs",
			Options:            []string{"default_permissions"},
			MaxWrite:           1 << 20,
			MaxStackDepth:      2,
			DisableReadDirPlus: true, // an entry per name would be looked up for nothing: nothing is cached
			// AUTO_INVAL_DATA: a cached open drops its pages when the file's
			// size or time changes (a sandbox wrote it).
			ExtraCapabilities: fuse.CAP_ATOMIC_O_TRUNC | fuse.CAP_AUTO_INVAL_DATA,
		},
		// A mode of 0 is a mode (go-fuse would show 0644).
		NullPermissions: true,
		EntryTimeout:    &zero,
		AttrTimeout:     &zero,
		NegativeTimeout: &zero,
		RootStableAttr:  &gofs.StableAttr{Ino: s.ino(&st)},
	}
	raw := &backingReplies{RawFileSystem: gofs.NewNodeFS(s.newNode(), gopts), s: s}
	err = cloexec.Around(func() (err error) {
		s.server, err = fuse.NewServer(raw, target, &gopts.MountOptions)
		return err
	})
	if err != nil {
		return fail(err)
	}
	go s.server.Serve()
	if err := s.server.WaitMount(); err != nil {
		s.server.Unmount()
		return fail(err)
	}
	s.device = fusefs.MountDevice(target)
	return s, nil
}

// processUmask reads the process's umask without changing it.
func processUmask() (uint32, error) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "Umask:"); ok {
			m, err := strconv.ParseUint(strings.TrimSpace(v), 8, 32)
			return uint32(m), err
		}
	}
	return 0, errors.New("no umask in /proc/self/status")
}

// Target is where the view is mounted.
func (s *Server) Target() string { return s.target }

// DataPath says how file data is served: "passthrough" (upper files) or
// "daemon: why".
func (s *Server) DataPath() string {
	switch {
	case s.upper < 0:
		return "daemon: not a kernel overlay"
	case !s.passthrough.Load():
		return "daemon: the kernel refused a backing file"
	}
	return "passthrough"
}

// DaemonIO counts the reads and writes the daemon served (the others went
// by passthrough).
func (s *Server) DaemonIO() int64 { return s.daemonIO.Load() }

// Unmount takes the view down: unmounted, or, when a host process still
// holds something open in it, cut off (its FUSE connection aborted, so
// that every call there fails at once) and detached; then every
// descriptor the view held on the inner mount is closed, so the inner
// mount can go.
func (s *Server) Unmount(ctx context.Context) error {
	s.unmountOnce.Do(func() {
		err := unix.Unmount(s.target, 0)
		if err != nil {
			err = fusefs.CleanStale(s.target)
		}
		if err == nil {
			done := make(chan struct{})
			go func() { s.server.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(fusefs.UnmountGrace):
				// Held elsewhere, the connection outlives the unmount.
				if err = fusefs.Abort(s.target, s.device); err == nil {
					<-done
				} else {
					err = fmt.Errorf("host view at %s: the server did not stop: %w", s.target, err)
				}
			case <-ctx.Done():
				err = fmt.Errorf("host view at %s: the server did not stop: %w", s.target, ctx.Err())
			}
		}
		s.closeFds()
		s.unmountErr = err
	})
	return s.unmountErr
}

// closeFds closes the view's open files and directories.
func (s *Server) closeFds() {
	s.handles.Range(func(k, _ any) bool {
		k.(*handle).release()
		return true
	})
	for _, fd := range []*int{&s.root, &s.upper} {
		if *fd >= 0 {
			unix.Close(*fd)
			*fd = -1
		}
	}
}

// ino is the view's inode number of a file of the inner mount: kernel
// overlayfs reports each layer's files with a device of their own, and
// their inode numbers may meet.
func (s *Server) ino(st *unix.Stat_t) uint64 {
	swap := func(d uint64) uint64 { return d<<32 | d>>32 }
	return st.Ino ^ swap(st.Dev) ^ swap(s.rootDev)
}

// stable is the go-fuse identity of a file: its inode number and a
// generation that changes when its kernel inode is retired.
func (s *Server) stable(st *unix.Stat_t) gofs.StableAttr {
	ino := s.ino(st)
	var gen uint64
	if v, ok := s.regens.Load(ino); ok {
		gen = v.(uint64)
	}
	return gofs.StableAttr{Mode: st.Mode & unix.S_IFMT, Ino: ino, Gen: gen}
}

// retire gives inode ino a new generation: the next lookup makes a new
// kernel inode, and the kernel drops its entry for the old one when it
// revalidates it.
func (s *Server) retire(ino uint64) {
	s.regenMu.Lock()
	defer s.regenMu.Unlock()
	v, _ := s.regens.Load(ino)
	n, _ := v.(uint64)
	s.regens.Store(ino, n+1)
}

// fill fills out from st, with the ids shown.
func (s *Server) fill(st *unix.Stat_t, out *fuse.Attr) {
	out.Ino, out.Size, out.Blocks, out.Mode, out.Nlink = s.ino(st), uint64(st.Size), uint64(st.Blocks), st.Mode, uint32(st.Nlink)
	out.Atime, out.Atimensec = uint64(st.Atim.Sec), uint32(st.Atim.Nsec)
	out.Mtime, out.Mtimensec = uint64(st.Mtim.Sec), uint32(st.Mtim.Nsec)
	out.Ctime, out.Ctimensec = uint64(st.Ctim.Sec), uint32(st.Ctim.Nsec)
	out.Rdev, out.Blksize = uint32(st.Rdev), uint32(st.Blksize)
	out.Uid, out.Gid = s.uids.shown(st.Uid), s.gids.shown(st.Gid)
}

// register registers fd as a passthrough backing file; a refusal turns
// passthrough off for the view.
func (s *Server) register(fd int) int32 {
	id, errno := s.server.RegisterBackingFd(&fuse.BackingMap{Fd: int32(fd)})
	if errno != 0 {
		if s.passthrough.CompareAndSwap(true, false) && s.log != nil {
			s.log.Warn("host view: fuse passthrough refused; serving data through the daemon", "dir", s.target, "err", errno)
		}
		return 0
	}
	return id
}

func (s *Server) unregister(id int32) {
	if errno := s.server.UnregisterBackingFd(id); errno != 0 && s.log != nil {
		s.log.Debug("host view: unregister backing file", "id", id, "err", errno)
	}
}

// backingReplies puts the backing id an Open or Create chose into its
// reply.
type backingReplies struct {
	fuse.RawFileSystem
	s *Server
}

func (b *backingReplies) Create(cancel <-chan struct{}, in *fuse.CreateIn, name string, out *fuse.CreateOut) fuse.Status {
	st := b.RawFileSystem.Create(cancel, in, name, out)
	if st == fuse.OK {
		b.fill(cancel, &out.OpenOut)
	}
	return st
}

func (b *backingReplies) Open(cancel <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	st := b.RawFileSystem.Open(cancel, in, out)
	if st == fuse.OK {
		b.fill(cancel, out)
	}
	return st
}

func (b *backingReplies) fill(cancel <-chan struct{}, out *fuse.OpenOut) {
	v, ok := b.s.pending.LoadAndDelete(cancel)
	if !ok {
		return
	}
	out.BackingID = v.(int32)
	out.OpenFlags |= fuse.FOPEN_PASSTHROUGH
	out.OpenFlags &^= fuse.FOPEN_KEEP_CACHE
}
