package proctest

import (
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestFindsAChild(t *testing.T) {
	arg := Marker()
	cmd := exec.Command("sleep", arg)
	require.NoError(t, cmd.Start())
	defer cmd.Wait()
	defer cmd.Process.Kill()
	pid := strconv.Itoa(cmd.Process.Pid)

	kids, err := Children(os.Getpid())
	if assert.NoError(t, err, "Children") {
		assert.Contains(t, kids, pid+" (sleep)", "Children")
	}
	ps, err := WithCmdline("sleep\x00" + arg)
	if assert.NoError(t, err, "WithCmdline") {
		assert.Equal(t, []string{pid + ": sleep " + arg + " "}, ps, "WithCmdline")
	}
	assert.Equal(t, []int{cmd.Process.Pid}, Sleepers(arg), "Sleepers")

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
