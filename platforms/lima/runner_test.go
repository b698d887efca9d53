package lima

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"layerfs.dev/layerfs/platforms"
)

// fakeTool puts testdata/fakebin first on PATH and returns the file its
// limactl logs command lines to.
func fakeTool(t *testing.T) string {
	t.Helper()
	bin, err := filepath.Abs("testdata/fakebin")
	if err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(t.TempDir(), "argv.log")
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	t.Setenv("FAKE_LIMACTL_LOG", log)
	return log
}

func TestExecRunnerPassesArgvAndReportsExit(t *testing.T) {
	log := fakeTool(t)
	script := "echo 'a b' \"$HOME\"; exit 3"
	res, err := ExecRunner{}.Run(context.Background(), []string{"limactl", "shell", "--workdir", "/", "layerfs-demo", "sh", "-c", script}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 3 || string(res.Stdout) != "ran: layerfs-demo sh -c "+script+"\n" || string(res.Stderr) != "to stderr\n" {
		t.Errorf("Run = exit %d, stdout %q, stderr %q", res.ExitCode, res.Stdout, res.Stderr)
	}
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	if want := "shell\n--workdir\n/\nlayerfs-demo\nsh\n-c\n" + script + "\n--\n"; string(b) != want {
		t.Errorf("the tool saw argv\n%q\nwant\n%q", b, want)
	}
}

func TestExecRunnerMissingTool(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	_, err := ExecRunner{}.Run(context.Background(), []string{"limactl", "--version"}, nil)
	if !errors.Is(err, exec.ErrNotFound) {
		t.Fatalf("got %v, want exec.ErrNotFound", err)
	}
	p, err := New(Config{Project: "demo"})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Up(context.Background()); !errors.Is(err, platforms.ErrUnavailable) || !strings.Contains(err.Error(), "brew install lima") {
		t.Errorf("Up without limactl: got %v, want ErrUnavailable with install advice", err)
	}
}

func TestExecRunnerCanceled(t *testing.T) {
	dir := t.TempDir()
	slow := filepath.Join(dir, "limactl")
	if err := os.WriteFile(slow, []byte("#!/bin/sh\nexec /bin/sleep 30\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := ExecRunner{}.Run(ctx, []string{"limactl", "start", "x"}, nil)
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 10*time.Second {
		t.Errorf("got %v after %s, want DeadlineExceeded soon", err, time.Since(start))
	}
}

// TestUpWithFakeLimactl runs Up through the real os/exec runner against the
// fake limactl: version, list, and a boot that fails.
func TestUpWithFakeLimactl(t *testing.T) {
	log := fakeTool(t)
	f := newFixture(t)
	list := filepath.Join(t.TempDir(), "list.jsonl")
	b, err := os.ReadFile("testdata/list-stopped.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(list, []byte(strings.ReplaceAll(string(b), "$LIMA_HOME", f.limaHome)), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("FAKE_LIMACTL_LIST", list)
	p := f.platform(t, nil, nil)
	err = p.Up(context.Background())
	if !errors.Is(err, ErrStart) || !strings.Contains(err.Error(), f.limaHome+`/layerfs-demo/ha.stderr.log`) {
		t.Fatalf("Up: got %v, want ErrStart with limactl's hint", err)
	}
	got, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	want := "--version\n--\nlist\n--json\n--\nstart\n--tty=false\n--timeout=10m0s\nlayerfs-demo\n--\n"
	if string(got) != want {
		t.Errorf("limactl saw\n%s\nwant\n%s", got, want)
	}
}
