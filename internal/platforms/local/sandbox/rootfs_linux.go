package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/internal/platforms/internal/userns"
)

// stagingDir is where the new root's tmpfs is mounted, in the init's
// private mount namespace, before pivot_root. Every source tree is cloned
// (open_tree) before, and the workspace after, so a workspace or image
// below /tmp is no problem.
const stagingDir = "/tmp"

// hostRuntime is the default root: these top-level entries of the host,
// read-only. On merged-/usr systems bin, sbin and lib* are symlinks into
// usr and are recreated as symlinks.
var hostRuntime = []string{"usr", "etc", "bin", "sbin", "lib", "lib32", "lib64", "libx32"}

// reserved are the root entries the sandbox provides itself; an image's
// entries with these names are not used.
var reserved = map[string]bool{"workspace": true, "tmp": true, "proc": true, "dev": true, "sys": true}

// procReadOnly are the parts of /proc through which a uid-0 process without
// capabilities could still change the host (sysctls, sysrq, IRQ affinity):
// they are bound read-only over themselves.
var procReadOnly = []string{"sys", "sysrq-trigger", "irq", "bus", "fs"}

// masked are the parts of /proc and /sys that tell a sandbox about the
// host's kernel (addresses, timers, keys, firmware, devices) without being
// any use to a workload: files get /dev/null bound over them, directories
// an empty read-only tmpfs. The list is Docker's (MaskedPaths of its
// default spec).
var masked = []string{
	"proc/acpi", "proc/asound", "proc/interrupts", "proc/kcore", "proc/keys",
	"proc/latency_stats", "proc/timer_list", "proc/timer_stats", "proc/sched_debug",
	"proc/scsi", "sys/firmware", "sys/devices/virtual/powercap",
}

// devNodes are the character devices of the sandbox's /dev.
var devNodes = []struct {
	name         string
	major, minor uint32
}{
	{"null", 1, 3}, {"zero", 1, 5}, {"full", 1, 7},
	{"random", 1, 8}, {"urandom", 1, 9}, {"tty", 5, 0},
}

// rootEntry is one top-level entry of the new root.
type rootEntry struct {
	name   string
	tree   int    // detached clone of a directory or file (-1 if none)
	isFile bool   // tree is a file: its mount point is an empty file
	link   string // symlink target, when this entry is a symlink
}

// rootEnv carries the root's entries from the launcher, which clones them
// (id-mapped for its user namespace where the init runs in it), to the
// init, as JSON; their clones follow the init's fd rootFD in order.
const rootEnv = "LAYERFS_SANDBOX_ROOT"

// wireEntry is a rootEntry in rootEnv.
type wireEntry struct {
	Name   string `json:"name"`
	Tree   bool   `json:"tree,omitempty"`
	IsFile bool   `json:"file,omitempty"`
	Link   string `json:"link,omitempty"`
}

// entriesEnv is entries as rootEnv's variable, and their clones as files
// in the order the init numbers them; the files own the clones now.
func entriesEnv(entries []rootEntry) (string, []*os.File) {
	var wire []wireEntry
	var trees []*os.File
	for _, e := range entries {
		wire = append(wire, wireEntry{Name: e.name, Tree: e.tree >= 0, IsFile: e.isFile, Link: e.link})
		if e.tree >= 0 {
			trees = append(trees, os.NewFile(uintptr(e.tree), e.name))
		}
	}
	b, _ := json.Marshal(wire)
	return rootEnv + "=" + string(b), trees
}

// entriesFromEnv is the init's side of entriesEnv.
func entriesFromEnv() ([]rootEntry, error) {
	var wire []wireEntry
	if err := json.Unmarshal([]byte(os.Getenv(rootEnv)), &wire); err != nil {
		return nil, fmt.Errorf("the root's entries: %w", err)
	}
	out := make([]rootEntry, len(wire))
	fd := rootFD
	for i, w := range wire {
		out[i] = rootEntry{name: w.Name, tree: -1, isFile: w.IsFile, link: w.Link}
		if w.Tree {
			out[i].tree = fd
			fd++
		}
	}
	return out, nil
}

// closeEntries closes the entries' clones.
func closeEntries(entries []rootEntry) {
	for _, e := range entries {
		if e.tree >= 0 {
			unix.Close(e.tree)
		}
	}
}

