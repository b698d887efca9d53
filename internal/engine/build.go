package engine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"layerfs.dev/layerfs/internal/commit"
	"layerfs.dev/layerfs/internal/dockerfile"
	"layerfs.dev/layerfs/internal/image"
	"layerfs.dev/layerfs/internal/platforms"
	"layerfs.dev/layerfs/internal/store"
	"layerfs.dev/layerfs/wire"
	"layerfs.dev/layerfs/wire/errclass"
)

// ErrBuildStep is wrapped when a build's step fails (a RUN that exits
// non-zero, a COPY of nothing): the build is refused, the steps before it
// stay cached.
var ErrBuildStep = errclass.New(errclass.Invalid, "build step failed")

// build is one BuildImage: the image so far, the build's arguments and
// where its files come from.
type build struct {
	e       *Engine
	f       *dockerfile.File
	b       *image.Builder
	req     wire.ImageBuild
	context string            // the build context on this host ("": none)
	args    map[string]string // --build-arg values
	argEnv  []string          // the ARGs declared so far, NAME=VALUE
	steps   []wire.BuildStep
	stats   image.Stats
}

// BuildImage builds req.File, a Dockerfile's text (dockerfile.Supported
// instructions), into the image req.Name. Each RUN runs in a sandbox of
// req.Platform whose root is the image so far (its own copy-on-write, as
// a workspace's) and whose /workspace is an empty directory; its root's
// changes become the image's next layer. Each step that makes a layer is
// cached by its inputs (the image so far, the instruction, its
// environment, user and directory, the content of what COPY copies): a
// rebuild runs again only the steps from the first one that changed.
func (e *Engine) BuildImage(ctx context.Context, req wire.ImageBuild) (wire.ImageResult, error) {
	t0 := time.Now()
	if err := e.checkOpen(); err != nil {
		return wire.ImageResult{}, err
	}
	if err := store.ValidImageName(req.Name); err != nil {
		return wire.ImageResult{}, fmt.Errorf("%w: name: %w", errclass.Invalid, err)
	}
	f, err := dockerfile.Parse(strings.NewReader(req.File))
	if err != nil {
		return wire.ImageResult{}, err
	}
	bd := &build{e: e, f: f, req: req, args: map[string]string{}}
	for _, kv := range req.Args {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return wire.ImageResult{}, fmt.Errorf("%w: build arg %q is not NAME=VALUE", errclass.Invalid, kv)
		}
		bd.args[k] = v
	}
	if req.Context != "" {
		if bd.context, err = hostDir(req.Context, "context"); err != nil {
			return wire.ImageResult{}, err
		}
	}
	if req.Platform == "" {
		bd.req.Platform = e.defaultPlat
	}
	if _, ok := e.plats[bd.req.Platform]; !ok {
		return wire.ImageResult{}, fmt.Errorf("%w: unknown platform %q (this daemon has %v)", errclass.Invalid, req.Platform, e.Platforms())
	}
	if req.Network != "" && req.Network != wire.NetworkNone && req.Network != wire.NetworkHost {
		return wire.ImageResult{}, fmt.Errorf("%w: network %q: want %q or %q", errclass.Invalid, req.Network, wire.NetworkNone, wire.NetworkHost)
	}
	for _, in := range f.Args {
		if err := bd.arg(in); err != nil {
			return wire.ImageResult{}, err
		}
	}
	for _, in := range f.Instructions {
		st := time.Now()
		step := wire.BuildStep{Instruction: in.Original}
		cached, err := bd.step(ctx, in, &step)
		step.Cached, step.WallNs = cached, time.Since(st).Nanoseconds()
		bd.steps = append(bd.steps, step)
		if err != nil {
			return wire.ImageResult{Steps: bd.steps}, fmt.Errorf("line %d: %s: %w", in.Line, in.Cmd, err)
		}
	}
	img, err := bd.b.Name(ctx, req.Name, "build:"+bd.context)
	if err != nil {
		return wire.ImageResult{Steps: bd.steps}, classify(err)
	}
	bd.stats.Layers, bd.stats.WallNs = len(bd.b.Layers), time.Since(t0).Nanoseconds()
	res, err := e.imageResult(ctx, img, bd.stats)
	res.Steps = bd.steps
	e.log.Info("image built", "name", img.Name, "digest", img.Digest, "steps", len(bd.steps), "ms", bd.stats.WallNs/1e6)
	return res, err
}

// env is what instructions expand their words with: the ARGs declared,
// then the image's Env (which wins over an ARG of the same name).
func (bd *build) env() []string {
	if bd.b == nil {
		return bd.argEnv
	}
	return mergeEnv(bd.argEnv, bd.b.Config.Config.Env)
}

