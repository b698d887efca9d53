package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"time"

	"layerfs.dev/layerfs/client"
	"layerfs.dev/layerfs/internal/platforms"
	"layerfs.dev/layerfs/internal/platforms/docker"
	"layerfs.dev/layerfs/internal/stats"
	"layerfs.dev/layerfs/wire"
)

// ImagePackages are the Debian packages of this host the image bench's
// base image is made of (about 300 MB): python3 with numpy, git and
// build-essential's compilers, with what they need to run.
var ImagePackages = []string{
	"bash", "dash", "coreutils", "findutils", "grep", "sed", "mawk", "diffutils", "tar", "gzip",
	"git", "python3", "python3-minimal", "python3.11", "python3.11-minimal", "libpython3.11-minimal",
	"libpython3.11-stdlib", "python3-numpy", "libblas3", "liblapack3", "gcc", "gcc-12", "g++", "g++-12",
	"cpp", "cpp-12", "libgcc-12-dev", "libstdc++-12-dev", "libc6-dev", "libc-dev-bin", "linux-libc-dev",
	"binutils", "binutils-x86-64-linux-gnu", "libbinutils", "make", "dpkg-dev", "perl-base",
	"libgomp1", "libatomic1", "libitm1", "libquadmath0", "libasan8", "liblsan0", "libtsan2", "libubsan1", "libcc1-0",
}

// ImageExtraPackage is what the second image adds on the first.
var ImageExtraPackage = []string{"perl-modules-5.36"}

// ImageConfig says how to run the image bench.
type ImageConfig struct {
	WorkDir string // the Store and the build context
	Rounds  int    // samples of each timed figure
	// Settle is how long the opens wait, after a first workspace on the
	// image, for the daemon's background work of a new image (the
	// prefetch of the contents the import's cache fill left out) to end.
	Settle time.Duration
	// Arms are the timed figures to measure after the imports, of
	// ImageArms (nil: all).
	Arms     []string
	Platform platforms.Platform
	Log      *slog.Logger
	Progress func(string)
}

// ImageArms are the image bench's timed figures, as ImageConfig.Arms
// names them: workspace opens, the first import numpy, rebuilds.
var ImageArms = []string{"open", "numpy", "rebuild"}

// ImageReport is the image bench's figures.
type ImageReport struct {
	Base, Second           wire.ImageResult
	BaseWall, SecondWall   time.Duration // the import requests, docker save included
	SecondLayerBytes       int64
	OpenImage, OpenHost    []time.Duration
	NumpyLayerFS           []time.Duration // new workspace + first import numpy, page cache dropped
	NumpyLayerFSExec       []time.Duration // of which the exec
	NumpyDocker            []time.Duration // docker run of the same image, page cache dropped
	RebuildLayerFS         []time.Duration
	RebuildDocker          []time.Duration
	DockerBase, DockerNext string
	Rounds                 int
	Settle                 time.Duration
}

// Image tags of the bench's Docker images.
const (
	benchBaseTag = "layerfs-bench-image-base:latest"
	benchNextTag = "layerfs-bench-image-next:latest"
)

// RunImage builds the bench's two images with Docker (from this host's
// packages: no registry is reachable), imports them into a fresh Store,
// and measures, in cfg.Rounds samples each: opening a workspace on the
// image against on the host runtime; the first import numpy in a new
// workspace on the image against docker run of it, the page cache dropped
// before each; a rebuild of a five-step build file after an edit of its
// last step against Docker's cached rebuild.
func RunImage(ctx context.Context, cfg ImageConfig) (*ImageReport, error) {
	rep := &ImageReport{DockerBase: benchBaseTag, DockerNext: benchNextTag, Rounds: cfg.Rounds}
	progress := cfg.Progress
	if progress == nil {
		progress = func(string) {}
	}
	progress("building the Docker images from this host's packages")
	if err := dockerImages(ctx, cfg.WorkDir); err != nil {
		return nil, err
	}
	d, err := StartDaemon(ctx, filepath.Join(cfg.WorkDir, "store"), []platforms.Platform{cfg.Platform}, cfg.Log)
	if err != nil {
		return nil, err
	}
	defer d.Close(context.WithoutCancel(ctx))
	c := d.Client
	progress("importing the base image")
	t0 := time.Now()
	if rep.Base, err = c.ImportImage(ctx, wire.ImageImport{Name: "bench/base:1", Kind: wire.ImageFromDocker, Source: benchBaseTag}); err != nil {
		return nil, err
	}
	rep.BaseWall = time.Since(t0)
	progress("importing the second image")
	t0 = time.Now()
	if rep.Second, err = c.ImportImage(ctx, wire.ImageImport{Name: "bench/next:1", Kind: wire.ImageFromDocker, Source: benchNextTag}); err != nil {
		return nil, err
	}
	rep.SecondWall = time.Since(t0)
	layers := rep.Second.Image.Layers
	rep.SecondLayerBytes = layers[len(layers)-1].Size
	if _, err := c.CreateProject(ctx, wire.CreateProject{Name: "bench"}); err != nil {
		return nil, err
	}
	arm := func(name string) bool { return cfg.Arms == nil || slices.Contains(cfg.Arms, name) }
	if arm("open") {
		progress("opening workspaces")
		rep.Settle = cfg.Settle
		if err := rep.opens(ctx, c, cfg.Rounds, cfg.Settle); err != nil {
			return nil, err
		}
	}
	if arm("numpy") {
		progress("first import numpy, page cache dropped")
		if err := rep.numpy(ctx, c, cfg.Rounds); err != nil {
			return nil, err
		}
	}
	if arm("rebuild") {
		progress("rebuilds after an edit of the last step")
		if err := rep.rebuilds(ctx, c, cfg.WorkDir, cfg.Rounds); err != nil {
			return nil, err
		}
	}
	return rep, nil
}

