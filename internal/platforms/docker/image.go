package docker

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"
	"github.com/zeebo/blake3"

	"layerfs.dev/layerfs/internal/platforms"
)

// Image repositories and the label that marks images this package made.
const (
	sandboxRepo = "layerfs-sandbox"
	rootDirRepo = "layerfs-rootdir"
	labelImage  = "dev.layerfs.image" // "sandbox" or "rootdir"
	// labelFingerprint is the hash of the root's metadata (see ensureImage).
	labelFingerprint = "dev.layerfs.fingerprint"
)

// imagePath is the PATH of every sandbox, and of the images' config.
const imagePath = platforms.DefaultPath

// sandboxRoot assembles the default sandbox root file system from this
// host's packages. supervisor is the executable that will be bind-mounted
// at supervisorPath: the shared libraries it needs go into the image too
// ("": none).
func sandboxRoot(packages []string, supervisor string) (*rootFS, error) {
	r := newRootFS("")
	r.addTopLinks()
	if err := r.addPackages(packages); err != nil {
		return nil, err
	}
	for _, p := range defaultExtraPaths {
		if err := r.add(p, false); err != nil {
			return nil, err
		}
	}
	if supervisor != "" {
		if err := r.addExecutableDeps(supervisor); err != nil {
			return nil, fmt.Errorf("supervisor %s: %w", supervisor, err)
		}
	}
	if err := r.addELFDeps(); err != nil {
		return nil, err
	}
	for _, d := range []string{"/tmp", "/workspace", "/proc", "/sys", "/dev", "/root", "/home", "/run", "/var/tmp", supervisorDir} {
		r.dirs[d] = true
	}
	r.inline["/etc/passwd"] = []byte("root:x:0:0:root:/root:/bin/bash\n" +
		"sandbox:x:1000:1000:sandbox:/tmp:/bin/bash\n" +
		"nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n")
	r.inline["/etc/group"] = []byte("root:x:0:\nsandbox:x:1000:\nnogroup:x:65534:\n")
	r.inline["/etc/nsswitch.conf"] = []byte("passwd: files\ngroup: files\nhosts: files dns\n")
	// Mount points that Docker fills in; present so a read-only root needs
	// no change at start.
	for _, p := range []string{"/etc/hosts", "/etc/hostname", "/etc/resolv.conf", supervisorPath} {
		r.inline[p] = nil
	}
	return r, nil
}

// PackageRoot writes to w, as a tar, a root file system made as the
// sandbox image is: the files of these Debian packages of this host (but
// documentation and locales), the shared libraries their executables
// need, the top-level links of merged /usr and a minimal /etc. The image
// bench builds its images with it (no registry is reachable).
func PackageRoot(w io.Writer, packages []string) error {
	r, err := sandboxRoot(packages, "")
	if err != nil {
		return err
	}
	return r.writeTar(w)
}

// PackageFiles writes to w, as a tar, the files of these Debian packages
// of this host alone (a layer that adds them to a PackageRoot).
func PackageFiles(w io.Writer, packages []string) error {
	r := newRootFS("")
	if err := r.addPackages(packages); err != nil {
		return err
	}
	return r.writeTar(w)
}

// addExecutableDeps adds the interpreter and libraries of a host executable
// that is not itself part of the image.
func (r *rootFS) addExecutableDeps(exe string) error {
	need, interp, _, err := elfNeeds(exe)
	if err != nil {
		return err
	}
	if interp != "" {
		if err := r.add(interp, true); err != nil {
			return err
		}
	}
	for _, lib := range need {
		found := false
		for _, d := range r.libDirs {
			if _, err := os.Stat(r.hostPath(d + "/" + lib)); err == nil {
				if err := r.add(d+"/"+lib, true); err != nil {
					return err
				}
				found = true
				break
			}
		}
		if !found {
			return fmt.Errorf("needs %s: not found on this host", lib)
		}
	}
	return nil
}

