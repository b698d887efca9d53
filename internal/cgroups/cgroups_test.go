package cgroups

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func writeFixture(t *testing.T, name, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(p, []byte(text), 0o644))
	return p
}

func TestCgroupParsing(t *testing.T) {
	for _, tc := range []struct {
		name, cgroup, mountinfo string
		own                     map[string]string
		mounts                  map[string]Mount
	}{
		{
			name:   "v1 with an empty unified hierarchy (this machine kind)",
			cgroup: "9:name=systemd:/\n8:pids:/\n4:memory:/process_api/8aa8\n3:cpuset:/\n2:cpuacct:/\n1:cpu:/\n0::/\n",
			mountinfo: "30 22 0:27 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n" +
				"34 30 0:31 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n" +
				"38 30 0:35 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids\n" +
				"40 30 0:37 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n",
			own: map[string]string{"name=systemd": "/", "pids": "/", "memory": "/process_api/8aa8",
				"cpuset": "/", "cpuacct": "/", "cpu": "/", "": "/"},
			mounts: map[string]Mount{
				"memory": {Dir: "/sys/fs/cgroup/memory", Root: "/"},
				"pids":   {Dir: "/sys/fs/cgroup/pids", Root: "/"},
				"":       {Dir: "/sys/fs/cgroup/unified", Root: "/"},
			},
		},
		{
			name:   "v2 only, in a container whose cgroup namespace root is not /",
			cgroup: "0::/system.slice/layerfsd.service\n",
			mountinfo: "25 20 0:22 /sys\\040slice / rw - ext4 /dev/sda rw\n" +
				"31 25 0:26 /system.slice /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n",
			own:    map[string]string{"": "/system.slice/layerfsd.service"},
			mounts: map[string]Mount{"": {Dir: "/sys/fs/cgroup", Root: "/system.slice"}},
		},
		{
			name:      "v1 with joined controllers",
			cgroup:    "5:cpu,cpuacct:/\n4:memory,pids:/a\n",
			mountinfo: "34 30 0:31 / /sys/fs/cgroup/memory,pids rw - cgroup cgroup rw,memory,pids\n",
			own:       map[string]string{"cpu": "/", "cpuacct": "/", "memory": "/a", "pids": "/a"},
			mounts: map[string]Mount{
				"memory": {Dir: "/sys/fs/cgroup/memory,pids", Root: "/"},
				"pids":   {Dir: "/sys/fs/cgroup/memory,pids", Root: "/"},
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			own, err := Paths(writeFixture(t, "cgroup", tc.cgroup))
			if assert.NoError(t, err, "Paths") {
				assert.Equal(t, tc.own, own, "Paths")
			}
			mounts, err := Mounts(writeFixture(t, "mountinfo", tc.mountinfo))
			if assert.NoError(t, err, "Mounts") {
				assert.Equal(t, tc.mounts, mounts, "Mounts")
			}
		})
	}
}

func TestMountPath(t *testing.T) {
	m := Mount{Dir: "/sys/fs/cgroup", Root: "/system.slice"}
	for _, tc := range []struct {
		p, want string
		ok      bool
	}{
		{"/system.slice", "/sys/fs/cgroup", true},
		{"/system.slice/layerfsd.service", "/sys/fs/cgroup/layerfsd.service", true},
		{"/user.slice/x", "", false},
		{"/", "", false},
	} {
		if got, ok := m.Path(tc.p); got != tc.want || ok != tc.ok {
			t.Errorf("Path(%q) = %q, %v; want %q, %v", tc.p, got, ok, tc.want, tc.ok)
		}
	}
}