// dockerImages makes the two images: the base, imported from a tar of
// the packages' files, and the next, the base with one more package
// added by a build (one layer).
func dockerImages(ctx context.Context, dir string) error {
	var base bytes.Buffer
	if err := docker.PackageRoot(&base, ImagePackages); err != nil {
		return fmt.Errorf("base image: %w", err)
	}
	cmd := exec.CommandContext(ctx, "docker", "import", "--change", "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "-", benchBaseTag)
	cmd.Stdin = &base
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("docker import: %w: %s", err, out)
	}
	next := filepath.Join(dir, "next")
	if err := os.MkdirAll(next, 0o755); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(next, "extra.tar"))
	if err != nil {
		return err
	}
	err = docker.PackageFiles(f, ImageExtraPackage)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("second image: %w", err)
	}
	if err := os.WriteFile(filepath.Join(next, "Dockerfile"), []byte("FROM "+benchBaseTag+"\nADD extra.tar /\n"), 0o644); err != nil {
		return err
	}
	_, err = dockerBuild(ctx, next, benchNextTag)
	return err
}

// dockerBuild builds dir's Dockerfile as tag and times it.
func dockerBuild(ctx context.Context, dir, tag string) (time.Duration, error) {
	t0 := time.Now()
	cmd := exec.CommandContext(ctx, "docker", "build", "-q", "-t", tag, dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		return 0, fmt.Errorf("docker build %s: %w: %s", dir, err, out)
	}
	return time.Since(t0), nil
}

// opens times CreateWorkspace on the image and on the host runtime, in
// alternation.
func (rep *ImageReport) opens(ctx context.Context, c *client.Client, rounds int, settle time.Duration) error {
	first, err := c.CreateWorkspace(ctx, client.WorkspaceSpec{Project: "bench", Branch: "main", Image: "bench/base:1"})
	if err != nil {
		return err
	}
	if err := first.End(ctx, client.EndOptions{Discard: true}); err != nil {
		return err
	}
	select {
	case <-time.After(settle):
	case <-ctx.Done():
		return ctx.Err()
	}
	for i := range 2 * rounds {
		image := "bench/base:1"
		if i%2 == 1 {
			image = ""
		}
		t0 := time.Now()
		ws, err := c.CreateWorkspace(ctx, client.WorkspaceSpec{Project: "bench", Branch: "main", Image: image})
		d := time.Since(t0)
		if err != nil {
			return err
		}
		if image != "" {
			rep.OpenImage = append(rep.OpenImage, d)
		} else {
			rep.OpenHost = append(rep.OpenHost, d)
		}
		if err := ws.End(ctx, client.EndOptions{Discard: true}); err != nil {
			return err
		}
	}
	return nil
}

const numpyProgram = "import numpy"

// numpy times the first import numpy of a new workspace on the image
// against docker run of the same image, the page cache dropped before
// each, in alternation.
func (rep *ImageReport) numpy(ctx context.Context, c *client.Client, rounds int) error {
	for i := range 2 * rounds {
		if err := dropCaches(); err != nil {
			return err
		}
		t0 := time.Now()
		if (i%2 == 0) == (i/2%2 == 0) {
			cmd := exec.CommandContext(ctx, "docker", "run", "--rm", "--network", "none", benchBaseTag, "python3", "-c", numpyProgram)
			if out, err := cmd.CombinedOutput(); err != nil {
				return fmt.Errorf("docker run: %w: %s", err, out)
			}
			rep.NumpyDocker = append(rep.NumpyDocker, time.Since(t0))
			continue
		}
		ws, err := c.CreateWorkspace(ctx, client.WorkspaceSpec{Project: "bench", Branch: "main", Image: "bench/base:1"})
		if err != nil {
			return err
		}
		r, err := ws.ExecArgv(ctx, []string{"python3", "-c", numpyProgram}, client.ExecOptions{})
		d := time.Since(t0)
		if err == nil && r.ExitCode != 0 {
			err = fmt.Errorf("python3 in the workspace: exit %d: %s", r.ExitCode, r.Stderr)
		}
		if err != nil {
			return errors.Join(err, ws.End(ctx, client.EndOptions{Discard: true}))
		}
		rep.NumpyLayerFS = append(rep.NumpyLayerFS, d)
		rep.NumpyLayerFSExec = append(rep.NumpyLayerFSExec, time.Duration(r.Receipt.WallNs))
		if err := ws.End(ctx, client.EndOptions{Discard: true}); err != nil {
			return err
		}
	}
	return nil
}

