package store

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Join opens dir as this host's directory of the shared Store at
// opts.URL, making it one at first use (Init), as a host started from its
// Store's URL does at every start (a Kubernetes DaemonSet's pod). A
// directory of another Store, or of an embedded one, is refused with
// ErrExists, changing nothing.
func Join(ctx context.Context, dir string, opts Options) (*DB, error) {
	if opts.URL == "" {
		return nil, fmt.Errorf("join store %s: no Store URL", dir)
	}
	raw, err := os.ReadFile(filepath.Join(dir, urlFile))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return Init(ctx, dir, opts) // refuses an embedded Store's directory
	case err != nil:
		return nil, fmt.Errorf("join store %s: %w", dir, err)
	case strings.TrimSpace(string(raw)) != opts.URL:
		return nil, fmt.Errorf("join store %s: the directory belongs to another shared Store (its %s differs): %w", dir, urlFile, ErrExists)
	}
	return Open(ctx, dir, opts)
}
