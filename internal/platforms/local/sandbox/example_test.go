package sandbox_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"layerfs.dev/layerfs/internal/platforms"
	"layerfs.dev/layerfs/internal/platforms/local/sandbox"
)

// A daemon keeps one Launcher and runs each exec in a fresh sandbox. The
// binary must call sandbox.InitMain first thing in main.
func ExampleLauncher_Run() {
	l := &sandbox.Launcher{Exe: sandbox.InitBinary()}
	res, err := l.Run(context.Background(), sandbox.Config{
		Workspace: "/var/lib/layerfs/workspaces/ws1/mnt",
		Spec: platforms.ExecSpec{
			Argv:        platforms.ShellArgv("make test"),
			Timeout:     10 * time.Minute,
			MemoryBytes: 2 << 30,
		},
	}, os.Stdout, os.Stderr)
	if err != nil {
		fmt.Println("could not run:", err)
		return
	}
	fmt.Println("exit", res.ExitCode, "launch overhead", res.Launch)
}

// MeasureOverhead is what the bench calls for the fixed cost of an exec.
func ExampleMeasureOverhead() {
	l := &sandbox.Launcher{}
	o, err := sandbox.MeasureOverhead(context.Background(), l, os.TempDir(), 30, 0)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(o.Launch.Median, o.Spawn.Median)
}
