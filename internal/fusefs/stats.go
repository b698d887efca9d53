package fusefs

import (
	"sort"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"

	"layerfs.dev/layerfs/internal/account"
)

// Op identifies a FUSE request kind in the telemetry.
type Op int

// The request kinds counted.
const (
	OpLookup Op = iota
	OpForget
	OpGetattr
	OpSetattr
	OpMknod
	OpMkdir
	OpUnlink
	OpRmdir
	OpRename
	OpLink
	OpSymlink
	OpReadlink
	OpAccess
	OpGetxattr
	OpListxattr
	OpSetxattr
	OpRemovexattr
	OpCreate
	OpTmpfile
	OpOpen
	OpRead
	OpLseek
	OpGetlk
	OpSetlk
	OpSetlkw
	OpRelease
	OpWrite
	OpCopyFileRange
	OpIoctl
	OpFlush
	OpFsync
	OpFallocate
	OpOpendir
	OpReaddir
	OpReaddirplus
	OpReleasedir
	OpFsyncdir
	OpStatfs
	OpStatx
	numOps
)

var opNames = [numOps]string{
	"LOOKUP", "FORGET", "GETATTR", "SETATTR", "MKNOD", "MKDIR", "UNLINK", "RMDIR", "RENAME", "LINK",
	"SYMLINK", "READLINK", "ACCESS", "GETXATTR", "LISTXATTR", "SETXATTR", "REMOVEXATTR", "CREATE",
	"TMPFILE", "OPEN", "READ", "LSEEK", "GETLK", "SETLK", "SETLKW", "RELEASE", "WRITE",
	"COPY_FILE_RANGE", "IOCTL", "FLUSH", "FSYNC", "FALLOCATE", "OPENDIR", "READDIR", "READDIRPLUS",
	"RELEASEDIR", "FSYNCDIR", "STATFS", "STATX",
}

func (o Op) String() string { return opNames[o] }

// Stats is a snapshot of a mount's request telemetry: per-opcode counts
// and daemon service time (the time inside the handler, not the kernel
// round trip), and a latency histogram over all requests.
type Stats struct {
	account.RequestStats
	// DataPath is "passthrough" when file data bypassed the daemon, or
	// "daemon" (with the reason) when the kernel refused passthrough.
	DataPath string
}

// The opcodes fit an account's request table.
var _ [account.MaxKinds - numOps]struct{}

// Sub returns the requests made between an earlier snapshot and s.
func (s Stats) Sub(earlier Stats) Stats {
	return Stats{RequestStats: s.RequestStats.Sub(earlier.RequestStats), DataPath: s.DataPath}
}

// OpCount is one opcode's share of a snapshot.
type OpCount struct {
	Op    Op
	Count uint64
	Time  time.Duration
}

// ByOp lists the opcodes that occurred, most frequent first.
func (s Stats) ByOp() []OpCount {
	var out []OpCount
	for i, c := range s.Count[:numOps] {
		if c > 0 {
			out = append(out, OpCount{Op(i), c, time.Duration(s.Ns[i])})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Count > out[j].Count })
	return out
}

// counting wraps the go-fuse bridge and times every request, counting it
// in the mount's telemetry and in the account of the process that made
// it, if it has one (Options.Account).
type counting struct {
	fuse.RawFileSystem
	t       *account.Requests
	account func(pid uint32) *account.Account
	onOpen  func(cancel <-chan struct{}, out *fuse.OpenOut)
}

// record counts a request of op that process pid (0: the kernel, or a
// process the mount's PID namespace does not see) made at start.
func (c *counting) record(op Op, pid uint32, start time.Time) {
	d := time.Since(start)
	c.t.Record(int(op), d)
	if pid != 0 && c.account != nil {
		c.account(pid).RecordRequest(int(op), d)
	}
}

func (c *counting) Lookup(cancel <-chan struct{}, h *fuse.InHeader, name string, out *fuse.EntryOut) fuse.Status {
	defer c.record(OpLookup, h.Pid, time.Now())
	return c.RawFileSystem.Lookup(cancel, h, name, out)
}

func (c *counting) Forget(nodeid, nlookup uint64) {
	defer c.record(OpForget, 0, time.Now())
	c.RawFileSystem.Forget(nodeid, nlookup)
}

func (c *counting) GetAttr(cancel <-chan struct{}, in *fuse.GetAttrIn, out *fuse.AttrOut) fuse.Status {
	defer c.record(OpGetattr, in.Pid, time.Now())
	return c.RawFileSystem.GetAttr(cancel, in, out)
}

func (c *counting) SetAttr(cancel <-chan struct{}, in *fuse.SetAttrIn, out *fuse.AttrOut) fuse.Status {
	defer c.record(OpSetattr, in.Pid, time.Now())
	return c.RawFileSystem.SetAttr(cancel, in, out)
}

