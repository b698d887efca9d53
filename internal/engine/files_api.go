package engine

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/internal/fsids"
	"layerfs.dev/layerfs/wire/errclass"
)

// withRoot runs fn with the root of a live workspace opened for beneath
// lookups. The files go through the workspace's mount, like a sandbox's
// writes, so the kernel's caches stay true. On a mount over id-mapped
// layers fn writes as the mapping's root (whose files are owned by 0 on
// disk; the daemon's own ids are not mapped there) and offset is that
// root's host id, what reads subtract from the ids they report; else 0.
func (e *Engine) withRoot(ctx context.Context, id string, write bool, fn func(root int, offset uint32) error) error {
	if write {
		if err := e.checkOpen(); err != nil {
			return err
		}
	}
	w, err := e.get(ctx, id)
	if err != nil {
		return err
	}
	w.mu.RLock()
	defer w.mu.RUnlock()
	root, err := rootDir(w.data)
	if err != nil {
		return err
	}
	defer unix.Close(root)
	m := w.idmap()
	switch {
	case m == nil:
		return fn(root, 0)
	case write:
		return fsids.Do(m.Root, func() error { return fn(root, m.Root) })
	}
	return fn(root, m.Root)
}

// WriteFile creates or replaces one file of a workspace, creating its
// parent directories.
func (e *Engine) WriteFile(ctx context.Context, id, path string, mode fs.FileMode, r io.Reader) error {
	rel, err := cleanRel(path)
	if err != nil {
		return err
	}
	if mode&^fs.ModePerm != 0 {
		return fmt.Errorf("%w: mode %v: only permission bits", errclass.Invalid, mode)
	}
	if mode == 0 {
		mode = 0o644
	}
	return e.withRoot(ctx, id, true, func(root int, _ uint32) error { return writeFile(root, rel, mode, r) })
}

// ReadFile writes one regular file of a workspace to w, after reporting its
// size through size (called before any byte is written).
func (e *Engine) ReadFile(ctx context.Context, id, path string, w io.Writer) (int64, error) {
	rel, err := cleanRel(path)
	if err != nil {
		return 0, err
	}
	var n int64
	err = e.withRoot(ctx, id, false, func(root int, _ uint32) error {
		f, size, err := openRegular(root, rel)
		if err != nil {
			return err
		}
		defer f.Close()
		n = size
		if _, err := io.CopyN(w, f, size); err != nil {
			return fmt.Errorf("read %q: %w", rel, err)
		}
		return nil
	})
	return n, err
}

// PutTar extracts a tar stream into dir of a workspace. The archive is
// spooled and checked whole first, so a bad entry anywhere in it changes
// nothing.
func (e *Engine) PutTar(ctx context.Context, id, dir string, r io.Reader) error {
	rel, err := cleanRel(dir)
	if err != nil {
		return err
	}
	if _, err := e.get(ctx, id); err != nil {
		return err
	}
	spool, err := os.CreateTemp(e.db.Dir(), ".upload-*.tar")
	if err != nil {
		return err
	}
	os.Remove(spool.Name())
	defer spool.Close()
	if _, err := io.Copy(spool, r); err != nil {
		return fmt.Errorf("receive tar: %w", err)
	}
	if _, err := spool.Seek(0, io.SeekStart); err != nil {
		return err
	}
	if err := checkTar(spool); err != nil {
		return err
	}
	if _, err := spool.Seek(0, io.SeekStart); err != nil {
		return err
	}
	return e.withRoot(ctx, id, true, func(root int, _ uint32) error {
		if err := mkdirAll(root, rel, 0o755); err != nil {
			return err
		}
		return extractTar(root, rel, spool)
	})
}

// GetTar writes a file or a tree of a workspace to w as a tar stream.
func (e *Engine) GetTar(ctx context.Context, id, path string, w io.Writer) error {
	rel, err := cleanRel(path)
	if err != nil {
		return err
	}
	return e.withRoot(ctx, id, false, func(root int, offset uint32) error { return writeTar(root, rel, offset, w) })
}
