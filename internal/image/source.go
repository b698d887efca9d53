package image

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/client"
	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"layerfs.dev/layerfs/wire/errclass"
)

// The kinds of source an image is imported from.
const (
	FromLayout   = "oci-layout" // an OCI image layout directory
	FromArchive  = "archive"    // a docker save tar, or an OCI layout in a tar
	FromDocker   = "docker"     // an image of the local Docker engine, by reference
	FromRegistry = "registry"   // a registry's image, by reference
	FromDir      = "dir"        // a plain directory, as one layer
)

// Kinds lists them.
var Kinds = []string{FromLayout, FromArchive, FromDocker, FromRegistry, FromDir}

// Opened is a source read as an image; Close removes what reading it
// needed (a saved or unpacked archive).
type Opened struct {
	Image v1.Image
	// Source is Record.Source: the kind and what it was read from.
	Source string
	close  func() error
}

// Close removes what Open made.
func (o *Opened) Close() error {
	if o.close == nil {
		return nil
	}
	return o.close()
}

// OpenOptions tune Open.
type OpenOptions struct {
	// TempDir holds a Docker engine's saved image or an unpacked OCI
	// archive while it is read ("": the system's).
	TempDir string
	// Insecure lets a registry be reached over plain HTTP (a registry on
	// localhost always may).
	Insecure bool
	// Keychain finds registry credentials; nil: the usual sources
	// (authn.DefaultKeychain: $DOCKER_CONFIG/config.json or
	// ~/.docker/config.json and the credential helpers it names).
	Keychain authn.Keychain
}

// platform is the one this host runs.
var platform = v1.Platform{OS: "linux", Architecture: runtime.GOARCH}

// Open reads the image at ref, a source of the given kind (not FromDir:
// ImportDir takes a directory).
func Open(ctx context.Context, kind, ref string, opts OpenOptions) (*Opened, error) {
	if ref == "" {
		return nil, fmt.Errorf("%w: image source: no %s given", errclass.Invalid, kind)
	}
	switch kind {
	case FromLayout:
		img, err := fromLayout(ref)
		return &Opened{Image: img, Source: kind + ":" + ref}, err
	case FromArchive:
		return fromArchive(ref, opts)
	case FromDocker:
		return fromDocker(ctx, ref, opts)
	case FromRegistry:
		return fromRegistry(ctx, ref, opts)
	}
	return nil, fmt.Errorf("%w: image source kind %q: want one of %q", errclass.Invalid, kind, Kinds[:4])
}

// fromLayout reads the image of this host's platform in an OCI layout
// directory (or its only image).
func fromLayout(dir string) (v1.Image, error) {
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return nil, fmt.Errorf("%w: OCI layout %s: %w", ErrBadImage, dir, err)
	}
	img, err := pick(idx)
	if err != nil {
		return nil, fmt.Errorf("OCI layout %s: %w", dir, err)
	}
	return img, nil
}

// pick finds the image for this host's platform in an index (nested
// indexes included), or its only image.
func pick(idx v1.ImageIndex) (v1.Image, error) {
	m, err := idx.IndexManifest()
	if err != nil {
		return nil, fmt.Errorf("%w: index: %w", ErrBadImage, err)
	}
	var images []v1.Descriptor
	for _, d := range m.Manifests {
		switch {
		case d.MediaType.IsIndex():
			sub, err := idx.ImageIndex(d.Digest)
			if err != nil {
				return nil, fmt.Errorf("%w: index %s: %w", ErrBadImage, d.Digest, err)
			}
			if img, err := pick(sub); err == nil {
				return img, nil
			}
		case d.MediaType.IsImage():
			if d.Platform != nil && d.Platform.Satisfies(platform) {
				return idx.Image(d.Digest)
			}
			if d.Platform == nil || d.Platform.OS != "unknown" { // attestations are "unknown/unknown"
				images = append(images, d)
			}
		}
	}
	if len(images) == 1 && (images[0].Platform == nil) {
		return idx.Image(images[0].Digest)
	}
	return nil, fmt.Errorf("%w: no image for %s/%s among %d", ErrBadImage, platform.OS, platform.Architecture, len(m.Manifests))
}

// fromArchive reads a docker save archive, or an OCI layout packed in a
// tar (unpacked into a temporary directory first).
func fromArchive(path string, opts OpenOptions) (*Opened, error) {
	src := FromArchive + ":" + path
	isLayout, err := archiveIsLayout(path)
	if err != nil {
		return nil, err
	}
	if !isLayout {
		img, err := tarball.ImageFromPath(path, nil)
		if err != nil {
			return nil, fmt.Errorf("%w: archive %s: %w", ErrBadImage, path, err)
		}
		return &Opened{Image: img, Source: src}, nil
	}
	dir, err := os.MkdirTemp(opts.TempDir, "layerfs-oci-")
	if err != nil {
		return nil, err
	}
	cleanup := func() error { return os.RemoveAll(dir) }
	if err := unpackLayout(path, dir); err != nil {
		cleanup()
		return nil, err
	}
	img, err := fromLayout(dir)
	if err != nil {
		cleanup()
		return nil, err
	}
	return &Opened{Image: img, Source: src, close: cleanup}, nil
}

