package image

import (
	"context"
	"fmt"
	"io"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"layerfs.dev/layerfs/internal/commit"
	"layerfs.dev/layerfs/internal/store"
	"layerfs.dev/layerfs/wire/errclass"
)

// CommitReader reads commits beside trees and contents.
type CommitReader interface {
	commit.Reader
	Commit(ctx context.Context, id store.ID) (*store.Commit, error)
}

// Push sends a stored image to a registry as ref: each layer written from
// the Store (LayerTar of its commit's tree against the one below, gzip
// compressed), the config as it is but for the layers' diff IDs, which
// are those of the tars written. Pulled again, it gives the same trees.
// It returns the reference pushed, with its manifest digest.
func Push(ctx context.Context, r CommitReader, img store.Image, ref string, opts OpenOptions) (string, error) {
	dst, err := name.ParseReference(ref, nameOptions(opts)...)
	if err != nil {
		return "", fmt.Errorf("%w: image reference %q: %w", errclass.Invalid, ref, err)
	}
	rec, err := DecodeRecord(img)
	if err != nil {
		return "", err
	}
	cf, err := rec.ConfigFile()
	if err != nil {
		return "", err
	}
	var layers []v1.Layer
	cf.RootFS.DiffIDs = nil
	prev := store.ZeroID
	for _, l := range rec.Layers {
		c, err := r.Commit(ctx, l.Commit)
		if err != nil {
			return "", err
		}
		from, to := prev, c.Root
		layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
			pr, pw := io.Pipe()
			go func() {
				_, err := LayerTar(ctx, r, from, to, pw)
				pw.CloseWithError(err)
			}()
			return pr, nil
		})
		if err != nil {
			return "", err
		}
		d, err := layer.DiffID()
		if err != nil {
			return "", fmt.Errorf("layer %s: %w", short(l.DiffID), err)
		}
		cf.RootFS.DiffIDs = append(cf.RootFS.DiffIDs, d)
		layers = append(layers, layer)
		prev = c.Root
	}
	out, err := mutate.AppendLayers(empty.Image, layers...)
	if err != nil {
		return "", err
	}
	if out, err = mutate.ConfigFile(out, cf); err != nil {
		return "", err
	}
	if err := remote.Write(dst, out, remoteOptions(ctx, opts)...); err != nil {
		return "", registryError(ref, err)
	}
	d, err := out.Digest()
	if err != nil {
		return "", err
	}
	return dst.Context().Digest(d.String()).String(), nil
}
