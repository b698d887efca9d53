package cloexec

import (
	"fmt"
	"os"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// All marks every descriptor from 3 up close-on-exec. Descriptors that a
// child is meant to have are handed over explicitly (os/exec duplicates
// them in the child), so this takes nothing from anyone.
func All() error {
	if err := unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err != nil {
		return fmt.Errorf("mark descriptors close-on-exec: %w", err)
	}
	return nil
}

// Around runs fn while no fork can start (it holds syscall.ForkLock for
// reading, as code that opens descriptors without O_CLOEXEC must), then
// marks every descriptor close-on-exec before a fork can see them. fn must
// not start processes itself.
func Around(fn func() error) error {
	syscall.ForkLock.RLock()
	defer syscall.ForkLock.RUnlock()
	err := fn()
	if cerr := All(); err == nil {
		err = cerr
	}
	return err
}

// CloseInherited closes every descriptor from first up that is not
// close-on-exec. In a process that has just been executed these are
// exactly the ones its parent leaked: the Go runtime opens its own
// close-on-exec. It reads /proc/self/fd, so /proc must be mounted.
func CloseInherited(first int) error {
	d, err := os.Open("/proc/self/fd")
	if err != nil {
		return fmt.Errorf("list descriptors: %w", err)
	}
	names, err := d.Readdirnames(-1)
	self := int(d.Fd())
	d.Close()
	if err != nil {
		return fmt.Errorf("list descriptors: %w", err)
	}
	for _, n := range names {
		fd, err := strconv.Atoi(n)
		if err != nil || fd < first || fd == self {
			continue
		}
		flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
		if err != nil || flags&unix.FD_CLOEXEC != 0 {
			continue // gone already, or the runtime's own
		}
		if err := unix.Close(fd); err != nil {
			return fmt.Errorf("close inherited descriptor %d: %w", fd, err)
		}
	}
	return nil
}
