package proctest

import (
	"os"
	"os/exec"
	"slices"
	"strconv"
	"testing"
	"time"
)

func TestFindsAChild(t *testing.T) {
	arg := Marker()
	cmd := exec.Command("sleep", arg)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()
	pid := strconv.Itoa(cmd.Process.Pid)

	kids, err := Children(os.Getpid())
	if want := pid + " (sleep)"; err != nil || !slices.Contains(kids, want) {
		t.Errorf("Children = %q, %v; want it to hold %q", kids, err, want)
	}
	ps, err := WithCmdline("sleep\x00" + arg)
	if want := pid + ": sleep " + arg + " "; err != nil || len(ps) != 1 || ps[0] != want {
		t.Errorf("WithCmdline = %q, %v; want [%q]", ps, err, want)
	}
	if got := Sleepers(arg); !slices.Equal(got, []int{cmd.Process.Pid}) {
		t.Errorf("Sleepers = %v, want [%s]", got, pid)
	}

	// A killed sleep is found by none of them once it is reaped; a zombie
	// is not a Sleeper even before.
	cmd.Process.Kill()
	deadline := time.Now().Add(5 * time.Second)
	for len(Sleepers(arg)) > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := Sleepers(arg); len(got) != 0 {
		t.Errorf("Sleepers after the kill = %v, want none", got)
	}
	cmd.Wait()
	if ps, _ := WithCmdline("sleep\x00" + arg); len(ps) != 0 {
		t.Errorf("WithCmdline after the wait = %q, want none", ps)
	}
}
