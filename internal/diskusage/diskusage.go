package diskusage

import (
	"errors"
	"io/fs"
	"path/filepath"
	"slices"

	"golang.org/x/sys/unix"
)

// Tree returns the bytes the files under root take on disk (a root that
// does not exist takes none, and files removed during the walk are
// skipped). Directories named one of skip are not entered: a tree of
// hard links to files counted elsewhere, such as a cache's trusted
// layers, is named there so that it is not counted twice.
func Tree(root string, skip ...string) (int64, error) {
	var total int64
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if d.IsDir() && p != root && slices.Contains(skip, d.Name()) {
			return filepath.SkipDir
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			if errors.Is(err, unix.ENOENT) {
				return nil
			}
			return err
		}
		total += st.Blocks * 512
		return nil
	})
	return total, err
}
