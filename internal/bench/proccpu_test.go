package bench

import (
	"os"
	"os/exec"
	"testing"
)

// TestTreeCPU: a child's CPU time counts below this process once it is
// reaped, and this process's own above.
func TestTreeCPU(t *testing.T) {
	before, err := readTreeCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	// About 0.1-0.5 s of CPU in a shell loop: many clock ticks.
	if err := exec.Command("sh", "-c", "i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done").Run(); err != nil {
		t.Fatal(err)
	}
	after, err := readTreeCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	d := after.Sub(before)
	if d.Below < 5*clockTick {
		t.Errorf("the child's CPU below this process grew by %v, want at least %v", d.Below, 5*clockTick)
	}
	if d.User < 0 || d.Sys < 0 {
		t.Errorf("this process's own CPU went back: %+v", d)
	}
	if _, err := readTreeCPU(-1); err == nil {
		t.Errorf("no error for a process that does not exist")
	}
	self, below, err := treeMemory(os.Getpid())
	if err != nil || self <= 0 || below < 0 {
		t.Errorf("treeMemory: %d, %d, %v", self, below, err)
	}
}