// rootDirFS is an image directory (Workspace.RootDir) taken as it is.
func rootDirFS(dir string) (*rootFS, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	if fi, err := os.Stat(abs); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("root dir %s: not a directory", dir)
	}
	r := newRootFS(abs)
	err = filepath.WalkDir(abs, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel := "/" + strings.TrimPrefix(strings.TrimPrefix(p, abs), "/")
		if rel == "/" {
			return nil
		}
		if d.IsDir() {
			r.dirs[rel] = true
			return nil
		}
		if d.Type().IsRegular() || d.Type()&os.ModeSymlink != 0 {
			r.files[rel] = true // taken verbatim: links are not followed
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("root dir %s: %w", dir, err)
	}
	for _, d := range []string{"/tmp", "/workspace", supervisorDir} {
		r.dirs[d] = true
	}
	if _, ok := r.files[supervisorPath]; !ok {
		r.inline[supervisorPath] = nil
	}
	return r, nil
}

// rootShapeFS is the top-level shape of the root directory dir: its
// symlinks as they are, its directories empty and its files empty (the
// mount points of binds), what the sandbox mounts itself, and the
// supervisor's place. binds are the names bound over it.
func rootShapeFS(dir string) (*rootFS, []string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, nil, err
	}
	ents, err := os.ReadDir(abs)
	if err != nil {
		return nil, nil, fmt.Errorf("root dir %s: %w", dir, err)
	}
	r := newRootFS(abs)
	var binds []string
	for _, e := range ents {
		name := e.Name()
		switch {
		case name == "tmp" || name == "workspace" || name == "proc" || name == "sys" || name == "dev" || "/"+name == supervisorDir:
			continue // the container's own
		case e.Type()&os.ModeSymlink != 0:
			r.files["/"+name] = true
		case e.IsDir():
			r.dirs["/"+name] = true
			binds = append(binds, name)
		case e.Type().IsRegular():
			r.inline["/"+name] = nil
			binds = append(binds, name)
		}
	}
	for _, d := range []string{"/tmp", "/workspace", "/proc", "/sys", "/dev", supervisorDir, rootBind} {
		r.dirs[d] = true
	}
	r.inline[supervisorPath] = nil
	return r, binds, nil
}

