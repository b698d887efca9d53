package docker

import (
	"os"
	"os/exec"
	"path/filepath"

	"layerfs.dev/layerfs/internal/platforms/docker/supervise"
)

// Where the supervisor is bind-mounted in every container.
const (
	supervisorDir  = "/.layerfs"
	supervisorPath = supervisorDir + "/" + supervise.Name
)

// init runs the supervisor when this executable is started under its name:
// the fallback when no stand-alone layerfs-supervise is installed (see
// defaultSupervisor). It runs before main or a test binary's flags.
func init() {
	if filepath.Base(os.Args[0]) == supervise.Name {
		os.Exit(supervise.Main(os.Args[1:]))
	}
}

// defaultSupervisor is the supervisor executable used when
// Options.Supervisor is empty: layerfs-supervise beside this executable or
// else on PATH (small, static, quick to start), else this executable
// itself, which the init hook above turns into the supervisor.
func defaultSupervisor() (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", err
	}
	beside := filepath.Join(filepath.Dir(exe), supervise.Name)
	if fi, err := os.Stat(beside); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
		return beside, nil
	}
	if p, err := exec.LookPath(supervise.Name); err == nil {
		return filepath.Abs(p)
	}
	return exe, nil
}
