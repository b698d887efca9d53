package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"
)

// UserNS starts a process in a new user namespace whose ids 0 to size-1
// are host ids host.. (as a sandbox's) and returns the namespace, open;
// the process and the file go at the test's end.
func UserNS(t testing.TB, host, size uint32) *os.File {
	t.Helper()
	RequireRoot(t)
	cmd := exec.Command("sleep", "infinity")
	m := []syscall.SysProcIDMap{{ContainerID: 0, HostID: int(host), Size: int(size)}}
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUSER, UidMappings: m, GidMappings: m}
	if err := cmd.Start(); err != nil {
		Skip(t, "no user namespace: "+err.Error())
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	f, err := os.Open(fmt.Sprintf("/proc/%d/ns/user", cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}