func (c *counting) Mknod(cancel <-chan struct{}, in *fuse.MknodIn, name string, out *fuse.EntryOut) fuse.Status {
	defer c.record(OpMknod, in.Pid, time.Now())
	return c.RawFileSystem.Mknod(cancel, in, name, out)
}

func (c *counting) Mkdir(cancel <-chan struct{}, in *fuse.MkdirIn, name string, out *fuse.EntryOut) fuse.Status {
	defer c.record(OpMkdir, in.Pid, time.Now())
	return c.RawFileSystem.Mkdir(cancel, in, name, out)
}

func (c *counting) Unlink(cancel <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	defer c.record(OpUnlink, h.Pid, time.Now())
	return c.RawFileSystem.Unlink(cancel, h, name)
}

func (c *counting) Rmdir(cancel <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	defer c.record(OpRmdir, h.Pid, time.Now())
	return c.RawFileSystem.Rmdir(cancel, h, name)
}

func (c *counting) Rename(cancel <-chan struct{}, in *fuse.RenameIn, oldName, newName string) fuse.Status {
	defer c.record(OpRename, in.Pid, time.Now())
	return c.RawFileSystem.Rename(cancel, in, oldName, newName)
}

func (c *counting) Link(cancel <-chan struct{}, in *fuse.LinkIn, name string, out *fuse.EntryOut) fuse.Status {
	defer c.record(OpLink, in.Pid, time.Now())
	return c.RawFileSystem.Link(cancel, in, name, out)
}

func (c *counting) Symlink(cancel <-chan struct{}, h *fuse.InHeader, target, name string, out *fuse.EntryOut) fuse.Status {
	defer c.record(OpSymlink, h.Pid, time.Now())
	return c.RawFileSystem.Symlink(cancel, h, target, name, out)
}

func (c *counting) Readlink(cancel <-chan struct{}, h *fuse.InHeader) ([]byte, fuse.Status) {
	defer c.record(OpReadlink, h.Pid, time.Now())
	return c.RawFileSystem.Readlink(cancel, h)
}

func (c *counting) Access(cancel <-chan struct{}, in *fuse.AccessIn) fuse.Status {
	defer c.record(OpAccess, in.Pid, time.Now())
	return c.RawFileSystem.Access(cancel, in)
}

func (c *counting) GetXAttr(cancel <-chan struct{}, h *fuse.InHeader, attr string, dest []byte) (uint32, fuse.Status) {
	defer c.record(OpGetxattr, h.Pid, time.Now())
	return c.RawFileSystem.GetXAttr(cancel, h, attr, dest)
}

func (c *counting) ListXAttr(cancel <-chan struct{}, h *fuse.InHeader, dest []byte) (uint32, fuse.Status) {
	defer c.record(OpListxattr, h.Pid, time.Now())
	return c.RawFileSystem.ListXAttr(cancel, h, dest)
}

func (c *counting) SetXAttr(cancel <-chan struct{}, in *fuse.SetXAttrIn, attr string, data []byte) fuse.Status {
	defer c.record(OpSetxattr, in.Pid, time.Now())
	return c.RawFileSystem.SetXAttr(cancel, in, attr, data)
}

func (c *counting) RemoveXAttr(cancel <-chan struct{}, h *fuse.InHeader, attr string) fuse.Status {
	defer c.record(OpRemovexattr, h.Pid, time.Now())
	return c.RawFileSystem.RemoveXAttr(cancel, h, attr)
}

func (c *counting) Create(cancel <-chan struct{}, in *fuse.CreateIn, name string, out *fuse.CreateOut) fuse.Status {
	defer c.record(OpCreate, in.Pid, time.Now())
	st := c.RawFileSystem.Create(cancel, in, name, out)
	if st == fuse.OK {
		c.onOpen(cancel, &out.OpenOut)
	}
	return st
}

func (c *counting) Tmpfile(cancel <-chan struct{}, in *fuse.CreateIn, out *fuse.CreateOut) fuse.Status {
	defer c.record(OpTmpfile, in.Pid, time.Now())
	return c.RawFileSystem.Tmpfile(cancel, in, out)
}

func (c *counting) Open(cancel <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	defer c.record(OpOpen, in.Pid, time.Now())
	st := c.RawFileSystem.Open(cancel, in, out)
	if st == fuse.OK {
		c.onOpen(cancel, out)
	}
	return st
}

func (c *counting) Read(cancel <-chan struct{}, in *fuse.ReadIn, buf []byte) (fuse.ReadResult, fuse.Status) {
	defer c.record(OpRead, in.Pid, time.Now())
	return c.RawFileSystem.Read(cancel, in, buf)
}

