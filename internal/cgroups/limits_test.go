package cgroups

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/internal/testenv"
)

// ownDir is this process's cgroup directory in the hierarchy key (as
// Mounts names it), if it is mounted and writable.
func ownDir(t *testing.T, key string) string {
	own, err := Paths("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	mounts, err := Mounts("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	m, ok := mounts[key]
	p, ok2 := own[key]
	if !ok || !ok2 {
		return ""
	}
	d, ok := m.Path(p)
	if !ok || unix.Access(d, unix.W_OK) != nil {
		return ""
	}
	return d
}

func read(t *testing.T, dir, name string) string {
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// child makes a cgroup below parent, removed with Remove at the end.
func child(t *testing.T, parent string) string {
	d := filepath.Join(parent, fmt.Sprintf("layerfs-cgroups-test-%d", os.Getpid()))
	if err := os.Mkdir(d, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := Remove(d); err != nil {
			t.Error(err)
		}
	})
	return d
}

// TestLimitsV1 writes and lifts each limit in real v1 cgroups, where this
// host has them (the unified hierarchy is TestLimitsV2's).
func TestLimitsV1(t *testing.T) {
	testenv.RequireRoot(t)
	mem, pids, cpu := ownDir(t, "memory"), ownDir(t, "pids"), ownDir(t, "cpu")
	if mem == "" || pids == "" || cpu == "" {
		testenv.SkipNotHere(t, "no writable cgroup v1 memory, pids and cpu hierarchies")
	}
	m := child(t, mem)
	if err := SetMemoryV1(m, 64<<20, 0); err != nil {
		t.Fatal(err)
	}
	if got := read(t, m, "memory.limit_in_bytes"); got != "67108864" {
		t.Errorf("memory.limit_in_bytes %s, want 67108864", got)
	}
	if err := SetMemoryV1(m, 128<<20, 64<<20); err != nil {
		t.Errorf("raise: %v", err)
	}
	if err := SetMemoryV1(m, 32<<20, 128<<20); err != nil {
		t.Errorf("lower: %v", err)
	}
	if got := read(t, m, "memory.limit_in_bytes"); got != "33554432" {
		t.Errorf("memory.limit_in_bytes %s, want 33554432", got)
	}
	if err := SetMemoryV1(m, 0, 32<<20); err != nil {
		t.Errorf("lift: %v", err)
	}
	p := child(t, pids)
	if err := SetPids(p, 40); err != nil || read(t, p, "pids.max") != "40" {
		t.Errorf("pids.max %s, %v; want 40", read(t, p, "pids.max"), err)
	}
	if err := SetPids(p, 0); err != nil || read(t, p, "pids.max") != "max" {
		t.Errorf("pids.max %s, %v; want max", read(t, p, "pids.max"), err)
	}
	c := child(t, cpu)
	if err := SetCPUV1(c, 250); err != nil {
		t.Fatal(err)
	}
	if q, per := read(t, c, "cpu.cfs_quota_us"), read(t, c, "cpu.cfs_period_us"); q != "25000" || per != "100000" {
		t.Errorf("quota %s period %s, want 25000 100000", q, per)
	}
	if err := SetCPUV1(c, 0); err != nil || read(t, c, "cpu.cfs_quota_us") != "-1" {
		t.Errorf("lifted quota %s, %v; want -1", read(t, c, "cpu.cfs_quota_us"), err)
	}
}

// TestLimitsV2 is TestLimitsV1 for a unified hierarchy that delegates
// memory, pids and cpu.
func TestLimitsV2(t *testing.T) {
	testenv.RequireRoot(t)
	u := ownDir(t, "")
	b, _ := os.ReadFile(filepath.Join(u, "cgroup.subtree_control"))
	if u == "" || !strings.Contains(string(b), "memory") || !strings.Contains(string(b), "pids") || !strings.Contains(string(b), "cpu") {
		testenv.SkipNotHere(t, "no writable cgroup v2 hierarchy delegating memory, pids and cpu")
	}
	d := child(t, u)
	if err := SetMemoryV2(d, 64<<20); err != nil || read(t, d, "memory.max") != "67108864" {
		t.Errorf("memory.max %s, %v", read(t, d, "memory.max"), err)
	}
	if err := SetPids(d, 40); err != nil || read(t, d, "pids.max") != "40" {
		t.Errorf("pids.max %s, %v", read(t, d, "pids.max"), err)
	}
	if err := SetCPUV2(d, 1500); err != nil || read(t, d, "cpu.max") != "150000 100000" {
		t.Errorf("cpu.max %s, %v", read(t, d, "cpu.max"), err)
	}
	if err := SetCPUV2(d, 0); err != nil || read(t, d, "cpu.max") != "max 100000" {
		t.Errorf("cpu.max %s, %v", read(t, d, "cpu.max"), err)
	}
}

func TestRemoveGoneAndErrors(t *testing.T) {
	if err := Remove(filepath.Join(t.TempDir(), "never-made")); err != nil {
		t.Errorf("a cgroup already gone: %v, want nil", err)
	}
	d := t.TempDir()
	if err := os.WriteFile(filepath.Join(d, "f"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Remove(d); !errors.Is(err, unix.ENOTEMPTY) && !errors.Is(err, unix.EEXIST) {
		t.Errorf("a directory that is not empty: %v, want ENOTEMPTY", err)
	}
}
