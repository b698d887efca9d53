package sandbox

import (
	"fmt"
	"os"

	"layerfs.dev/layerfs/internal/seccomp/bpfload"
)

// seccompEnv carries Launcher.SyscallFilter to every init it starts, in
// its environment rather than its config: a warm init then has it before
// its exec, and the config that is sent on the exec's latency stays small.
// The value is the programs in base64, separated by dots. The command's
// environment is built from scratch, so it never sees it.
const seccompEnv = "LAYERFS_SANDBOX_SECCOMP"

// loadFilterFromEnv loads the programs the launcher put in seccompEnv
// (loadSyscallFilter).
func loadFilterFromEnv() error {
	progs, err := bpfload.Decode(os.Getenv(seccompEnv))
	if err != nil {
		return fmt.Errorf("load %w", err)
	}
	return loadSyscallFilter(progs)
}

// loadSyscallFilter installs progs, classic BPF seccomp programs as
// internal/seccomp.BPF encodes them (8 bytes per instruction), in order, on
// the calling thread only. The init calls it on the thread that forks the
// command, after no_new_privs is set there and just before the fork, so
// the command and everything it starts inherit them while the init's
// other threads, and its own setup before this point, are not filtered.
func loadSyscallFilter(progs [][]byte) error {
	for _, prog := range progs {
		if err := bpfload.Load(prog); err != nil {
			return err
		}
	}
	return nil
}