// contentHash is the BLAKE3 hash of the root file system's tar stream, and
// the stream's size.
func contentHash(r *rootFS) (string, int64, error) {
	h := blake3.New()
	cw := &countWriter{w: h}
	if err := r.writeTar(cw); err != nil {
		return "", 0, err
	}
	return hex.EncodeToString(h.Sum(nil))[:24], cw.n, nil
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// builtImage is an image this package ensured.
type builtImage struct {
	Ref       string // repo:hash
	ID        string // sha256:...
	Built     bool   // imported now (false: it was already there)
	TarBytes  int64  // size of the root file system's tar stream
	SizeBytes int64  // the engine's size of the image
}

// ensureImage makes sure the engine has repo:<content hash of r>, importing
// r when it does not. An unchanged root file system is hashed, not sent.
//
// Hashing reads every file (~75 MB for the default image), so an image also
// carries a fingerprint of the root's metadata (names, modes, sizes,
// modification times, inodes, link targets); an image with the same
// fingerprint is taken without hashing. Package upgrades change all of
// those; only a file rewritten in place with its size and time kept would
// slip through, and Options.Packages names what is trusted anyway.
func ensureImage(ctx context.Context, cli *client.Client, repo, kind string, r *rootFS) (builtImage, error) {
	fp, err := r.fingerprint()
	if err != nil {
		return builtImage{}, fmt.Errorf("fingerprint image root: %w", err)
	}
	imgs, err := cli.ImageList(ctx, image.ListOptions{Filters: filters.NewArgs(
		filters.Arg("label", labelImage+"="+kind), filters.Arg("label", labelFingerprint+"="+fp))})
	if err != nil {
		return builtImage{}, fmt.Errorf("list images: %w", err)
	}
	for _, im := range imgs {
		for _, tag := range im.RepoTags {
			if strings.HasPrefix(tag, repo+":") {
				return builtImage{Ref: tag, ID: im.ID, SizeBytes: im.Size}, nil
			}
		}
	}

	hash, tarBytes, err := contentHash(r)
	if err != nil {
		return builtImage{}, fmt.Errorf("hash image root: %w", err)
	}
	b := builtImage{Ref: repo + ":" + hash, TarBytes: tarBytes}
	ins, err := cli.ImageInspect(ctx, b.Ref)
	if err == nil && ins.Config != nil && ins.Config.Labels[labelFingerprint] == fp {
		b.ID, b.SizeBytes = ins.ID, ins.Size
		return b, nil
	}
	// The same content with other metadata (or from before fingerprints)
	// is imported again, so that the next Up need not hash.
	if err != nil && !cerrdefs.IsNotFound(err) {
		return b, fmt.Errorf("inspect image %s: %w", b.Ref, err)
	}

	pr, pw := io.Pipe()
	sent := make(chan string, 1)
	go func() {
		h := blake3.New()
		err := r.writeTar(io.MultiWriter(pw, h))
		sent <- hex.EncodeToString(h.Sum(nil))[:24]
		pw.CloseWithError(err)
	}()
	rc, err := cli.ImageImport(ctx, image.ImportSource{Source: pr, SourceName: "-"}, b.Ref, image.ImportOptions{
		Message: "layerfs " + kind + " image",
		Changes: []string{
			"ENV PATH=" + imagePath,
			"LABEL " + labelImage + "=" + kind + " " + labelFingerprint + "=" + fp,
			`CMD ["` + supervisorPath + `", "idle"]`,
		},
	})
	if err != nil {
		pr.CloseWithError(err)
		return b, fmt.Errorf("import image %s: %w", b.Ref, err)
	}
	id, err := readImportStream(rc)
	if cerr := rc.Close(); err == nil {
		err = cerr
	}
	pr.CloseWithError(io.ErrClosedPipe) // unblock the writer if the engine stopped reading
	got := <-sent
	if err != nil {
		return b, fmt.Errorf("import image %s: %w", b.Ref, err)
	}
	if got != hash {
		_, _ = cli.ImageRemove(ctx, id, image.RemoveOptions{})
		return b, fmt.Errorf("import image %s: the root file system changed while it was imported; retry", b.Ref)
	}
	ins, err = cli.ImageInspect(ctx, b.Ref)
	if err != nil {
		return b, fmt.Errorf("inspect imported image %s: %w", b.Ref, err)
	}
	if id != "" && ins.ID != id {
		// Another process imported the same content at the same moment
		// and its tag won; drop our now-untagged copy.
		_, _ = cli.ImageRemove(ctx, id, image.RemoveOptions{})
	}
	b.ID, b.SizeBytes, b.Built = ins.ID, ins.Size, true
	return b, nil
}

// readImportStream reads the engine's JSON progress messages after an
// import and returns the new image id (from its final status) or the error
// the engine reported.
func readImportStream(rc io.Reader) (string, error) {
	dec := json.NewDecoder(rc)
	var id string
	for {
		var m struct {
			Status      string `json:"status"`
			Error       string `json:"error"`
			ErrorDetail struct {
				Message string `json:"message"`
			} `json:"errorDetail"`
		}
		if err := dec.Decode(&m); err == io.EOF {
			return id, nil
		} else if err != nil {
			return "", err
		}
		if m.Error != "" {
			return "", errors.New(m.Error)
		}
		if strings.HasPrefix(m.Status, "sha256:") {
			id = strings.TrimSpace(m.Status)
		}
	}
}

// pruneImages removes this package's images of kind other than keep. Images
// still used by a container are left alone.
func pruneImages(ctx context.Context, cli *client.Client, kind, keep string) error {
	imgs, err := cli.ImageList(ctx, image.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", labelImage+"="+kind))})
	if err != nil {
		return fmt.Errorf("list %s images: %w", kind, err)
	}
	var errs []error
	for _, im := range imgs {
		if im.ID == keep {
			continue
		}
		if _, err := cli.ImageRemove(ctx, im.ID, image.RemoveOptions{}); err != nil && !cerrdefs.IsNotFound(err) && !cerrdefs.IsConflict(err) {
			errs = append(errs, fmt.Errorf("remove image %s: %w", im.ID, err))
		}
	}
	return errors.Join(errs...)
}

// pruneImageID removes one image unless a container still uses it.
func pruneImageID(ctx context.Context, cli *client.Client, id string) error {
	_, err := cli.ImageRemove(ctx, id, image.RemoveOptions{})
	if err != nil && !cerrdefs.IsNotFound(err) && !cerrdefs.IsConflict(err) {
		return fmt.Errorf("remove image %s: %w", id, err)
	}
	return nil
}
