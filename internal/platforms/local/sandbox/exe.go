package sandbox

import (
	"os"
	"path/filepath"
	"syscall"
)

// InitBinaryName is the file name of the dedicated init binary
// (cmd/layerfs-sandbox-init), installed next to layerfsd.
const InitBinaryName = "layerfs-sandbox-init"

// InitBinary returns the path of the dedicated init binary next to this
// executable, or "" (re-execute this binary) when there is none or it is
// writable by anyone but its owner, who must be this process's user.
// Re-executing the small init costs a fraction of re-executing the daemon:
// every package a binary links runs its init functions before main.
func InitBinary() string {
	exe, err := os.Executable()
	if err != nil {
		return ""
	}
	p := filepath.Join(filepath.Dir(exe), InitBinaryName)
	st, err := os.Stat(p)
	if err != nil || !st.Mode().IsRegular() || st.Mode()&0o111 == 0 || st.Mode()&0o022 != 0 {
		return ""
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); !ok || int(sys.Uid) != os.Geteuid() {
		return ""
	}
	return p
}
