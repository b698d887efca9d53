package lima

import (
	"bytes"
	"os"
	"testing"

	"github.com/lima-vm/lima/pkg/limayaml"
	"github.com/lima-vm/lima/pkg/store"

	"layerfs.dev/layerfs/internal/platforms/internal/guest"
)

// TestParseListOfLimaPrintInstances decodes what limactl itself prints:
// `limactl list --json` is store.PrintInstances(..., "json", ...) (see
// cmd/limactl/list.go), run here on instances as store.Inspect fills them.
func TestParseListOfLimaPrintInstances(t *testing.T) {
	t.Setenv("LIMA_HOME", t.TempDir())
	y, err := Template(Config{Project: "demo"}, "/h/.lima/layerfs-demo/sock/layerfsd.sock")
	if err != nil {
		t.Fatal(err)
	}
	b, err := MarshalTemplate(y)
	if err != nil {
		t.Fatal(err)
	}
	loaded, err := limayaml.Load(b, "/h/.lima/layerfs-demo/lima.yaml")
	if err != nil {
		t.Fatal(err)
	}
	insts := []*store.Instance{
		{Name: "default", Status: store.StatusStopped, Dir: "/h/.lima/default", VMType: "qemu", Arch: "x86_64", CPUs: 2, Memory: 2 << 30},
		{Name: "layerfs-demo", Status: store.StatusRunning, Dir: "/h/.lima/layerfs-demo", VMType: "vz", Arch: "aarch64",
			CPUs: 4, Memory: 4 << 30, Config: loaded, LimaVersion: "1.2.1", HostAgentPID: 7},
	}
	var out bytes.Buffer
	if err := store.PrintInstances(&out, insts, "json", nil); err != nil {
		t.Fatal(err)
	}
	got, err := parseList(out.Bytes())
	if err != nil {
		t.Fatalf("parseList(%s): %v", out.Bytes(), err)
	}
	if len(got) != 2 {
		t.Fatalf("parseList: %d instances, want 2", len(got))
	}
	d := got[1]
	if d.Name != "layerfs-demo" || !d.running() || got[0].running() || d.Dir != "/h/.lima/layerfs-demo" ||
		d.VMType != "vz" || d.Arch != "aarch64" || d.CPUs != 4 || d.Memory != 4<<30 || d.LimaVersion != "1.2.1" {
		t.Errorf("parseList: got %+v", d)
	}
	if s := hostSocketOf(d); s != "/h/.lima/layerfs-demo/sock/layerfsd.sock" {
		t.Errorf("host socket from the instance's config: %q", s)
	}
	if s := hostSocketOf(got[0]); s != "/h/.lima/default/sock/layerfsd.sock" {
		t.Errorf("host socket without a config: %q", s)
	}
}

func TestParseListFixtures(t *testing.T) {
	for _, tc := range []struct {
		file    string
		names   []string
		running []bool
	}{
		{"testdata/list-running.jsonl", []string{"default", "layerfs-demo"}, []bool{true, true}},
		{"testdata/list-stopped.jsonl", []string{"layerfs-demo"}, []bool{false}},
	} {
		b, err := os.ReadFile(tc.file)
		if err != nil {
			t.Fatal(err)
		}
		list, err := parseList(b)
		if err != nil {
			t.Fatalf("%s: %v", tc.file, err)
		}
		if len(list) != len(tc.names) {
			t.Fatalf("%s: %d instances", tc.file, len(list))
		}
		for i, in := range list {
			if in.Name != tc.names[i] || in.running() != tc.running[i] {
				t.Errorf("%s: instance %d = %s running=%v", tc.file, i, in.Name, in.running())
			}
		}
	}
	if _, err := parseList([]byte("{\"status\":\"Running\"}\n")); err == nil {
		t.Error("parseList accepted an instance without a name")
	}
	if _, err := parseList([]byte("NAME STATUS\n")); err == nil {
		t.Error("parseList accepted table output")
	}
}

func TestParseVersion(t *testing.T) {
	for _, tc := range []struct {
		out, raw string
		want     guest.Semver
		bad      bool
	}{
		{out: "limactl version 1.2.1\n", raw: "1.2.1", want: guest.Semver{1, 2, 1}},
		{out: "limactl version 2.0.0-beta.0\n", raw: "2.0.0-beta.0", want: guest.Semver{2, 0, 0}},
		{out: "limactl version 1.1.1-12-g0a1b2c3\n", raw: "1.1.1-12-g0a1b2c3", want: guest.Semver{1, 1, 1}},
		{out: "limactl version <unknown>\n", bad: true},
		{out: "Lima 1.2.1\n", bad: true},
	} {
		v, raw, err := parseVersion([]byte(tc.out))
		if tc.bad {
			if err == nil {
				t.Errorf("parseVersion(%q) accepted it", tc.out)
			}
			continue
		}
		if err != nil || v != tc.want || raw != tc.raw {
			t.Errorf("parseVersion(%q) = %v, %q, %v; want %v, %q", tc.out, v, raw, err, tc.want, tc.raw)
		}
	}
	if !(guest.Semver{0, 23, 2}).Less(minVersion) || (guest.Semver{1, 0, 0}).Less(minVersion) {
		t.Error("version comparison is wrong")
	}
}
