package mountinfo

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const sample = `21 26 0:20 / /proc rw,relatime - proc proc rw
26 1 254:0 / / rw,relatime - ext4 /dev/vda rw,discard
31 30 0:28 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
40 26 7:0 / /tmp/with\040space rw,relatime shared:2 - ext4 /dev/loop0 rw
41 40 0:50 /sub /tmp/with\040space/mnt rw,nosuid - fuse.layerfs layerfs rw,user_id=0
`

func TestRead(t *testing.T) {
	f := filepath.Join(t.TempDir(), "mountinfo")
	os.WriteFile(f, []byte(sample), 0o644)
	ms, err := Read(f)
	require.NoError(t, err)
	if len(ms) != 5 {
		t.Fatalf("%d mounts, want 5", len(ms))
	}
	want := Mount{Device: "0:50", Root: "/sub", Dir: "/tmp/with space/mnt", Options: "rw,nosuid", FSType: "fuse.layerfs", Source: "layerfs", SuperOptions: "rw,user_id=0"}
	assert.Equal(t, want, ms[4])
	if b := Below(ms, "/tmp/with space"); len(b) != 2 || b[1].Dir != want.Dir {
		t.Errorf("Below: %+v", b)
	}
	if b := Below(ms, "/tmp/with"); len(b) != 0 {
		t.Errorf("Below must not match a name prefix: %+v", b)
	}
	for path, dir := range map[string]string{
		"/tmp/with space/mnt/x": "/tmp/with space/mnt",
		"/tmp/with space/y":     "/tmp/with space",
		"/tmp/other":            "/",
		"/proc":                 "/proc",
	} {
		if m, ok := Containing(ms, path); !ok || m.Dir != dir {
			t.Errorf("Containing(%q) = %q, want %q", path, m.Dir, dir)
		}
	}
	_, err = Read(filepath.Join(t.TempDir(), "none"))
	assert.Error(t, err, "a missing file must fail")
}

func TestUnescape(t *testing.T) {
	if got := unescape(`/a\040b\011c`); got != "/a b\tc" {
		t.Errorf("unescape = %q", got)
	}
	if got := unescape(`/no\escape\9`); got != `/no\escape\9` {
		t.Errorf("a backslash that is not an escape must stay: %q", got)
	}
}

func TestSelf(t *testing.T) {
	ms, err := Read(Self)
	require.NoError(t, err)
	if m, ok := Containing(ms, "/"); !ok || m.Dir != "/" {
		t.Fatalf("no root mount in %s: %+v", Self, ms)
	}
}