func (bd *build) expand(word string) (string, error) { return bd.f.Expand(word, bd.env()) }

// arg declares an ARG: its value is the build's, else its default.
func (bd *build) arg(in dockerfile.Instruction) error {
	for _, a := range in.Args {
		name, def, hasDef := strings.Cut(a, "=")
		v, given := bd.args[name]
		if !given && hasDef {
			var err error
			if v, err = bd.expand(def); err != nil {
				return err
			}
		}
		bd.argEnv = mergeEnv(bd.argEnv, []string{name + "=" + v})
	}
	return nil
}

// step applies one instruction; it reports whether a cached layer served.
func (bd *build) step(ctx context.Context, in dockerfile.Instruction, step *wire.BuildStep) (bool, error) {
	switch in.Cmd {
	case "FROM":
		return false, bd.from(ctx, in)
	case "ARG":
		return false, bd.arg(in)
	case "RUN":
		return bd.run(ctx, in, step)
	case "COPY", "ADD":
		return bd.copy(ctx, in)
	case "WORKDIR":
		return bd.workdir(ctx, in)
	}
	bd.b.Note(in.Original)
	return false, bd.config(in)
}

// from starts the image: an image of the Store, or scratch.
func (bd *build) from(ctx context.Context, in dockerfile.Instruction) error {
	ref, err := bd.expand(in.Args[0])
	if err != nil {
		return err
	}
	var base *store.Image
	if ref != "scratch" {
		img, err := bd.e.findImage(ctx, ref)
		if err != nil {
			return err
		}
		base = &img
	}
	bd.b, err = image.NewBuilder(ctx, bd.e.db, base)
	return err
}

// config applies an instruction that changes only the image's config.
func (bd *build) config(in dockerfile.Instruction) error {
	c := &bd.b.Config.Config
	words := func() ([]string, error) {
		if in.JSON {
			return in.Args, nil
		}
		return []string{"/bin/sh", "-c", strings.Join(in.Args, " ")}, nil
	}
	var err error
	switch in.Cmd {
	case "ENV":
		for i := 0; i+1 < len(in.Args); i += 2 {
			v, err := bd.expand(in.Args[i+1])
			if err != nil {
				return err
			}
			c.Env = mergeEnv(c.Env, []string{in.Args[i] + "=" + v})
		}
	case "LABEL":
		if c.Labels == nil {
			c.Labels = map[string]string{}
		}
		for i := 0; i+1 < len(in.Args); i += 2 {
			if c.Labels[in.Args[i]], err = bd.expand(in.Args[i+1]); err != nil {
				return err
			}
		}
	case "USER":
		c.User, err = bd.expand(in.Args[0])
	case "EXPOSE":
		if c.ExposedPorts == nil {
			c.ExposedPorts = map[string]struct{}{}
		}
		for _, p := range in.Args {
			if p, err = bd.expand(p); err != nil {
				return err
			}
			if !strings.Contains(p, "/") {
				p += "/tcp"
			}
			c.ExposedPorts[p] = struct{}{}
		}
	case "CMD":
		c.Cmd, err = words()
	case "ENTRYPOINT":
		c.Entrypoint, err = words()
	}
	return err
}

// workdir sets the working directory, making it when the image lacks it.
func (bd *build) workdir(ctx context.Context, in dockerfile.Instruction) (bool, error) {
	d, err := bd.expand(in.Args[0])
	if err != nil {
		return false, err
	}
	if !path.IsAbs(d) {
		d = path.Join(bd.dir(), d)
	}
	d = path.Clean(d)
	bd.b.Config.Config.WorkingDir = d
	changes, err := image.MissingDirs(ctx, bd.e.db, bd.b.Root(), strings.TrimPrefix(d, "/"), 0, 0)
	if err != nil || len(changes) == 0 {
		bd.b.Note(in.Original)
		return false, err
	}
	return bd.layer(ctx, bd.key("WORKDIR", d), in.Original, changes)
}

// dir is the working directory of the image so far.
func (bd *build) dir() string {
	if d := bd.b.Config.Config.WorkingDir; d != "" {
		return d
	}
	return "/"
}

// key names a step's derivation: the image so far and the step's inputs.
func (bd *build) key(parts ...string) string {
	h := sha256.New()
	b, _ := json.Marshal(append([]string{bd.b.Commit.String()}, parts...))
	h.Write(b)
	return "build:" + hex.EncodeToString(h.Sum(nil))
}