// prepareRoot builds the sandbox's file system tree, all but /workspace,
// in a new mount namespace, and returns an fd of that namespace:
//
//	/            tmpfs, read-only after the pivot
//	/usr ...     the host runtime or the image's entries, read-only
//	/workspace   an empty mount point (mountWorkspace mounts the workspace)
//	/tmp         private tmpfs
//	/proc        fresh procfs for the new PID namespace, with the parts that
//	             write to the kernel read-only and the ones that tell about
//	             it masked
//	/sys         sysfs, read-only, partly masked
//	/dev         minimal tmpfs, read-only after it is populated
//
// It runs on a thread of its own, which unshares its mount namespace (a
// copy of the one the init started in: the spawner's small one, see
// enterSmallRoot, or the host's) and pivots into the new root and then
// ends (its goroutine returns while locked); the init's main thread and
// mounter enter the namespace afterwards (enterAhead). A warm init
// prepares its root this way long before its exec.
//
// entries are the root's top-level entries, cloned by the launcher; they
// are closed. Inside the launcher's user namespace, the tmpfs mounts are
// its root's, as the init mounts them there.
func prepareRoot(entries []rootEntry, m *marks) (int, error) {
	type result struct {
		ns  int
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
		ns, err := buildRoot(entries, m)
		ch <- result{ns, err}
	}()
	r := <-ch
	return r.ns, r.err
}

// buildRoot does prepareRoot's work on the calling (locked) thread.
func buildRoot(entries []rootEntry, m *marks) (ns int, err error) {
	defer closeEntries(entries)
	m.add("clone")
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		return -1, fmt.Errorf("new mount namespace: %w", err)
	}
	// Nothing mounted from here on may reach the host's namespace.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return -1, fmt.Errorf("make mounts private: %w", err)
	}
	whole := len(entries) == 1 && entries[0].name == wholeRoot
	if whole {
		// A workspace's own copy-on-write root: the root itself, writable.
		if err := unix.MoveMount(entries[0].tree, "", unix.AT_FDCWD, stagingDir, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
			return -1, fmt.Errorf("mount the root: %w", err)
		}
		unix.Close(entries[0].tree)
		entries[0].tree = -1
	} else if err := unix.Mount("tmpfs", stagingDir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755"); err != nil {
		return -1, fmt.Errorf("mount root tmpfs: %w", err)
	}
	root, err := unix.Open(stagingDir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open new root: %w", err)
	}
	defer unix.Close(root)

	for i := range entries {
		if whole {
			break
		}
		e := &entries[i]
		switch {
		case e.link != "":
			if err := unix.Symlinkat(e.link, root, e.name); err != nil {
				return -1, fmt.Errorf("symlink /%s: %w", e.name, err)
			}
			continue
		case e.isFile:
			fd, err := unix.Openat(root, e.name, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, 0o444)
			if err != nil {
				return -1, fmt.Errorf("create /%s: %w", e.name, err)
			}
			unix.Close(fd)
		default:
			if err := unix.Mkdirat(root, e.name, 0o755); err != nil {
				return -1, fmt.Errorf("mkdir /%s: %w", e.name, err)
			}
		}
		if err := unix.MoveMount(e.tree, "", root, e.name, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
			return -1, fmt.Errorf("mount /%s: %w", e.name, err)
		}
		unix.Close(e.tree)
		e.tree = -1
	}

	for _, d := range []struct {
		name string
		mode uint32
	}{{"workspace", 0o755}, {"tmp", 0o1777}, {"proc", 0o555}, {"sys", 0o555}, {"dev", 0o755}} {
		// A whole root may have them (an image's /tmp): they are mounted over.
		if err := unix.Mkdirat(root, d.name, d.mode); err != nil && !(whole && errors.Is(err, unix.EEXIST)) {
			return -1, fmt.Errorf("mkdir /%s: %w", d.name, err)
		}
	}
	if err := unix.Mount("tmpfs", stagingDir+"/tmp", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=1777"); err != nil {
		return -1, fmt.Errorf("mount /tmp: %w", err)
	}
	m.add("root")
	if err := mountProc(stagingDir + "/proc"); err != nil {
		return -1, err
	}
	if err := mountSys(stagingDir + "/sys"); err != nil {
		return -1, err
	}
	if err := mask(stagingDir); err != nil {
		return -1, err
	}
	m.add("proc")
	if err := buildDev(stagingDir + "/dev"); err != nil {
		return -1, err
	}
	m.add("dev")
	if err := pivot(stagingDir, !whole); err != nil {
		return -1, err
	}
	m.add("pivot")
	ns, err = unix.Open("/proc/thread-self/ns/mnt", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open the new mount namespace: %w", err)
	}
	return ns, nil
}