// buildFile is the rebuild's five steps on from; the last one's text
// changes with round.
func buildFile(from string, round int) string {
	return fmt.Sprintf("FROM %s\nENV APP_MODE=bench\nWORKDIR /app\nCOPY app.py /app/app.py\n"+
		"RUN python3 -c 'import numpy; print(numpy.__version__)' > /app/numpy-version\nRUN echo round-%d > /app/last\n", from, round)
}

// rebuilds builds the file once with each builder, then times a rebuild
// after each edit of its last step, in alternation.
func (rep *ImageReport) rebuilds(ctx context.Context, c *client.Client, dir string, rounds int) error {
	bctx := filepath.Join(dir, "build")
	if err := os.MkdirAll(bctx, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(bctx, "app.py"), []byte("print('app')\n"), 0o644); err != nil {
		return err
	}
	layerfs := func(round int) (time.Duration, error) {
		t0 := time.Now()
		_, err := c.BuildImage(ctx, wire.ImageBuild{Name: "bench/app:1", File: buildFile("bench/base:1", round), Context: bctx})
		return time.Since(t0), err
	}
	dockerArm := func(round int) (time.Duration, error) {
		if err := os.WriteFile(filepath.Join(bctx, "Dockerfile"), []byte(buildFile(benchBaseTag, round)), 0o644); err != nil {
			return 0, err
		}
		return dockerBuild(ctx, bctx, "layerfs-bench-image-app:latest")
	}
	type arm struct {
		build func(int) (time.Duration, error)
		out   *[]time.Duration
	}
	arms := []arm{{layerfs, &rep.RebuildLayerFS}, {dockerArm, &rep.RebuildDocker}}
	for _, a := range arms { // the first builds, which the rebuilds find cached
		if _, err := a.build(0); err != nil {
			return err
		}
	}
	for i := 1; i <= rounds; i++ {
		if i%2 == 0 {
			arms[0], arms[1] = arms[1], arms[0]
		}
		for _, a := range arms {
			d, err := a.build(i)
			if err != nil {
				return err
			}
			*a.out = append(*a.out, d)
		}
	}
	return nil
}

// WriteTable prints the figures, their medians and ratios against their
// targets.
func (rep *ImageReport) WriteTable(w io.Writer) error {
	ms := func(ds []time.Duration) float64 { return float64(stats.MedianDuration(ds)) / 1e6 }
	b, n := rep.Base.Stats, rep.Second.Stats
	fmt.Fprintf(w, "image import from the Docker engine (request: docker save into a file, then the layers the Store lacks read into it)\n")
	fmt.Fprintf(w, "  base   %s: %d layer(s), %.1f MB read; request %.1f s, of which reading the layers %.1f s; Store growth %.1f MB\n",
		rep.DockerBase, b.Layers, mb(b.Bytes), rep.BaseWall.Seconds(), float64(b.WallNs)/1e9, mb(b.StoreGrowth))
	fmt.Fprintf(w, "  second %s: %d layers, %d read (%.1f MB); request %.1f s, of which reading %.1f s; Store growth %.2f MB for a layer of %.2f MB: ratio %.2f (target <= 1.2)\n",
		rep.DockerNext, n.Layers, n.LayersRead, mb(n.Bytes), rep.SecondWall.Seconds(), float64(n.WallNs)/1e9, mb(n.StoreGrowth), mb(rep.SecondLayerBytes),
		float64(n.StoreGrowth)/float64(max(rep.SecondLayerBytes, 1)))
	if len(rep.OpenImage) > 0 {
		oi, oh := ms(rep.OpenImage), ms(rep.OpenHost)
		fmt.Fprintf(w, "workspace open, p50 of %d, %v after a first workspace on the image: on the image %.2f ms, on the host runtime %.2f ms: %+.2f ms (target <= +1 ms)\n",
			rep.Rounds, rep.Settle, oi, oh, oi-oh)
	}
	if len(rep.NumpyLayerFS) > 0 {
		nl, nd := ms(rep.NumpyLayerFS), ms(rep.NumpyDocker)
		fmt.Fprintf(w, "first python3 -c 'import numpy', page cache dropped (sync; echo 3 > /proc/sys/vm/drop_caches) before each, p50 of %d:\n", rep.Rounds)
		fmt.Fprintf(w, "  new workspace on the image + exec %.0f ms (the exec %.0f ms), docker run --rm %.0f ms: ratio %.2f (target <= 1.2)\n",
			nl, ms(rep.NumpyLayerFSExec), nd, nl/nd)
	}
	if len(rep.RebuildLayerFS) > 0 {
		rl, rd := ms(rep.RebuildLayerFS), ms(rep.RebuildDocker)
		fmt.Fprintf(w, "rebuild of a 5-step build file after an edit of its last step, p50 of %d: layerfs image build %.0f ms, docker build (cached) %.0f ms: ratio %.2f (target <= 1.5)\n",
			rep.Rounds, rl, rd, rl/rd)
	}
	return nil
}

func mb(n int64) float64 { return float64(n) / 1e6 }
