package fsids

import (
	"fmt"
	"runtime"

	"golang.org/x/sys/unix"
)

// Do runs fn with file system uid and gid id: DoAs(id, id, fn).
func Do(id uint32, fn func() error) error { return DoAs(id, id, fn) }

// DoAs runs fn with file system uid uid and gid gid on the calling
// goroutine's OS thread, which stays locked to it meanwhile. Changing the file system uid
// from 0 drops the file capabilities (CAP_DAC_OVERRIDE, CAP_CHOWN, ...)
// from the thread's effective set; Do raises them again from its permitted
// set, so a privileged caller keeps its privileges over files and only the
// ids change. The thread's credentials are restored before it is released;
// a thread that could not be restored is never released, and ends with the
// goroutine.
func DoAs(uid, gid uint32, fn func() error) error {
	runtime.LockOSThread()
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var caps [2]unix.CapUserData
	if err := unix.Capget(&hdr, &caps[0]); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("fsids: read capabilities: %w", err)
	}
	oldUID, _ := unix.SetfsuidRetUid(-1) // -1 only reads it
	oldGID, _ := unix.SetfsgidRetGid(-1)
	restore := func() bool {
		unix.SetfsuidRetUid(oldUID)
		unix.SetfsgidRetGid(oldGID)
		if u, _ := unix.SetfsuidRetUid(-1); u != oldUID {
			return false
		}
		if g, _ := unix.SetfsgidRetGid(-1); g != oldGID {
			return false
		}
		return unix.Capset(&hdr, &caps[0]) == nil
	}
	err := set(int(uid), int(gid), &hdr, caps)
	if err == nil {
		err = fn()
	}
	if restore() {
		runtime.UnlockOSThread()
	}
	return err
}

// set switches the thread's file system ids to uid and gid and raises its
// effective capabilities to what caps permits.
func set(uid, gid int, hdr *unix.CapUserHeader, caps [2]unix.CapUserData) error {
	unix.SetfsgidRetGid(gid)
	unix.SetfsuidRetUid(uid)
	if u, _ := unix.SetfsuidRetUid(-1); u != uid {
		return fmt.Errorf("fsids: setfsuid %d refused", uid)
	}
	if g, _ := unix.SetfsgidRetGid(-1); g != gid {
		return fmt.Errorf("fsids: setfsgid %d refused", gid)
	}
	raised := caps
	raised[0].Effective, raised[1].Effective = caps[0].Permitted, caps[1].Permitted
	h := *hdr
	if err := unix.Capset(&h, &raised[0]); err != nil {
		return fmt.Errorf("fsids: raise capabilities: %w", err)
	}
	return nil
}