// enterNS moves the calling thread into the mount namespace ns.
func enterNS(ns int) error {
	// setns to a mount namespace needs a root and cwd of this thread's own.
	if err := unix.Unshare(unix.CLONE_FS); err != nil {
		return fmt.Errorf("unshare fs: %w", err)
	}
	if err := unix.Setns(ns, unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("enter the sandbox's mount namespace: %w", err)
	}
	return nil
}

// The init enters its root ahead, on its main thread, and loads the
// filter there, which then refuses the mounts and the hostname each exec
// still needs: a mounter, a thread of its own in the same namespace and
// without the filter, mounts the workspace the launcher sends with each
// exec (while the main thread reads the exec's config) and resets the
// sandbox after it.
type mounter struct{ work chan mountWork }

type mountWork struct {
	f    func() error
	done chan error
}

// enterAhead moves the calling thread into the prepared namespace ns,
// starts a mounter there and closes ns.
func enterAhead(ns int) (*mounter, error) {
	defer unix.Close(ns)
	mt := &mounter{work: make(chan mountWork)}
	ready := make(chan error)
	go func() {
		// Never unlocked: the thread is in the sandbox's namespace and
		// ends with the goroutine, which serves the init's whole life.
		runtime.LockOSThread()
		err := enterNS(ns)
		ready <- err
		if err != nil {
			return
		}
		for w := range mt.work {
			w.done <- w.f()
		}
	}()
	if err := <-ready; err != nil {
		return nil, err
	}
	if err := enterNS(ns); err != nil {
		return nil, err
	}
	return mt, nil
}

// do runs f on the mounter's thread and returns its error.
func (mt *mounter) do(f func() error) error { return <-mt.start(f) }

// start has the mounter run f and returns the channel its error comes on.
func (mt *mounter) start(f func() error) <-chan error {
	done := make(chan error, 1)
	mt.work <- mountWork{f: f, done: done}
	return done
}

// mountWorkspace sets the hostname and mounts the workspace's clone ws at
// /workspace (closing ws), on the mounter's thread.
func mountWorkspace(ws int, hostname string) error {
	defer unix.Close(ws)
	if err := unix.Sethostname([]byte(hostname)); err != nil {
		return fmt.Errorf("set hostname: %w", err)
	}
	if err := unix.MoveMount(ws, "", unix.AT_FDCWD, "/workspace", unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("mount /workspace: %w", err)
	}
	return nil
}

// resetSandbox undoes what an exec changed in the sandbox, on the
// mounter's thread once every process of the exec is gone: the workspace
// is unmounted (the sandbox holds none between execs), /tmp and /dev/shm
// are fresh tmpfs mounts again, and the System V IPC objects and POSIX
// message queues (in mqueue, a detached mount of the IPC namespace's
// mqueue file system, or -1) the exec left are removed. What else could
// outlive a command in the sandbox needs a capability its root does not
// have (CAP_SYS_ADMIN, CAP_NET_ADMIN) or is read-only.
func resetSandbox(mqueue int) error {
	if err := unix.Unmount("/workspace", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("unmount /workspace: %w", err)
	}
	for _, d := range []struct{ dir, opts string }{{"/tmp", "mode=1777"}, {"/dev/shm", "mode=1777"}} {
		if err := unix.Unmount(d.dir, unix.MNT_DETACH); err != nil {
			return fmt.Errorf("unmount %s: %w", d.dir, err)
		}
		flags := uintptr(unix.MS_NOSUID | unix.MS_NODEV)
		if d.dir == "/dev/shm" {
			flags |= unix.MS_NOEXEC
		}
		if err := unix.Mount("tmpfs", d.dir, "tmpfs", flags, d.opts); err != nil {
			return fmt.Errorf("mount %s: %w", d.dir, err)
		}
	}
	if err := removeSysVIPC(); err != nil {
		return err
	}
	return removeMessageQueues(mqueue)
}

