package bench

import (
	"path/filepath"

	"layerfs.dev/layerfs/internal/mountinfo"
)

// DescribeFS names the file system dir is on, as "ext4 (journal) on
// /dev/vda at /": what a reader needs to compare figures, since
// create/delete churn on ext4 without a journal is several times slower
// natively.
func DescribeFS(dir string) string {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "unknown"
	}
	ms, err := mountinfo.Read(mountinfo.Self)
	if err != nil {
		return "unknown"
	}
	m, ok := mountinfo.Containing(ms, dir)
	if !ok {
		return "unknown"
	}
	desc := m.FSType
	if m.FSType == "ext4" || m.FSType == "ext3" {
		// jbd2 lists a journaled file system's device.
		if j, _ := filepath.Glob("/proc/fs/jbd2/" + filepath.Base(m.Source) + "-*"); len(j) > 0 {
			desc += " (journal)"
		} else {
			desc += " (no journal)"
		}
	}
	return desc + " on " + m.Source + " at " + m.Dir
}
