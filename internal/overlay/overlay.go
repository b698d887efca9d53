package overlay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/internal/store"
)

// Lower is what the overlay needs from the Store: committed trees, decoded
// and cached by the Store, and the content of committed files as read-only
// files that never change once in place.
type Lower interface {
	Tree(ctx context.Context, id store.ID) (*store.Tree, error)
	Materialize(ctx context.Context, e *store.Entry) (string, error)
}

// Config says what an overlay merges.
type Config struct {
	Lower Lower
	// Root is the lower tree the workspace was created on (store.ZeroID
	// for an empty tree). The upper layer is relative to it, so a
	// workspace must always be remounted on the same Root.
	Root store.ID
	// Base is the root tree of the workspace's last commit, which
	// Changes is relative to; ZeroID means Root.
	Base store.ID
	// UpperDir holds the upper layer (created if missing).
	UpperDir string
	// WorkDir is scratch space on the same file system as UpperDir, for
	// atomic replacements; its content is discarded on Open. Default:
	// UpperDir's sibling "work".
	WorkDir string
	// Logger receives rare diagnostics; nil is silent.
	Logger *slog.Logger
	// ReadOnly opens an overlay only to list its changes (ChangesSince): no
	// work directory is made, so opening writes nothing (a full disk does
	// not stop it). Its files must not be opened nor changed.
	ReadOnly bool
}

// Caller is the identity a created node is owned by.
type Caller struct {
	UID, GID uint32
}

// Overlay is the merged view of one workspace. Its lifecycle is
//
//	Open -> (Lookup, Create, Open, Rename, ... from many goroutines) ->
//	Changes -> commit -> MarkCommitted -> ... -> Close
//
// All methods are safe for concurrent use.
type Overlay struct {
	lower    Lower
	root     *Node
	upperDir string
	workDir  string
	upperFd  int // upperDir, O_PATH: every upper entry is reached from it (see at)
	workFd   int // workDir, O_PATH; -1 when read-only
	dirFds   dirFds

	closeOnce sync.Once
	closeErr  error
	log       *slog.Logger
	umask     uint32

	// mu guards the tree: every node's names, state and directory
	// fields, the identity tables and the dirty set. Data copies run
	// outside it under the node's own cmu.
	mu      sync.RWMutex
	nextIno atomic.Uint64
	byLink  map[uint64]*Node // lower hard-link groups
	byUpper map[uint64]*Node // upper inode number -> node, for upper hard links
	// linkCounts is the size of every lower hard-link group, counted over
	// the whole lower tree the first time a directory with one is loaded.
	linkCounts map[uint64]int
	linksOnce  sync.Once
	linksErr   error
	tmpSeq     atomic.Uint64
	renames    uint64 // bumped by directory renames: invalidates cached paths
	lowerRoot  store.ID

	// dirty set, see changes.go
	seq       uint64
	base      store.ID
	rootDirty bool              // after a remount: the whole upper is dirty
	writers   map[*Node][]*File // open for writing: see File.Close
	emptyFile string

	stats Stats
}

// Stats counts the overlay's expensive events.
type Stats struct {
	DirLoads    atomic.Int64
	CopyUps     atomic.Int64 // data copy-ups
	CopyUpBytes atomic.Int64
	MetaCopyUps atomic.Int64
	Clones      atomic.Int64
}

// Stats returns the overlay's counters.
func (o *Overlay) Stats() *Stats { return &o.stats }