// sysVIPC are the System V IPC objects' lists in /proc (the reader's IPC
// namespace's) and how each kind is removed.
var sysVIPC = []struct {
	list string
	rm   func(id int) error
}{
	{"/proc/sysvipc/shm", func(id int) error { _, err := unix.SysvShmCtl(id, unix.IPC_RMID, nil); return err }},
	{"/proc/sysvipc/sem", func(id int) error {
		_, _, e := unix.Syscall6(unix.SYS_SEMCTL, uintptr(id), 0, unix.IPC_RMID, 0, 0, 0)
		return errnoErr(e)
	}},
	{"/proc/sysvipc/msg", func(id int) error {
		_, _, e := unix.Syscall(unix.SYS_MSGCTL, uintptr(id), unix.IPC_RMID, 0)
		return errnoErr(e)
	}},
}

func errnoErr(e unix.Errno) error {
	if e == 0 {
		return nil
	}
	return e
}

// removeSysVIPC removes every System V shared memory segment, semaphore
// set and message queue of the IPC namespace.
func removeSysVIPC() error {
	for _, k := range sysVIPC {
		b, err := os.ReadFile(k.list)
		if errors.Is(err, os.ErrNotExist) {
			continue // no System V IPC in this kernel
		}
		if err != nil {
			return fmt.Errorf("list %s: %w", k.list, err)
		}
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		for _, l := range lines[1:] { // a header, then key, id, ...
			f := strings.Fields(l)
			if len(f) < 2 {
				continue
			}
			id, err := strconv.Atoi(f[1])
			if err != nil {
				continue
			}
			if err := k.rm(id); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.EIDRM) {
				return fmt.Errorf("remove %s %d: %w", k.list, id, err)
			}
		}
	}
	return nil
}

// mqueueMount mounts the IPC namespace's mqueue file system where nothing
// in the sandbox sees it (a detached mount) and returns it, or -1 where
// the kernel has none.
func mqueueMount() int {
	fs, err := unix.Fsopen("mqueue", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return -1
	}
	defer unix.Close(fs)
	if err := unix.FsconfigCreate(fs); err != nil {
		return -1
	}
	m, err := unix.Fsmount(fs, unix.FSMOUNT_CLOEXEC, unix.MOUNT_ATTR_NOEXEC|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV)
	if err != nil {
		return -1
	}
	return m
}

// removeMessageQueues removes every POSIX message queue in mqueue.
func removeMessageQueues(mqueue int) error {
	if mqueue < 0 {
		return nil
	}
	d, err := unix.Openat(mqueue, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("list message queues: %w", err)
	}
	f := os.NewFile(uintptr(d), "mqueue")
	names, err := f.Readdirnames(-1)
	f.Close()
	if err != nil {
		return fmt.Errorf("list message queues: %w", err)
	}
	for _, n := range names {
		if err := unix.Unlinkat(mqueue, n, 0); err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("remove message queue %s: %w", n, err)
		}
	}
	return nil
}

// wholeRoot names the one entry of a root that is a directory whole: a
// workspace's own copy-on-write root, which becomes the sandbox's root
// itself, writable (its top level too), the sandbox's mount points made in
// it where it lacks them.
const wholeRoot = "/"

