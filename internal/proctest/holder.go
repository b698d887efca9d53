package proctest

import (
	"io"
	"os/exec"
	"testing"
)

// Holder is a host process with its working directory in a directory and
// a file of it open, as a shell or an editor left in a workspace.
type Holder struct {
	Cmd   *exec.Cmd
	input io.WriteCloser
}

// Hold starts a Holder in dir with dir/name open, and returns once it is
// there. It is started outside dir (its shell then cds in), so the test
// process may serve dir's mount. Release lets it run cat on the file and
// end; the test's end kills it.
func Hold(t testing.TB, dir, name string) *Holder {
	t.Helper()
	cmd := exec.Command("sh", "-c", `cd "$1" && exec 3<"$2" && echo ready && read line && cat "$2"`, "sh", dir, name)
	cmd.Dir = "/"
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	if _, err := io.ReadFull(out, make([]byte, len("ready\n"))); err != nil {
		t.Fatalf("the holder never got into %s: %v", dir, err)
	}
	return &Holder{Cmd: cmd, input: in}
}

// Release lets the holder cat its file (in the directory it stands in)
// and end; Wait then says how that went.
func (h *Holder) Release() { h.input.Close() }