// archiveIsLayout tells an OCI layout in a tar (index.json, no
// manifest.json) from a docker save archive (manifest.json).
func archiveIsLayout(path string) (bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return false, fmt.Errorf("%w: archive: %w", errclass.Invalid, err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	index := false
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return index, nil
		}
		if err != nil {
			return false, fmt.Errorf("%w: archive %s: %w", ErrBadImage, path, err)
		}
		switch strings.TrimPrefix(h.Name, "./") {
		case "manifest.json":
			return false, nil
		case "index.json":
			index = true
		}
	}
}

// unpackLayout writes an OCI layout's files (index.json, oci-layout,
// blobs/...) from the tar at path into dir: regular files and
// directories only, each beneath dir.
func unpackLayout(path, dir string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%w: archive %s: %w", ErrBadImage, path, err)
		}
		name := filepath.Clean(strings.TrimPrefix(h.Name, "./"))
		switch h.Typeflag {
		case tar.TypeDir:
			err = root.MkdirAll(name, 0o700)
		case tar.TypeReg:
			err = writeBeneath(root, name, tr)
		default:
			continue // an OCI layout holds nothing else
		}
		if err != nil {
			return fmt.Errorf("%w: archive %s: %s: %w", ErrBadImage, path, name, err)
		}
	}
}

// writeBeneath writes r to name below root (os.Root refuses a path that
// leads out of it).
func writeBeneath(root *os.Root, name string, r io.Reader) error {
	if d := filepath.Dir(name); d != "." {
		if err := root.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// fromDocker saves the Docker engine's image ref into a temporary file
// and reads it as an archive.
func fromDocker(ctx context.Context, ref string, opts OpenOptions) (*Opened, error) {
	cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		return nil, fmt.Errorf("%w: docker engine: %w", errclass.Unavailable, err)
	}
	defer cli.Close()
	rc, err := cli.ImageSave(ctx, []string{ref})
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return nil, fmt.Errorf("%w: docker image %q: %w", errclass.NotFound, ref, err)
		}
		return nil, fmt.Errorf("%w: docker engine: save %s: %w", errclass.Unavailable, ref, err)
	}
	defer rc.Close()
	f, err := os.CreateTemp(opts.TempDir, "layerfs-docker-save-*.tar")
	if err != nil {
		return nil, err
	}
	cleanup := func() error { return os.Remove(f.Name()) }
	_, err = io.Copy(f, rc)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		cleanup()
		return nil, fmt.Errorf("%w: docker engine: save %s: %w", errclass.Unavailable, ref, err)
	}
	o, err := fromArchive(f.Name(), opts)
	if err != nil {
		cleanup()
		return nil, err
	}
	inner := o.close
	o.Source, o.close = FromDocker+":"+ref, func() error {
		var err error
		if inner != nil {
			err = inner()
		}
		return errors.Join(err, cleanup())
	}
	return o, nil
}

// nameOptions are the reference options of opts.
func nameOptions(opts OpenOptions) []name.Option {
	if opts.Insecure {
		return []name.Option{name.Insecure}
	}
	return nil
}

// remoteOptions are the registry options of opts.
func remoteOptions(ctx context.Context, opts OpenOptions) []remote.Option {
	kc := opts.Keychain
	if kc == nil {
		kc = authn.DefaultKeychain
	}
	return []remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(kc), remote.WithPlatform(platform)}
}

// fromRegistry reads a registry's image; its layers are fetched as the
// import reads them (only those the Store lacks).
func fromRegistry(ctx context.Context, ref string, opts OpenOptions) (*Opened, error) {
	r, err := name.ParseReference(ref, nameOptions(opts)...)
	if err != nil {
		return nil, fmt.Errorf("%w: image reference %q: %w", errclass.Invalid, ref, err)
	}
	img, err := remote.Image(r, remoteOptions(ctx, opts)...)
	if err != nil {
		return nil, registryError(ref, err)
	}
	return &Opened{Image: img, Source: FromRegistry + ":" + r.String()}, nil
}

// registryError classes a registry's refusal.
func registryError(ref string, err error) error {
	var te interface{ Temporary() bool }
	msg := err.Error()
	switch {
	case strings.Contains(msg, "MANIFEST_UNKNOWN") || strings.Contains(msg, "NAME_UNKNOWN") || strings.Contains(msg, "404"):
		return fmt.Errorf("%w: registry image %s: %w", errclass.NotFound, ref, err)
	case strings.Contains(msg, "UNAUTHORIZED") || strings.Contains(msg, "DENIED") || strings.Contains(msg, "401"):
		return fmt.Errorf("%w: registry image %s: not authorized (credentials come from the Docker config of the daemon's user and its helpers): %w", errclass.Unauthorized, ref, err)
	case errors.As(err, &te):
		return fmt.Errorf("%w: registry image %s: %w", errclass.Unavailable, ref, err)
	}
	return fmt.Errorf("%w: registry image %s: %w", errclass.Unavailable, ref, err)
}