// rootEntries clones the trees that make up the new root: the host runtime
// when image is empty, else every top-level entry of the image directory,
// or, when writable (a workspace's own copy-on-write root), the image
// directory whole (wholeRoot).
func rootEntries(image string, writable bool, idmap int) ([]rootEntry, error) {
	if image != "" && writable {
		fd, err := cloneTree(unix.AT_FDCWD, image, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV, 0)
		if err != nil {
			return nil, fmt.Errorf("clone root %s: %w", image, err)
		}
		if idmap >= 0 {
			_ = userns.IDMap(fd, idmap) // an overlay over id-mapped layers shows the mapped ids already
		}
		return []rootEntry{{name: wholeRoot, tree: fd}}, nil
	}
	if image == "" {
		var out []rootEntry
		for _, name := range hostRuntime {
			e, err := entryAt(unix.AT_FDCWD, "/"+name, name, idmap)
			if errors.Is(err, unix.ENOENT) {
				continue
			}
			if err != nil {
				return out, err
			}
			out = append(out, e)
		}
		return out, nil
	}
	dir, err := os.Open(image)
	if err != nil {
		return nil, fmt.Errorf("open root dir: %w", err)
	}
	defer dir.Close()
	names, err := dir.Readdirnames(-1)
	if err != nil {
		return nil, fmt.Errorf("read root dir %s: %w", image, err)
	}
	var out []rootEntry
	for _, name := range names {
		if reserved[name] {
			continue
		}
		e, err := entryAt(int(dir.Fd()), name, name, idmap)
		if err != nil {
			return out, err
		}
		if e.tree < 0 && e.link == "" { // a device, socket or fifo: leave it out
			continue
		}
		out = append(out, e)
	}
	return out, nil
}

// entryAt describes path (relative to dirfd) as a root entry, cloning it
// read-only unless it is a symlink, and id-mapped with the user namespace
// idmap when that is >= 0 and the file system allows it. Symlinks are never
// followed.
func entryAt(dirfd int, path, name string, idmap int) (rootEntry, error) {
	e := rootEntry{name: name, tree: -1}
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, path, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return e, fmt.Errorf("stat %s: %w", path, err)
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFLNK:
		buf := make([]byte, 4096)
		n, err := unix.Readlinkat(dirfd, path, buf)
		if err != nil {
			return e, fmt.Errorf("readlink %s: %w", path, err)
		}
		e.link = string(buf[:n])
		return e, nil
	case unix.S_IFDIR, unix.S_IFREG:
		fd, err := cloneTree(dirfd, path, unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV, 0)
		if err != nil {
			return e, fmt.Errorf("clone %s: %w", path, err)
		}
		if idmap >= 0 {
			_ = userns.IDMap(fd, idmap) // else its files are nobody's inside
		}
		e.tree, e.isFile = fd, st.Mode&unix.S_IFMT == unix.S_IFREG
		return e, nil
	}
	return e, nil
}

// cloneTree returns a detached recursive bind of path with the given mount
// attributes set and cleared on every mount in it, ready for MoveMount.
func cloneTree(dirfd int, path string, set, clear uint64) (int, error) {
	fd, err := unix.OpenTree(dirfd, path,
		unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE|unix.AT_SYMLINK_NOFOLLOW)
	if err != nil {
		return -1, err
	}
	attr := unix.MountAttr{Attr_set: set, Attr_clr: clear}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &attr); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("set mount attributes: %w", err)
	}
	return fd, nil
}

// mountProc mounts a procfs for the new PID namespace and makes the parts
// of it that write to the kernel read-only.
func mountProc(dir string) error {
	if err := unix.Mount("proc", dir, "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mount /proc: %w", err)
	}
	for _, name := range procReadOnly {
		p := dir + "/" + name
		fd, err := cloneTree(unix.AT_FDCWD, p, unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV|unix.MOUNT_ATTR_NOEXEC, 0)
		if errors.Is(err, unix.ENOENT) {
			continue
		}
		if err != nil {
			return fmt.Errorf("protect /proc/%s: %w", name, err)
		}
		err = unix.MoveMount(fd, "", unix.AT_FDCWD, p, unix.MOVE_MOUNT_F_EMPTY_PATH)
		unix.Close(fd)
		if err != nil {
			return fmt.Errorf("protect /proc/%s: %w", name, err)
		}
	}
	return nil
}

