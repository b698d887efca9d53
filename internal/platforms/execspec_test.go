package platforms_test

import (
	"bytes"
	"errors"
	"io"
	"slices"
	"testing"
	"time"

	"layerfs.dev/layerfs/internal/platforms"
	"layerfs.dev/layerfs/internal/platforms/platformtest"
	"layerfs.dev/layerfs/wire"
)

func TestNormalizeRefuses(t *testing.T) {
	for _, bad := range platformtest.BadSpecs() {
		_, err := bad.Spec.Normalize()
		platformtest.CheckRefusal(t, bad.Name, bad.Field, err)
	}
}

func TestFromRequestRefuses(t *testing.T) {
	for _, bad := range platformtest.BadRequests() {
		_, err := platforms.FromRequest(bad.Req, 0, 0)
		platformtest.CheckRefusal(t, bad.Name, bad.Field, err)
	}
}

// TestNormalizeNamesEveryBadField: one answer lists all that is wrong.
func TestNormalizeNamesEveryBadField(t *testing.T) {
	_, err := platforms.ExecSpec{Argv: []string{"true"}, Dir: "../x", Env: []string{"A-B=1"}, Pids: -1}.Normalize()
	for _, field := range []string{"dir", "env[0]", "pids"} {
		platformtest.CheckRefusal(t, "three bad fields", field, err)
	}
}

func TestNormalizeDefaults(t *testing.T) {
	got, err := platforms.ExecSpec{Argv: []string{"true"}, Env: []string{"TERM=xterm", "A=b=c"}, Dir: "./a//b/"}.Normalize()
	if err != nil {
		t.Fatal(err)
	}
	want := platforms.ExecSpec{
		Argv: []string{"true"}, Env: []string{"TERM=xterm", "A=b=c", "PATH=" + platforms.DefaultPath, "HOME=/tmp"},
		Dir: "a/b", Timeout: platforms.DefaultTimeout, OutputLimit: platforms.DefaultOutputLimit, Pids: platforms.DefaultPids,
	}
	if !equal(got, want) {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
	again, err := got.Normalize()
	if err != nil || !equal(again, got) {
		t.Errorf("Normalize of a normalized spec: %+v, %v; want it unchanged", again, err)
	}
	for _, dir := range []string{"", "."} {
		if s, err := (platforms.ExecSpec{Argv: []string{"true"}, Dir: dir}).Normalize(); err != nil || s.Dir != "" {
			t.Errorf("dir %q: %q, %v; want \"\" (the workspace)", dir, s.Dir, err)
		}
	}
}

func TestFromRequest(t *testing.T) {
	uid := 7
	for _, tc := range []struct {
		name string
		req  wire.ExecRequest
		want platforms.ExecSpec
	}{
		{"body", wire.ExecRequest{Body: "echo hi", TimeoutMs: 1500},
			platforms.ExecSpec{Argv: platforms.ShellArgv("echo hi"), Timeout: 1500 * time.Millisecond, UID: 1000, GID: 1000}},
		{"dir from the root", wire.ExecRequest{Argv: []string{"pwd"}, Dir: "/sub/"},
			platforms.ExecSpec{Argv: []string{"pwd"}, Dir: "sub", UID: 1000, GID: 1000}},
		{"dir up and down inside", wire.ExecRequest{Argv: []string{"pwd"}, Dir: "a/../b"},
			platforms.ExecSpec{Argv: []string{"pwd"}, Dir: "b", UID: 1000, GID: 1000}},
		{"ids and limits", wire.ExecRequest{Argv: []string{"id"}, UID: &uid, Pids: 5, MemoryBytes: 1 << 20, MilliCPUs: 500, OpenFiles: 64, OutputLimit: 10},
			platforms.ExecSpec{Argv: []string{"id"}, UID: 7, GID: 1000, Pids: 5, MemoryBytes: 1 << 20, MilliCPUs: 500, OpenFiles: 64, OutputLimit: 10}},
	} {
		got, err := platforms.FromRequest(tc.req, 1000, 1000)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		want, err := tc.want.Normalize()
		if err != nil {
			t.Fatal(err)
		}
		if !equal(got, want) {
			t.Errorf("%s: got %+v\nwant %+v", tc.name, got, want)
		}
	}
	s, err := platforms.FromRequest(wire.ExecRequest{Argv: []string{"cat"}, Stdin: []byte("in")}, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := io.ReadAll(s.Stdin); !bytes.Equal(b, []byte("in")) {
		t.Errorf("stdin %q, want \"in\"", b)
	}
}

func equal(a, b platforms.ExecSpec) bool {
	return slices.Equal(a.Argv, b.Argv) && slices.Equal(a.Env, b.Env) && a.Dir == b.Dir && a.Timeout == b.Timeout &&
		a.OutputLimit == b.OutputLimit && a.UID == b.UID && a.GID == b.GID && a.MemoryBytes == b.MemoryBytes &&
		a.Pids == b.Pids && a.MilliCPUs == b.MilliCPUs && a.OpenFiles == b.OpenFiles && a.Hostname == b.Hostname
}

// TestRootWorkdir: an image's WorkingDir outside /workspace is the
// command's directory, absolute and clean, never with a Dir beside it.
func TestRootWorkdir(t *testing.T) {
	s, err := platforms.ExecSpec{Argv: []string{"pwd"}, RootWorkdir: "/srv/app"}.Normalize()
	if err != nil || s.Workdir() != "/srv/app" {
		t.Fatalf("got %q, %v", s.Workdir(), err)
	}
	for _, bad := range []platforms.ExecSpec{
		{Argv: []string{"pwd"}, RootWorkdir: "srv"},
		{Argv: []string{"pwd"}, RootWorkdir: "/srv/../etc"},
		{Argv: []string{"pwd"}, RootWorkdir: "/srv", Dir: "a"},
	} {
		if _, err := bad.Normalize(); !errors.Is(err, platforms.ErrBadSpec) {
			t.Errorf("%+v: %v, want ErrBadSpec", bad, err)
		}
	}
}
