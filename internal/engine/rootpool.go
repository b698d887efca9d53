package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"layerfs.dev/layerfs/internal/fusefs"
	"layerfs.dev/layerfs/internal/kerneloverlay"
	"layerfs.dev/layerfs/internal/overlay"
	"layerfs.dev/layerfs/internal/store"
)

// rootPoolSize is how many roots the pool keeps made ahead per tree, and
// rootPoolTrees for how many trees (those a workspace opened on lately).
const (
	rootPoolSize  = 2
	rootPoolTrees = 4
)

// rootRefillDelay is how long a refill waits before it makes a root: the
// open that took one is done by then, and does not share the CPU with it.
const rootRefillDelay = 20 * time.Millisecond

// rootPool holds image roots made ahead of the workspaces that will take
// them: for each tree a workspace's root was lately served over (with its
// platform's mapping and durability), a few empty overlays over the
// tree's shared lower, each in a directory of its own under the pool.
// Only images' own trees are pooled, not those forks stand on, and only
// for the trees opened on last.
// Opening a workspace on an image then takes one: a rename of its
// directory into the workspace's, and no mount on the open's path, where
// making the overlay (its directories, its work directory's checks, the
// id-mapped clone) is most of what a root costs. A taken root is made
// again in the background, after the open. The pool's roots hold their
// lower (acquireLower).
type rootPool struct {
	mu     sync.Mutex
	ready  map[rootKey][]*kerneloverlay.Mount
	making map[rootKey]bool
	lru    []rootKey // the keys, the one opened on last last
	closed bool
	wg     sync.WaitGroup // the refills running
}

// rootKey is what a pooled root fits: the tree, the platform (its id
// mapping) and the durability.
type rootKey struct {
	tree     store.ID
	platform string
	volatile bool
}

// rootPoolDir is where the pool's roots are made.
func (e *Engine) rootPoolDir() string { return filepath.Join(e.db.WorkspacesDir(), ".roots", "pool") }

// takeRoot serves w's fresh root from the pool, reporting false when the
// pool has none for it (then the caller makes one); either way it has
// one made for the next workspace.
func (e *Engine) takeRoot(w *workspace) bool {
	if !w.opts.Image.On.IsZero() {
		return false
	}
	k := rootKey{w.opts.Image.lower(), w.opts.Platform, w.opts.volatile()}
	defer e.refillRoots(k)
	p := &e.roots
	p.mu.Lock()
	p.lru = append(slices.DeleteFunc(p.lru, func(o rootKey) bool { return o == k }), k)
	var m *kerneloverlay.Mount
	if rs := p.ready[k]; len(rs) > 0 {
		m, p.ready[k] = rs[len(rs)-1], rs[:len(rs)-1]
	}
	p.mu.Unlock()
	if m == nil {
		return false
	}
	if err := m.Move(e.rootDir(w.rec.ID)); err != nil {
		e.log.Warn("a pooled root could not be moved; the workspace's is made", "id", w.rec.ID, "err", err)
		e.dropPooled(k, m)
		return false
	}
	w.root, w.rootShared = m, true
	return true
}

// refillRoots makes, in the background, the roots the pool lacks for k.
func (e *Engine) refillRoots(k rootKey) {
	p := &e.roots
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.making[k] || len(p.ready[k]) >= rootPoolSize {
		return
	}
	if p.making == nil {
		p.making, p.ready = map[rootKey]bool{}, map[rootKey][]*kerneloverlay.Mount{}
	}
	for len(p.lru) > rootPoolTrees {
		old := p.lru[0]
		p.lru = p.lru[1:]
		// A refill of it running drops what it makes (not in lru).
		ms := p.ready[old]
		delete(p.ready, old)
		p.wg.Go(func() {
			for _, m := range ms {
				e.dropPooled(old, m)
			}
		})
	}
	p.making[k] = true
	p.wg.Go(func() {
		time.Sleep(rootRefillDelay)
		for {
			m, err := e.makePooled(k)
			p.mu.Lock()
			if err != nil || p.closed || !slices.Contains(p.lru, k) {
				p.making[k] = false
				p.mu.Unlock()
				if err != nil {
					e.log.Warn("an image root could not be made ahead", "tree", k.tree.Short(), "err", err)
				} else {
					e.dropPooled(k, m)
				}
				return
			}
			p.ready[k] = append(p.ready[k], m)
			if len(p.ready[k]) >= rootPoolSize {
				p.making[k] = false
				p.mu.Unlock()
				return
			}
			p.mu.Unlock()
		}
	})
}

// makePooled makes one empty root for k in a directory of the pool.
func (e *Engine) makePooled(k rootKey) (*kerneloverlay.Mount, error) {
	ctx := context.Background()
	dir, err := os.MkdirTemp(e.rootPoolDir(), "root-")
	if err != nil {
		if err = os.MkdirAll(e.rootPoolDir(), 0o700); err == nil {
			dir, err = os.MkdirTemp(e.rootPoolDir(), "root-")
		}
		if err != nil {
			return nil, err
		}
	}
	target := kerneloverlay.MountDir(dir)
	if err := mkdirs(target); err != nil {
		return nil, errors.Join(err, os.RemoveAll(dir))
	}
	lower, err := e.acquireLower(ctx, k.tree)
	if err != nil {
		return nil, errors.Join(err, os.RemoveAll(dir))
	}
	m, err := lower.Over(ctx, dir, target, overlay.EmptyUpper(), e.platIDMap(k.platform), k.volatile)
	if err != nil {
		return nil, errors.Join(err, e.releaseLower(ctx, k.tree), os.RemoveAll(dir))
	}
	return m, nil
}

// dropPooled unmounts a root of the pool and removes its directory.
func (e *Engine) dropPooled(k rootKey, m *kerneloverlay.Mount) {
	ctx := context.Background()
	err := errors.Join(m.Unmount(ctx), e.releaseLower(ctx, k.tree))
	if err == nil {
		err = os.RemoveAll(m.Dir())
	}
	if err != nil {
		e.log.Warn("a pooled image root left behind", "dir", m.Dir(), "err", err)
	}
}

// closeRootPool drops the pool's roots, once the refills running end; no
// root is made after it.
func (e *Engine) closeRootPool() {
	p := &e.roots
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.wg.Wait()
	p.mu.Lock()
	ready := p.ready
	p.ready = nil
	p.mu.Unlock()
	for k, ms := range ready {
		for _, m := range ms {
			e.dropPooled(k, m)
		}
	}
}

// cleanRootPool removes what a daemon that died left in the pool: its
// roots' mounts, then their directories.
func (e *Engine) cleanRootPool() error {
	ents, err := os.ReadDir(e.rootPoolDir())
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var errs []error
	for _, d := range ents {
		dir := filepath.Join(e.rootPoolDir(), d.Name())
		if err := fusefs.CleanStale(kerneloverlay.MountDir(dir)); err != nil {
			errs = append(errs, err)
			continue
		}
		errs = append(errs, os.RemoveAll(dir))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("clean the pool of image roots: %w", err)
	}
	return nil
}
