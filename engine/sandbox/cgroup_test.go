//go:build linux

package sandbox

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"
)

func writeFixture(t *testing.T, name, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestCgroupParsing(t *testing.T) {
	for _, tc := range []struct {
		name, cgroup, mountinfo string
		own                     map[string]string
		mounts                  map[string]cgroupMount
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
			mounts: map[string]cgroupMount{
				"memory": {dir: "/sys/fs/cgroup/memory", root: "/"},
				"pids":   {dir: "/sys/fs/cgroup/pids", root: "/"},
				"":       {dir: "/sys/fs/cgroup/unified", root: "/"},
			},
		},
		{
			name:   "v2 only, in a container whose cgroup namespace root is not /",
			cgroup: "0::/system.slice/layerfsd.service\n",
			mountinfo: "25 20 0:22 /sys\\040slice / rw - ext4 /dev/sda rw\n" +
				"31 25 0:26 /system.slice /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n",
			own:    map[string]string{"": "/system.slice/layerfsd.service"},
			mounts: map[string]cgroupMount{"": {dir: "/sys/fs/cgroup", root: "/system.slice"}},
		},
		{
			name:      "v1 with joined controllers",
			cgroup:    "5:cpu,cpuacct:/\n4:memory,pids:/a\n",
			mountinfo: "34 30 0:31 / /sys/fs/cgroup/memory,pids rw - cgroup cgroup rw,memory,pids\n",
			own:       map[string]string{"cpu": "/", "cpuacct": "/", "memory": "/a", "pids": "/a"},
			mounts: map[string]cgroupMount{
				"memory": {dir: "/sys/fs/cgroup/memory,pids", root: "/"},
				"pids":   {dir: "/sys/fs/cgroup/memory,pids", root: "/"},
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			own, err := ownCgroups(writeFixture(t, "cgroup", tc.cgroup))
			if err != nil || !reflect.DeepEqual(own, tc.own) {
				t.Errorf("ownCgroups = %v, %v; want %v", own, err, tc.own)
			}
			mounts, err := cgroupMounts(writeFixture(t, "mountinfo", tc.mountinfo))
			if err != nil || !reflect.DeepEqual(mounts, tc.mounts) {
				t.Errorf("cgroupMounts = %v, %v; want %v", mounts, err, tc.mounts)
			}
		})
	}
	if got := unescapeMount(`/a\040b\011c`); got != "/a b\tc" {
		t.Errorf("unescapeMount = %q", got)
	}
}

func TestQuantile(t *testing.T) {
	ds := []int{5, 1, 4, 2, 3, 10, 9, 8, 7, 6}
	var in []time.Duration
	for _, d := range ds {
		in = append(in, time.Duration(d))
	}
	if got := quantile(in, 0.5); got != 5 {
		t.Errorf("median = %v, want 5", got)
	}
	if got := quantile(in, 0.95); got != 10 {
		t.Errorf("p95 = %v, want 10", got)
	}
	if got := quantile(in, 0.1); got != 1 {
		t.Errorf("p10 = %v, want 1", got)
	}
}