// mountSys mounts a read-only sysfs (of the sandbox's network namespace).
// An init in the launcher's user namespace that keeps the host's network
// may not mount one (the network namespace is not its namespace's): it
// gets a read-only clone of the host's /sys instead.
func mountSys(dir string) error {
	err := unix.Mount("sysfs", dir, "sysfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "")
	if errors.Is(err, unix.EPERM) {
		var fd int
		if fd, err = cloneTree(unix.AT_FDCWD, "/sys", unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV|unix.MOUNT_ATTR_NOEXEC, 0); err == nil {
			err = unix.MoveMount(fd, "", unix.AT_FDCWD, dir, unix.MOVE_MOUNT_F_EMPTY_PATH)
			unix.Close(fd)
		}
	}
	if err != nil {
		return fmt.Errorf("mount /sys: %w", err)
	}
	return nil
}

// mask hides the masked paths below root (the new root, before the pivot).
func mask(root string) error {
	for _, name := range masked {
		p := root + "/" + name
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); errors.Is(err, unix.ENOENT) {
			continue
		} else if err != nil {
			return fmt.Errorf("mask /%s: %w", name, err)
		}
		var err error
		if st.Mode&unix.S_IFMT == unix.S_IFDIR {
			err = unix.Mount("tmpfs", p, "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=0,mode=0555")
		} else {
			err = unix.Mount("/dev/null", p, "", unix.MS_BIND, "")
		}
		if err != nil {
			return fmt.Errorf("mask /%s: %w", name, err)
		}
	}
	return nil
}

// buildDev makes the sandbox's /dev: a small tmpfs with the usual character
// devices, a private devpts and /dev/shm, then read-only.
func buildDev(dir string) error {
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NOEXEC, "mode=0755,size=64k"); err != nil {
		return fmt.Errorf("mount /dev: %w", err)
	}
	dev, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open /dev: %w", err)
	}
	defer unix.Close(dev)
	for _, n := range devNodes {
		err := unix.Mknodat(dev, n.name, unix.S_IFCHR|0o666, int(unix.Mkdev(n.major, n.minor)))
		if errors.Is(err, unix.EPERM) {
			err = bindHostDev(dev, n.name) // a host that forbids mknod
		}
		if err != nil {
			return fmt.Errorf("create /dev/%s: %w", n.name, err)
		}
	}
	for _, l := range [][2]string{
		{"/proc/self/fd", "fd"}, {"/proc/self/fd/0", "stdin"},
		{"/proc/self/fd/1", "stdout"}, {"/proc/self/fd/2", "stderr"},
		{"pts/ptmx", "ptmx"},
	} {
		if err := unix.Symlinkat(l[0], dev, l[1]); err != nil {
			return fmt.Errorf("symlink /dev/%s: %w", l[1], err)
		}
	}
	for _, d := range []string{"pts", "shm"} {
		if err := unix.Mkdirat(dev, d, 0o755); err != nil {
			return fmt.Errorf("mkdir /dev/%s: %w", d, err)
		}
	}
	if err := unix.Mount("devpts", dir+"/pts", "devpts", unix.MS_NOSUID|unix.MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620"); err != nil {
		return fmt.Errorf("mount /dev/pts: %w", err)
	}
	if err := unix.Mount("tmpfs", dir+"/shm", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=1777"); err != nil {
		return fmt.Errorf("mount /dev/shm: %w", err)
	}
	if err := unix.MountSetattr(dev, "", unix.AT_EMPTY_PATH, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}); err != nil {
		return fmt.Errorf("make /dev read-only: %w", err)
	}
	return nil
}

// bindHostDev binds the host's /dev/name onto an empty file in dev.
func bindHostDev(dev int, name string) error {
	fd, err := unix.Openat(dev, name, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, 0o666)
	if err != nil {
		return err
	}
	unix.Close(fd)
	tree, err := cloneTree(unix.AT_FDCWD, "/dev/"+name, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(tree)
	return unix.MoveMount(tree, "", dev, name, unix.MOVE_MOUNT_F_EMPTY_PATH)
}

// pivot makes dir the root, detaches the old root (the whole host tree this
// namespace was copied from) and makes the new root itself read-only
// (unless not readOnly: a workspace's own root).
func pivot(dir string, readOnly bool) error {
	if err := unix.Chdir(dir); err != nil {
		return fmt.Errorf("chdir new root: %w", err)
	}
	// pivot_root(".", ".") stacks the old root on top of the new one, so
	// no put_old directory is needed; unmounting "." then removes it.
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot_root: %w", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detach old root: %w", err)
	}
	if err := unix.Chdir("/"); err != nil {
		return fmt.Errorf("chdir /: %w", err)
	}
	if !readOnly {
		return nil
	}
	if err := unix.MountSetattr(unix.AT_FDCWD, "/", 0, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}); err != nil {
		return fmt.Errorf("make root read-only: %w", err)
	}
	return nil
}
