package lima

import (
	"bytes"
	"os"
	"testing"

	"github.com/lima-vm/lima/pkg/limayaml"
	"github.com/lima-vm/lima/pkg/store"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/internal/platforms/internal/guest"
)

// TestParseListOfLimaPrintInstances decodes what limactl itself prints:
// `limactl list --json` is store.PrintInstances(..., "json", ...) (see
// cmd/limactl/list.go), run here on instances as store.Inspect fills them.
func TestParseListOfLimaPrintInstances(t *testing.T) {
	t.Setenv("LIMA_HOME", t.TempDir())
	y, err := Template(Options{Project: "demo"}, "/h/.lima/layerfs-demo/sock/layerfsd.sock")
	require.NoError(t, err)
	b, err := MarshalTemplate(y)
	require.NoError(t, err)
	loaded, err := limayaml.Load(b, "/h/.lima/layerfs-demo/lima.yaml")
	require.NoError(t, err)
	insts := []*store.Instance{
		{Name: "default", Status: store.StatusStopped, Dir: "/h/.lima/default", VMType: "qemu", Arch: "x86_64", CPUs: 2, Memory: 2 << 30},
		{Name: "layerfs-demo", Status: store.StatusRunning, Dir: "/h/.lima/layerfs-demo", VMType: "vz", Arch: "aarch64",
			CPUs: 4, Memory: 4 << 30, Config: loaded, LimaVersion: "1.2.1", HostAgentPID: 7},
	}
	var out bytes.Buffer
	require.NoError(t, store.PrintInstances(&out, insts, "json", nil))
	got, err := parseList(out.Bytes())
	require.NoError(t, err, "parseList(%s)", out.Bytes())
	require.Len(t, got, 2, "parseList")
	d := got[1]
	assert.Equal(t, "layerfs-demo", d.Name)
	assert.True(t, d.running(), "layerfs-demo running")
	assert.False(t, got[0].running(), "default running")
	assert.Equal(t, "/h/.lima/layerfs-demo", d.Dir)
	assert.Equal(t, "vz", d.VMType)
	assert.Equal(t, "aarch64", d.Arch)
	assert.Equal(t, 4, d.CPUs)
	assert.Equal(t, int64(4<<30), d.Memory)
	assert.Equal(t, "1.2.1", d.LimaVersion)
	assert.Equal(t, "/h/.lima/layerfs-demo/sock/layerfsd.sock", hostSocketOf(d), "host socket from the instance's config")
	assert.Equal(t, "/h/.lima/default/sock/layerfsd.sock", hostSocketOf(got[0]), "host socket without a config")
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
		require.NoError(t, err)
		list, err := parseList(b)
		require.NoError(t, err, tc.file)
		var names []string
		var running []bool
		for _, in := range list {
			names = append(names, in.Name)
			running = append(running, in.running())
		}
		assert.Equal(t, tc.names, names, "%s: names", tc.file)
		assert.Equal(t, tc.running, running, "%s: running", tc.file)
	}
	_, err := parseList([]byte("{\"status\":\"Running\"}\n"))
	assert.Error(t, err, "parseList accepted an instance without a name")
	_, err = parseList([]byte("NAME STATUS\n"))
	assert.Error(t, err, "parseList accepted table output")
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
			assert.Error(t, err, "parseVersion(%q) accepted it", tc.out)
			continue
		}
		if assert.NoError(t, err, "parseVersion(%q)", tc.out) {
			assert.Equal(t, tc.want, v, "parseVersion(%q)", tc.out)
			assert.Equal(t, tc.raw, raw, "parseVersion(%q): raw", tc.out)
		}
	}
	assert.True(t, (guest.Semver{0, 23, 2}).Less(minVersion), "0.23.2 < minVersion")
	assert.False(t, (guest.Semver{1, 0, 0}).Less(minVersion), "1.0.0 < minVersion")
}