// Open opens the merged view of cfg.Root and cfg.UpperDir. It loads nothing
// from the Store but the root tree; a non-empty upper layer (a remount) is
// walked once so that every path in it counts as changed.
func Open(ctx context.Context, cfg Config) (*Overlay, error) {
	if cfg.Lower == nil && !cfg.Root.IsZero() {
		return nil, fmt.Errorf("open overlay: a lower tree needs a Lower")
	}
	if cfg.UpperDir == "" {
		return nil, fmt.Errorf("open overlay: no UpperDir")
	}
	upper, err := filepath.Abs(cfg.UpperDir)
	if err != nil {
		return nil, fmt.Errorf("open overlay: %w", err)
	}
	work := cfg.WorkDir
	if work == "" {
		work = filepath.Join(filepath.Dir(upper), "work")
	}
	if work, err = filepath.Abs(work); err != nil {
		return nil, fmt.Errorf("open overlay: %w", err)
	}
	if err := os.MkdirAll(upper, 0o755); err != nil {
		return nil, fmt.Errorf("open overlay: %w", err)
	}
	empty := filepath.Join(work, "empty")
	if !cfg.ReadOnly {
		if err := prepareWork(upper, work, empty); err != nil {
			return nil, fmt.Errorf("open overlay: %w", err)
		}
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	o := &Overlay{
		lower:     cfg.Lower,
		upperDir:  upper,
		workDir:   work,
		log:       log,
		umask:     readUmask(),
		byLink:    map[uint64]*Node{},
		byUpper:   map[uint64]*Node{},
		writers:   map[*Node][]*File{},
		lowerRoot: cfg.Root,
		base:      cfg.Base,
		emptyFile: empty,
	}
	if o.base.IsZero() {
		o.base = cfg.Root
	}
	if err := o.openRoots(cfg.ReadOnly); err != nil {
		return nil, fmt.Errorf("open overlay: %w", err)
	}
	o.nextIno.Store(1)
	o.root = &Node{o: o, ino: 1, mode: syscall.S_IFDIR, state: stateUpper,
		dir: &dirState{lowerID: cfg.Root, lowerPath: "/", resolved: true}}
	if cfg.Root.IsZero() {
		o.root.dir.lowerPath = ""
	}
	if err := o.ensureLoaded(ctx, o.root); err != nil {
		o.Close()
		return nil, fmt.Errorf("open overlay: %w", err)
	}
	o.mu.Lock()
	nonEmpty := len(o.root.dir.children) > 0 || len(o.root.dir.whiteouts) > 0
	if nonEmpty {
		// A remount: the in-memory dirty set is gone, so everything in
		// the upper counts as changed, relative to the lower root.
		o.rootDirty = true
	}
	o.mu.Unlock()
	return o, nil
}

// prepareWork empties the work directory and makes the empty file copy-ups
// of empty lower files start from.
func prepareWork(upper, work, empty string) error {
	// The work directory holds only scratch files; whatever a crash left
	// there is garbage.
	if err := os.RemoveAll(work); err != nil {
		return fmt.Errorf("clean work dir: %w", err)
	}
	if err := os.MkdirAll(work, 0o700); err != nil {
		return err
	}
	var su, sw unix.Stat_t
	if err := unix.Stat(upper, &su); err != nil {
		return err
	}
	if err := unix.Stat(work, &sw); err != nil {
		return err
	}
	if su.Dev != sw.Dev {
		return fmt.Errorf("work dir %s is not on the file system of %s", work, upper)
	}
	return os.WriteFile(empty, nil, 0o444)
}

// Close releases the descriptors of the upper and work directories; a
// second Close does nothing. The overlay must not be used after.
func (o *Overlay) Close() error {
	o.closeOnce.Do(func() {
		o.dirFds.closeAll()
		o.closeErr = unix.Close(o.upperFd)
		if o.workFd >= 0 {
			o.closeErr = errors.Join(o.closeErr, unix.Close(o.workFd))
		}
	})
	return o.closeErr
}

// Root returns the root directory node.
func (o *Overlay) Root() *Node { return o.root }

// UpperDir returns the upper layer's directory.
func (o *Overlay) UpperDir() string { return o.upperDir }

type nodeState uint8

const (
	stateLower nodeState = iota // only in the lower tree
	stateUpper                  // an upper node with its own data (dirs: an upper dir exists)
	stateMeta                   // upper regular file whose data is still the lower content
)

// Node is one merged inode: a file, directory, symlink or special file. Its
// inode number is stable for the node's lifetime; a node lives as long as a
// name in a loaded directory or an open handle refers to it.
type Node struct {
	o    *Overlay
	ino  uint64
	mode uint32 // file type bits only; never changes

	cmu sync.Mutex // serializes data copy-up of this node

	// Guarded by o.mu.
	parent  *Node
	name    string
	aliases []alias // further names of a hard-linked non-directory
	state   nodeState
	lower   *store.Entry // lower entry: metadata of a lower node, content origin of meta/partial nodes
	cache   string       // materialized lower content, once known
	backing uint64       // upper inode number once known
	nlink   int          // names of a lower-only node in a hard-link group
	dir     *dirState
	opens   int        // open handles, for unlinked-but-open nodes
	listed  upperStamp // its upper file as the last Changes listed it open for writing
}

type alias struct {
	parent *Node
	name   string
}

type dirState struct {
	loadMu sync.Mutex // serializes loading from the Store and the upper

	// Guarded by Overlay.mu.
	loaded    bool
	resolved  bool     // lowerID is known (redirects are resolved on load)
	lowerID   store.ID // lower tree merged under this directory; zero: none
	lowerPath string   // its absolute path in the lower tree; "" if none
	redirect  string   // trusted.overlay.redirect, when set
	opaque    bool
	lowerTree *store.Tree
	children  map[string]*Node
	whiteouts map[string]struct{}
	subdirs   int        // children that are directories: the link count is 2 + subdirs
	listing   []DirEntry // sorted, nil when stale
	path      string     // cached relative path
	pathGen   uint64
	dirty     map[string]*dirtyEnt
}

// Ino returns the node's inode number.
func (n *Node) Ino() uint64 { return n.ino }

// Mode returns the node's file type bits (syscall.S_IF*).
func (n *Node) Mode() uint32 { return n.mode }

// IsDir reports whether n is a directory.
func (n *Node) IsDir() bool { return n.mode == syscall.S_IFDIR }

func (o *Overlay) newIno() uint64 { return o.nextIno.Add(1) }

func (o *Overlay) newNode(mode uint32, state nodeState) *Node {
	return &Node{o: o, ino: o.newIno(), mode: mode & syscall.S_IFMT, state: state}
}

// relPath returns n's path relative to the root ("" for the root), using
// the primary name of hard-linked nodes. Needs o.mu.
func (o *Overlay) relPath(n *Node) string {
	if n == o.root {
		return ""
	}
	if n.parent == nil {
		return "" // unlinked; callers check
	}
	p := o.dirPath(n.parent)
	if p == "" {
		return n.name
	}
	return p + "/" + n.name
}

func (o *Overlay) dirPath(d *Node) string {
	if d == o.root {
		return ""
	}
	ds := d.dir
	if ds.pathGen == o.renames+1 {
		return ds.path
	}
	p := o.relPath(d)
	ds.path, ds.pathGen = p, o.renames+1
	return p
}

// tmpName returns a new name for a scratch entry of the work directory.
func (o *Overlay) tmpName() string {
	return "t" + strconv.FormatUint(o.tmpSeq.Add(1), 10)
}

// linked reports whether n still has a name. Needs o.mu.
func (n *Node) linked() bool { return n.parent != nil || n == n.o.root }

// ensureLoaded makes d's merged children known: its lower tree (from the
// Store, outside the tree lock) and its upper directory.
func (o *Overlay) ensureLoaded(ctx context.Context, d *Node) error {
	if d.mode != syscall.S_IFDIR {
		return syscall.ENOTDIR
	}
	o.mu.RLock()
	loaded := d.dir.loaded
	o.mu.RUnlock()
	if loaded {
		return nil
	}
	ds := d.dir
	ds.loadMu.Lock()
	defer ds.loadMu.Unlock()
	o.mu.RLock()
	loaded, resolved, id, redirect := ds.loaded, ds.resolved, ds.lowerID, ds.redirect
	o.mu.RUnlock()
	if loaded {
		return nil
	}
	if !resolved {
		var err error
		id, err = o.resolveLower(ctx, redirect)
		if err != nil {
			return err
		}
	}
	var tree *store.Tree
	if !id.IsZero() {
		t, err := o.lower.Tree(ctx, id)
		if err != nil {
			return fmt.Errorf("load directory tree %s: %w", id.Short(), err)
		}
		tree = t
		for i := range t.Entries {
			if t.Entries[i].Link != 0 {
				if err := o.countLinks(ctx); err != nil {
					return err
				}
				break
			}
		}
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if ds.loaded {
		return nil
	}
	if !resolved {
		ds.lowerID, ds.resolved = id, true
		if id.IsZero() {
			ds.lowerPath = ""
		} else {
			ds.lowerPath = redirect
		}
	}
	if ds.opaque {
		tree = nil
	}
	if err := o.loadLocked(ctx, d, tree); err != nil {
		return err
	}
	o.stats.DirLoads.Add(1)
	return nil
}

// resolveLower finds the lower tree at an absolute lower path.
func (o *Overlay) resolveLower(ctx context.Context, p string) (store.ID, error) {
	id := o.lowerRoot
	if p == "" || id.IsZero() {
		return store.ZeroID, nil
	}
	for _, c := range splitPath(p) {
		t, err := o.lower.Tree(ctx, id)
		if err != nil {
			return store.ZeroID, fmt.Errorf("resolve redirect %q: %w", p, err)
		}
		e, ok := t.Find(c)
		if !ok || e.Type != store.TypeDir {
			return store.ZeroID, nil
		}
		id = e.Object
	}
	return id, nil
}

func splitPath(p string) []string {
	var out []string
	start := 0
	for i := 0; i <= len(p); i++ {
		if i == len(p) || p[i] == '/' {
			if i > start {
				out = append(out, p[start:i])
			}
			start = i + 1
		}
	}
	return out
}

// loadLocked merges d's lower tree and upper directory into d.dir.children.
func (o *Overlay) loadLocked(ctx context.Context, d *Node, tree *store.Tree) error {
	ds := d.dir
	ds.lowerTree = tree
	ds.children = map[string]*Node{}
	ds.whiteouts = map[string]struct{}{}
	type upperEnt struct {
		name string
		st   unix.Stat_t
	}
	var ups []upperEnt
	var dfd int // d's upper directory, open for the upper entries' xattrs
	if d.state != stateLower {
		a, err := o.nodeAt(d)
		if err != nil {
			return fmt.Errorf("load upper directory: %w", err)
		}
		dfd, err = openDirAt(a, unix.O_RDONLY)
		a.close()
		if err != nil {
			return fmt.Errorf("load upper directory: %w", err)
		}
		f := os.NewFile(uintptr(dfd), "upper directory")
		defer f.Close()
		names, err := f.Readdirnames(-1)
		if err != nil {
			return fmt.Errorf("load upper directory: %w", err)
		}
		for _, name := range names {
			var st unix.Stat_t
			if err := unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				return fmt.Errorf("load upper directory: %w", err)
			}
			if isWhiteout(&st) {
				ds.whiteouts[name] = struct{}{}
				continue
			}
			ups = append(ups, upperEnt{name, st})
		}
	}
	upperNames := make(map[string]bool, len(ups))
	for _, u := range ups {
		upperNames[u.name] = true
	}
	var linkUps []string
	if tree != nil {
		for i := range tree.Entries {
			e := &tree.Entries[i]
			if upperNames[e.Name] {
				continue
			}
			if _, ok := ds.whiteouts[e.Name]; ok {
				continue
			}
			c, linkUp := o.lowerChild(d, e)
			ds.children[e.Name] = c
			if linkUp {
				linkUps = append(linkUps, e.Name)
			}
		}
	}
	for _, u := range ups {
		c, err := o.upperChild(ctx, d, at{dir: dfd, name: u.name}, &u.st, tree)
		if err != nil {
			return err
		}
		ds.children[u.name] = c
	}
	ds.loaded = true
	ds.listing = nil
	ds.subdirs = 0
	for _, c := range ds.children {
		if c.IsDir() {
			ds.subdirs++
		}
	}
	// A name of a lower hard-link group whose inode was copied up while
	// this directory was not loaded joins the upper inode now.
	for _, name := range linkUps {
		n := ds.children[name]
		if err := o.copyUpDirLocked(d); err != nil {
			return err
		}
		restore, err := o.keepTimes(d)
		if err != nil {
			return fmt.Errorf("link up %s: %w", name, err)
		}
		err = o.linkLocked(n, d, name)
		restore()
		if err != nil {
			return fmt.Errorf("link up %s: %w", name, err)
		}
		o.byUpper[n.backing] = n
	}
	return nil
}

// lowerChild returns the node for lower entry e in d, joining lower
// hard-link groups into one node.
func (o *Overlay) lowerChild(d *Node, e *store.Entry) (*Node, bool) {
	if e.Link != 0 && e.Type != store.TypeDir {
		if n, ok := o.byLink[e.Link]; ok && n.linked() {
			n.aliases = append(n.aliases, alias{d, e.Name})
			return n, n.state != stateLower
		}
	}
	n := o.newNode(typeMode(e.Type), stateLower)
	n.parent, n.name, n.lower = d, e.Name, e
	n.nlink = 1
	if e.Link != 0 && o.linkCounts[e.Link] > 1 {
		n.nlink = o.linkCounts[e.Link]
	}
	if e.Type == store.TypeDir {
		lp := ""
		if d.dir.lowerPath != "" {
			lp = joinLower(d.dir.lowerPath, e.Name)
		}
		n.dir = &dirState{lowerID: e.Object, lowerPath: lp, resolved: true}
	}
	if e.Link != 0 && e.Type != store.TypeDir {
		o.byLink[e.Link] = n
	}
	return n, false
}

func joinLower(dir, name string) string {
	if dir == "/" {
		return "/" + name
	}
	return dir + "/" + name
}

// upperChild returns the node for an upper entry of d.
func (o *Overlay) upperChild(ctx context.Context, d *Node, a at, st *unix.Stat_t, tree *store.Tree) (*Node, error) {
	name, path := a.name, a.proc()
	mode := st.Mode & syscall.S_IFMT
	if mode != syscall.S_IFDIR && st.Nlink > 1 {
		if n, ok := o.byUpper[st.Ino]; ok {
			n.aliases = append(n.aliases, alias{d, name})
			return n, nil
		}
	}
	n := o.newNode(mode, stateUpper)
	n.parent, n.name = d, name
	n.backing = st.Ino
	switch mode {
	case syscall.S_IFDIR:
		ds := &dirState{}
		n.dir = ds
		if v, err := lgetxattr(path, xattrOpaque); err == nil && string(v) == "y" {
			ds.opaque = true
		}
		if v, err := lgetxattr(path, xattrRedirect); err == nil && len(v) > 0 {
			ds.redirect = absRedirect(d, string(v))
		}
		switch {
		case ds.redirect != "":
			// resolved on load, outside the tree lock
		case ds.opaque || tree == nil || d.dir.lowerPath == "":
			ds.resolved = true
		default:
			ds.resolved = true
			if e, ok := tree.Find(name); ok && e.Type == store.TypeDir {
				ds.lowerID = e.Object
				ds.lowerPath = joinLower(d.dir.lowerPath, name)
			}
		}
	case syscall.S_IFREG:
		if v, err := lgetxattr(path, xattrOrigin); err == nil {
			g, err := decodeOrigin(v)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
			n.lower = g.entry()
			n.state = stateMeta
		} else if _, err := lgetxattr(path, xattrMetacopy); err == nil {
			e, err := o.metacopyOrigin(ctx, d, name, path, tree)
			if err != nil {
				return nil, err
			}
			n.lower = e
			n.state = stateMeta
		}
	}
	if mode != syscall.S_IFDIR && st.Nlink > 1 {
		o.byUpper[st.Ino] = n
	}
	return n, nil
}

func typeMode(t store.EntryType) uint32 {
	if m := t.FileType(); m != 0 {
		return m
	}
	return syscall.S_IFREG
}

// countLinks counts the names of every lower hard-link group, once, by
// walking the whole lower tree: a lower file's link count must be right
// before all its directories are loaded.
func (o *Overlay) countLinks(ctx context.Context) error {
	o.linksOnce.Do(func() {
		counts := map[uint64]int{}
		var walk func(id store.ID) error
		walk = func(id store.ID) error {
			t, err := o.lower.Tree(ctx, id)
			if err != nil {
				return err
			}
			for i := range t.Entries {
				e := &t.Entries[i]
				if e.Type == store.TypeDir {
					if err := walk(e.Object); err != nil {
						return err
					}
				} else if e.Link != 0 {
					counts[e.Link]++
				}
			}
			return nil
		}
		if o.linksErr = walk(o.lowerRoot); o.linksErr == nil {
			o.mu.Lock()
			o.linkCounts = counts
			o.mu.Unlock()
		}
	})
	if o.linksErr != nil {
		return fmt.Errorf("count lower hard links: %w", o.linksErr)
	}
	return nil
}
