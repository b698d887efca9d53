package fusefs

import (
	"math/bits"
	"sort"
	"sync/atomic"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
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

// Latency buckets are log-linear: 4 per power of two of nanoseconds.
const (
	subBuckets = 4
	numBuckets = 64 * subBuckets
)

func bucketOf(ns int64) int {
	if ns < subBuckets {
		return int(max(ns, 0))
	}
	e := bits.Len64(uint64(ns)) - 1 // ns in [2^e, 2^(e+1))
	sub := int(uint64(ns)>>(e-2)) & (subBuckets - 1)
	return e*subBuckets + sub
}

// bucketLow is the smallest latency in bucket b.
func bucketLow(b int) int64 {
	if b < subBuckets {
		return int64(b)
	}
	e, sub := b/subBuckets, b%subBuckets
	return int64(1)<<e + int64(sub)<<(e-2)
}

// telemetry is the live counters: atomics only, no locks.
type telemetry struct {
	count [numOps]atomic.Uint64
	ns    [numOps]atomic.Uint64
	hist  [numBuckets]atomic.Uint64
}

func (t *telemetry) record(op Op, start time.Time) {
	d := time.Since(start).Nanoseconds()
	t.count[op].Add(1)
	t.ns[op].Add(uint64(d))
	t.hist[bucketOf(d)].Add(1)
}

// Stats is a snapshot of a mount's request telemetry: per-opcode counts
// and daemon service time (the time inside the handler, not the kernel
// round trip), and a latency histogram over all requests.
type Stats struct {
	Count [numOps]uint64
	Ns    [numOps]uint64
	Hist  [numBuckets]uint64
	// DataPath is "passthrough" when file data bypassed the daemon, or
	// "daemon" (with the reason) when the kernel refused passthrough.
	DataPath string
}

func (t *telemetry) snapshot() Stats {
	var s Stats
	for i := range s.Count {
		s.Count[i] = t.count[i].Load()
		s.Ns[i] = t.ns[i].Load()
	}
	for i := range s.Hist {
		s.Hist[i] = t.hist[i].Load()
	}
	return s
}

// Sub returns the requests made between an earlier snapshot and s.
func (s Stats) Sub(earlier Stats) Stats {
	d := Stats{DataPath: s.DataPath}
	for i := range s.Count {
		d.Count[i] = s.Count[i] - earlier.Count[i]
		d.Ns[i] = s.Ns[i] - earlier.Ns[i]
	}
	for i := range s.Hist {
		d.Hist[i] = s.Hist[i] - earlier.Hist[i]
	}
	return d
}

// Requests is the total number of requests.
func (s Stats) Requests() uint64 {
	var n uint64
	for _, c := range s.Count {
		n += c
	}
	return n
}

// ServiceTime is the total time spent in handlers.
func (s Stats) ServiceTime() time.Duration {
	var n uint64
	for _, c := range s.Ns {
		n += c
	}
	return time.Duration(n)
}

// Quantile estimates the q-quantile (0..1) of per-request service time
// from the histogram (to within a quarter octave).
func (s Stats) Quantile(q float64) time.Duration {
	total := uint64(0)
	for _, c := range s.Hist {
		total += c
	}
	if total == 0 {
		return 0
	}
	rank := uint64(q * float64(total))
	var seen uint64
	for b, c := range s.Hist {
		seen += c
		if seen > rank {
			lo, hi := bucketLow(b), bucketLow(b+1)
			return time.Duration((lo + hi) / 2)
		}
	}
	return 0
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
	for i, c := range s.Count {
		if c > 0 {
			out = append(out, OpCount{Op(i), c, time.Duration(s.Ns[i])})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Count > out[j].Count })
	return out
}

// counting wraps the go-fuse bridge and times every request.
type counting struct {
	fuse.RawFileSystem
	t      *telemetry
	onOpen func(cancel <-chan struct{}, out *fuse.OpenOut)
}

func (c *counting) Lookup(cancel <-chan struct{}, h *fuse.InHeader, name string, out *fuse.EntryOut) fuse.Status {
	defer c.t.record(OpLookup, time.Now())
	return c.RawFileSystem.Lookup(cancel, h, name, out)
}

func (c *counting) Forget(nodeid, nlookup uint64) {
	defer c.t.record(OpForget, time.Now())
	c.RawFileSystem.Forget(nodeid, nlookup)
}

func (c *counting) GetAttr(cancel <-chan struct{}, in *fuse.GetAttrIn, out *fuse.AttrOut) fuse.Status {
	defer c.t.record(OpGetattr, time.Now())
	return c.RawFileSystem.GetAttr(cancel, in, out)
}

func (c *counting) SetAttr(cancel <-chan struct{}, in *fuse.SetAttrIn, out *fuse.AttrOut) fuse.Status {
	defer c.t.record(OpSetattr, time.Now())
	return c.RawFileSystem.SetAttr(cancel, in, out)
}

func (c *counting) Mknod(cancel <-chan struct{}, in *fuse.MknodIn, name string, out *fuse.EntryOut) fuse.Status {
	defer c.t.record(OpMknod, time.Now())
	return c.RawFileSystem.Mknod(cancel, in, name, out)
}

func (c *counting) Mkdir(cancel <-chan struct{}, in *fuse.MkdirIn, name string, out *fuse.EntryOut) fuse.Status {
	defer c.t.record(OpMkdir, time.Now())
	return c.RawFileSystem.Mkdir(cancel, in, name, out)
}

func (c *counting) Unlink(cancel <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	defer c.t.record(OpUnlink, time.Now())
	return c.RawFileSystem.Unlink(cancel, h, name)
}

func (c *counting) Rmdir(cancel <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	defer c.t.record(OpRmdir, time.Now())
	return c.RawFileSystem.Rmdir(cancel, h, name)
}

func (c *counting) Rename(cancel <-chan struct{}, in *fuse.RenameIn, oldName, newName string) fuse.Status {
	defer c.t.record(OpRename, time.Now())
	return c.RawFileSystem.Rename(cancel, in, oldName, newName)
}

func (c *counting) Link(cancel <-chan struct{}, in *fuse.LinkIn, name string, out *fuse.EntryOut) fuse.Status {
	defer c.t.record(OpLink, time.Now())
	return c.RawFileSystem.Link(cancel, in, name, out)
}

func (c *counting) Symlink(cancel <-chan struct{}, h *fuse.InHeader, target, name string, out *fuse.EntryOut) fuse.Status {
	defer c.t.record(OpSymlink, time.Now())
	return c.RawFileSystem.Symlink(cancel, h, target, name, out)
}

func (c *counting) Readlink(cancel <-chan struct{}, h *fuse.InHeader) ([]byte, fuse.Status) {
	defer c.t.record(OpReadlink, time.Now())
	return c.RawFileSystem.Readlink(cancel, h)
}

func (c *counting) Access(cancel <-chan struct{}, in *fuse.AccessIn) fuse.Status {
	defer c.t.record(OpAccess, time.Now())
	return c.RawFileSystem.Access(cancel, in)
}

func (c *counting) GetXAttr(cancel <-chan struct{}, h *fuse.InHeader, attr string, dest []byte) (uint32, fuse.Status) {
	defer c.t.record(OpGetxattr, time.Now())
	return c.RawFileSystem.GetXAttr(cancel, h, attr, dest)
}

func (c *counting) ListXAttr(cancel <-chan struct{}, h *fuse.InHeader, dest []byte) (uint32, fuse.Status) {
	defer c.t.record(OpListxattr, time.Now())
	return c.RawFileSystem.ListXAttr(cancel, h, dest)
}

func (c *counting) SetXAttr(cancel <-chan struct{}, in *fuse.SetXAttrIn, attr string, data []byte) fuse.Status {
	defer c.t.record(OpSetxattr, time.Now())
	return c.RawFileSystem.SetXAttr(cancel, in, attr, data)
}

func (c *counting) RemoveXAttr(cancel <-chan struct{}, h *fuse.InHeader, attr string) fuse.Status {
	defer c.t.record(OpRemovexattr, time.Now())
	return c.RawFileSystem.RemoveXAttr(cancel, h, attr)
}

func (c *counting) Create(cancel <-chan struct{}, in *fuse.CreateIn, name string, out *fuse.CreateOut) fuse.Status {
	defer c.t.record(OpCreate, time.Now())
	st := c.RawFileSystem.Create(cancel, in, name, out)
	if st == fuse.OK {
		c.onOpen(cancel, &out.OpenOut)
	}
	return st
}

func (c *counting) Tmpfile(cancel <-chan struct{}, in *fuse.CreateIn, out *fuse.CreateOut) fuse.Status {
	defer c.t.record(OpTmpfile, time.Now())
	return c.RawFileSystem.Tmpfile(cancel, in, out)
}

func (c *counting) Open(cancel <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	defer c.t.record(OpOpen, time.Now())
	st := c.RawFileSystem.Open(cancel, in, out)
	if st == fuse.OK {
		c.onOpen(cancel, out)
	}
	return st
}

func (c *counting) Read(cancel <-chan struct{}, in *fuse.ReadIn, buf []byte) (fuse.ReadResult, fuse.Status) {
	defer c.t.record(OpRead, time.Now())
	return c.RawFileSystem.Read(cancel, in, buf)
}

func (c *counting) Lseek(cancel <-chan struct{}, in *fuse.LseekIn, out *fuse.LseekOut) fuse.Status {
	defer c.t.record(OpLseek, time.Now())
	return c.RawFileSystem.Lseek(cancel, in, out)
}

func (c *counting) GetLk(cancel <-chan struct{}, in *fuse.LkIn, out *fuse.LkOut) fuse.Status {
	defer c.t.record(OpGetlk, time.Now())
	return c.RawFileSystem.GetLk(cancel, in, out)
}

func (c *counting) SetLk(cancel <-chan struct{}, in *fuse.LkIn) fuse.Status {
	defer c.t.record(OpSetlk, time.Now())
	return c.RawFileSystem.SetLk(cancel, in)
}

func (c *counting) SetLkw(cancel <-chan struct{}, in *fuse.LkIn) fuse.Status {
	defer c.t.record(OpSetlkw, time.Now())
	return c.RawFileSystem.SetLkw(cancel, in)
}

func (c *counting) Release(cancel <-chan struct{}, in *fuse.ReleaseIn) {
	defer c.t.record(OpRelease, time.Now())
	c.RawFileSystem.Release(cancel, in)
}

func (c *counting) Write(cancel <-chan struct{}, in *fuse.WriteIn, data []byte) (uint32, fuse.Status) {
	defer c.t.record(OpWrite, time.Now())
	return c.RawFileSystem.Write(cancel, in, data)
}

func (c *counting) Writev(cancel <-chan struct{}, in *fuse.WriteIn, data [][]byte) (uint32, fuse.Status) {
	defer c.t.record(OpWrite, time.Now())
	return c.RawFileSystem.Writev(cancel, in, data)
}

func (c *counting) CopyFileRange(cancel <-chan struct{}, in *fuse.CopyFileRangeIn) (uint32, fuse.Status) {
	defer c.t.record(OpCopyFileRange, time.Now())
	return c.RawFileSystem.CopyFileRange(cancel, in)
}

func (c *counting) Ioctl(cancel <-chan struct{}, in *fuse.IoctlIn, inbuf []byte, out *fuse.IoctlOut, outbuf []byte) fuse.Status {
	defer c.t.record(OpIoctl, time.Now())
	return c.RawFileSystem.Ioctl(cancel, in, inbuf, out, outbuf)
}

func (c *counting) Flush(cancel <-chan struct{}, in *fuse.FlushIn) fuse.Status {
	defer c.t.record(OpFlush, time.Now())
	return c.RawFileSystem.Flush(cancel, in)
}

func (c *counting) Fsync(cancel <-chan struct{}, in *fuse.FsyncIn) fuse.Status {
	defer c.t.record(OpFsync, time.Now())
	return c.RawFileSystem.Fsync(cancel, in)
}

func (c *counting) Fallocate(cancel <-chan struct{}, in *fuse.FallocateIn) fuse.Status {
	defer c.t.record(OpFallocate, time.Now())
	return c.RawFileSystem.Fallocate(cancel, in)
}

func (c *counting) OpenDir(cancel <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	defer c.t.record(OpOpendir, time.Now())
	return c.RawFileSystem.OpenDir(cancel, in, out)
}

func (c *counting) ReadDir(cancel <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	defer c.t.record(OpReaddir, time.Now())
	return c.RawFileSystem.ReadDir(cancel, in, out)
}

func (c *counting) ReadDirPlus(cancel <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	defer c.t.record(OpReaddirplus, time.Now())
	return c.RawFileSystem.ReadDirPlus(cancel, in, out)
}

func (c *counting) ReleaseDir(in *fuse.ReleaseIn) {
	defer c.t.record(OpReleasedir, time.Now())
	c.RawFileSystem.ReleaseDir(in)
}

func (c *counting) FsyncDir(cancel <-chan struct{}, in *fuse.FsyncIn) fuse.Status {
	defer c.t.record(OpFsyncdir, time.Now())
	return c.RawFileSystem.FsyncDir(cancel, in)
}

func (c *counting) StatFs(cancel <-chan struct{}, in *fuse.InHeader, out *fuse.StatfsOut) fuse.Status {
	defer c.t.record(OpStatfs, time.Now())
	return c.RawFileSystem.StatFs(cancel, in, out)
}

func (c *counting) Statx(cancel <-chan struct{}, in *fuse.StatxIn, out *fuse.StatxOut) fuse.Status {
	defer c.t.record(OpStatx, time.Now())
	return c.RawFileSystem.Statx(cancel, in, out)
}