func (c *counting) Lseek(cancel <-chan struct{}, in *fuse.LseekIn, out *fuse.LseekOut) fuse.Status {
	defer c.record(OpLseek, in.Pid, time.Now())
	return c.RawFileSystem.Lseek(cancel, in, out)
}

func (c *counting) GetLk(cancel <-chan struct{}, in *fuse.LkIn, out *fuse.LkOut) fuse.Status {
	defer c.record(OpGetlk, in.Pid, time.Now())
	return c.RawFileSystem.GetLk(cancel, in, out)
}

func (c *counting) SetLk(cancel <-chan struct{}, in *fuse.LkIn) fuse.Status {
	defer c.record(OpSetlk, in.Pid, time.Now())
	return c.RawFileSystem.SetLk(cancel, in)
}

func (c *counting) SetLkw(cancel <-chan struct{}, in *fuse.LkIn) fuse.Status {
	defer c.record(OpSetlkw, in.Pid, time.Now())
	return c.RawFileSystem.SetLkw(cancel, in)
}

func (c *counting) Release(cancel <-chan struct{}, in *fuse.ReleaseIn) {
	defer c.record(OpRelease, in.Pid, time.Now())
	c.RawFileSystem.Release(cancel, in)
}

func (c *counting) Write(cancel <-chan struct{}, in *fuse.WriteIn, data []byte) (uint32, fuse.Status) {
	defer c.record(OpWrite, in.Pid, time.Now())
	return c.RawFileSystem.Write(cancel, in, data)
}

func (c *counting) Writev(cancel <-chan struct{}, in *fuse.WriteIn, data [][]byte) (uint32, fuse.Status) {
	defer c.record(OpWrite, in.Pid, time.Now())
	return c.RawFileSystem.Writev(cancel, in, data)
}

func (c *counting) CopyFileRange(cancel <-chan struct{}, in *fuse.CopyFileRangeIn) (uint32, fuse.Status) {
	defer c.record(OpCopyFileRange, in.Pid, time.Now())
	return c.RawFileSystem.CopyFileRange(cancel, in)
}

func (c *counting) Ioctl(cancel <-chan struct{}, in *fuse.IoctlIn, inbuf []byte, out *fuse.IoctlOut, outbuf []byte) fuse.Status {
	defer c.record(OpIoctl, in.Pid, time.Now())
	return c.RawFileSystem.Ioctl(cancel, in, inbuf, out, outbuf)
}

func (c *counting) Flush(cancel <-chan struct{}, in *fuse.FlushIn) fuse.Status {
	defer c.record(OpFlush, in.Pid, time.Now())
	return c.RawFileSystem.Flush(cancel, in)
}

func (c *counting) Fsync(cancel <-chan struct{}, in *fuse.FsyncIn) fuse.Status {
	defer c.record(OpFsync, in.Pid, time.Now())
	return c.RawFileSystem.Fsync(cancel, in)
}

func (c *counting) Fallocate(cancel <-chan struct{}, in *fuse.FallocateIn) fuse.Status {
	defer c.record(OpFallocate, in.Pid, time.Now())
	return c.RawFileSystem.Fallocate(cancel, in)
}

func (c *counting) OpenDir(cancel <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	defer c.record(OpOpendir, in.Pid, time.Now())
	return c.RawFileSystem.OpenDir(cancel, in, out)
}

func (c *counting) ReadDir(cancel <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	defer c.record(OpReaddir, in.Pid, time.Now())
	return c.RawFileSystem.ReadDir(cancel, in, out)
}

func (c *counting) ReadDirPlus(cancel <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	defer c.record(OpReaddirplus, in.Pid, time.Now())
	return c.RawFileSystem.ReadDirPlus(cancel, in, out)
}

func (c *counting) ReleaseDir(in *fuse.ReleaseIn) {
	defer c.record(OpReleasedir, in.Pid, time.Now())
	c.RawFileSystem.ReleaseDir(in)
}

func (c *counting) FsyncDir(cancel <-chan struct{}, in *fuse.FsyncIn) fuse.Status {
	defer c.record(OpFsyncdir, in.Pid, time.Now())
	return c.RawFileSystem.FsyncDir(cancel, in)
}

func (c *counting) StatFs(cancel <-chan struct{}, in *fuse.InHeader, out *fuse.StatfsOut) fuse.Status {
	defer c.record(OpStatfs, in.Pid, time.Now())
	return c.RawFileSystem.StatFs(cancel, in, out)
}

func (c *counting) Statx(cancel <-chan struct{}, in *fuse.StatxIn, out *fuse.StatxOut) fuse.Status {
	defer c.record(OpStatx, in.Pid, time.Now())
	return c.RawFileSystem.Statx(cancel, in, out)
}