// layer makes changes the image's next layer under key, or reuses the
// layer key made before.
func (bd *build) layer(ctx context.Context, key, createdBy string, changes []commit.Change) (bool, error) {
	if !bd.req.NoCache {
		if ok, err := bd.b.Reuse(ctx, key, createdBy); err != nil || ok {
			return ok, err
		}
	}
	st, err := bd.b.AddLayer(ctx, key, createdBy, changes)
	if err != nil {
		return false, classify(err)
	}
	bd.addStats(st)
	return false, bd.e.db.PutDerivations(ctx, map[string]store.ID{key: bd.b.Commit})
}

func (bd *build) addStats(st image.Stats) {
	bd.stats.LayersRead++
	bd.stats.Bytes += st.Bytes
	bd.stats.NewChunks += st.NewChunks
	bd.stats.NewBytes += st.NewBytes
	bd.stats.StoreGrowth += st.StoreGrowth
}

// run runs a RUN in a sandbox on the image so far, unless its layer is
// cached.
func (bd *build) run(ctx context.Context, in dockerfile.Instruction, step *wire.BuildStep) (bool, error) {
	argv := in.Args
	if !in.JSON {
		argv = []string{"/bin/sh", "-c", strings.Join(in.Args, " ")}
	}
	env := bd.env()
	c := bd.b.Config.Config
	key := bd.key(append(append([]string{"RUN", c.User, bd.dir()}, argv...), env...)...)
	if !bd.req.NoCache {
		if ok, err := bd.b.Reuse(ctx, key, in.Original); err != nil || ok {
			return ok, err
		}
	}
	u, err := image.ResolveUser(ctx, bd.e.db, bd.b.Root(), c.User)
	if err != nil {
		return false, err
	}
	if u.Home != "" && !slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, "HOME=") }) {
		env = append(env, "HOME="+u.Home)
	}
	spec, err := platforms.ExecSpec{Argv: argv, Env: env, RootWorkdir: bd.dir(), UID: u.UID, GID: u.GID}.Normalize()
	if err != nil {
		return false, err
	}
	err = bd.e.runInRoot(ctx, bd.req, bd.b.Root(), spec, step, func(changes []commit.Change) error {
		st, err := bd.b.AddLayer(ctx, key, in.Original, changes)
		bd.addStats(st)
		return classify(err)
	})
	if err != nil {
		return false, err
	}
	return false, bd.e.db.PutDerivations(ctx, map[string]store.ID{key: bd.b.Commit})
}

// tail keeps the last bytes written to it.
type tail struct{ b []byte }

const tailBytes = 4 << 10

func (t *tail) Write(p []byte) (int, error) {
	t.b = append(t.b, p...)
	if len(t.b) > tailBytes {
		t.b = append(t.b[:0], t.b[len(t.b)-tailBytes:]...)
	}
	return len(p), nil
}

// runInRoot runs spec in a sandbox whose root is the tree root (its own
// copy-on-write, as a workspace's) and whose /workspace an empty
// directory, and hands the root's changes to capture while their sources
// (the root's upper) are there. A non-zero exit fails the step.
func (e *Engine) runInRoot(ctx context.Context, req wire.ImageBuild, root store.ID, spec platforms.ExecSpec,
	step *wire.BuildStep, capture func([]commit.Change) error) error {
	id := "build-" + strings.TrimPrefix(newID(), "ws-")
	dir := e.workspaceDir(id)
	w := &workspace{rec: store.Workspace{ID: id, MountPath: filepath.Join(dir, "native")},
		opts: wsOptions{Platform: req.Platform, Network: req.Network, Native: true, Durability: wire.DurabilityCommit,
			Image: &rootImage{Name: "build", Root: root}}}
	if w.opts.Network == "" {
		w.opts.Network = wire.NetworkNone
	}
	defer os.RemoveAll(dir)
	if err := e.serve(ctx, w, true); err != nil {
		return err
	}
	defer e.unserve(context.WithoutCancel(ctx), w)
	var out tail
	r, err := w.sb.Exec(ctx, spec, &out, &out)
	step.ExitCode, step.Output = r.ExitCode, string(out.b)
	if err != nil {
		return err
	}
	if r.ExitCode != 0 || r.TimedOut {
		why := fmt.Sprintf("exit code %d", r.ExitCode)
		if r.TimedOut {
			why = "timed out"
		}
		return fmt.Errorf("%w: %s: %s", ErrBuildStep, why, strings.TrimSpace(string(out.b)))
	}
	cs, err := w.root.Changes(ctx)
	if err != nil {
		return fmt.Errorf("changes of the build's root: %w", err)
	}
	return capture(rootChanges(cs.Changes))
}
