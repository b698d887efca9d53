package engine

import (
	"context"

	"layerfs.dev/layerfs/internal/kerneloverlay"
	"layerfs.dev/layerfs/internal/store"
)

// readyImage builds the metadata image of the commit id, just published
// from a directory of this host (an import, a commit of a directory), so
// that the first workspace opened on it mounts it at once instead of
// building it (kerneloverlay.MetaImage). Such a publish is O(tree)
// already; a workspace's commit, O(changes), has its image built in the
// background instead (buildMetaAhead). A host that cannot serve the
// overlay data path builds none; a failure costs only the first open.
func (e *Engine) readyImage(ctx context.Context, id store.ID) {
	if e.overlayCheck() != nil || id.IsZero() {
		return
	}
	c, err := e.db.Commit(ctx, id)
	if err == nil {
		_, err = kerneloverlay.MetaImage(ctx, e.db, e.db.CacheDir(), c.Root)
	}
	if err != nil {
		e.log.Warn("metadata image of a new commit", "commit", id.Short(), "err", err)
	}
}
