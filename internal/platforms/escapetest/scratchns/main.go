package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
)

// childEnv marks the copy that runs in the scratch namespace.
const childEnv = "LAYERFS_SCRATCHNS_CHILD"

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: scratchns CMD [ARGS...]")
		os.Exit(2)
	}
	if os.Getenv(childEnv) != "" {
		os.Exit(child(os.Args[1:]))
	}
	os.Exit(parent(os.Args[1:]))
}

// parent starts this binary again in the scratch namespace and waits.
func parent(argv []string) int {
	all := []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 1<<32 - 1}}
	cmd := exec.Command("/proc/self/exe", argv...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), childEnv+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags: syscall.CLONE_NEWUSER, UidMappings: all, GidMappings: all,
		GidMappingsEnableSetgroups: true, Pdeathsig: syscall.SIGKILL,
	}
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ee.ExitCode()
	}
	fmt.Fprintln(os.Stderr, "scratchns:", err)
	return 125
}

// child forbids user namespaces below its own and becomes argv.
func child(argv []string) int {
	if err := os.WriteFile("/proc/sys/user/max_user_namespaces", []byte("0\n"), 0); err != nil {
		fmt.Fprintln(os.Stderr, "scratchns:", err)
		return 125
	}
	env := os.Environ()
	for i, e := range env {
		if len(e) > len(childEnv) && e[:len(childEnv)+1] == childEnv+"=" {
			env = append(env[:i], env[i+1:]...)
			break
		}
	}
	path, err := exec.LookPath(argv[0])
	if err == nil {
		err = syscall.Exec(path, argv, env)
	}
	fmt.Fprintln(os.Stderr, "scratchns:", err)
	return 127
}
