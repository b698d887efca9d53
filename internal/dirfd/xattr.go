package dirfd

import (
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// sysListxattrat is listxattrat(2)'s number, the same on every
// architecture (Linux 6.13; x/sys names it on none yet).
const sysListxattrat = 465

// noListxattrat is set once the kernel has said it lacks listxattrat.
var noListxattrat atomic.Bool

// Listxattr lists the entry's xattr names into buf as llistxattr(2) does
// (a nil buf asks for the size needed), not following a final symlink.
// It is one listxattrat(2) call where the kernel has it, which spares
// llistxattr's walk of the entry's Proc path through /proc, most of that
// call's cost.
func (a At) Listxattr(buf []byte) (int, error) {
	if !noListxattrat.Load() {
		name, err := unix.BytePtrFromString(a.Name)
		if err != nil {
			return 0, err
		}
		var p unsafe.Pointer
		if len(buf) > 0 {
			p = unsafe.Pointer(&buf[0])
		}
		n, _, errno := unix.Syscall6(sysListxattrat, uintptr(a.Dir), uintptr(unsafe.Pointer(name)),
			unix.AT_SYMLINK_NOFOLLOW, uintptr(p), uintptr(len(buf)), 0)
		if errno != unix.ENOSYS {
			if errno != 0 {
				return 0, errno
			}
			return int(n), nil
		}
		noListxattrat.Store(true)
	}
	return unix.Llistxattr(a.Proc(), buf)
}
