package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"layerfs.dev/layerfs/client"
	"layerfs.dev/layerfs/wire"
)

func imageCmd(a *app) *cobra.Command {
	c := &cobra.Command{Use: "image", Short: "Import, pull, build, list and push container images kept in the Store"}
	c.AddCommand(imageImportCmd(a), imagePullCmd(a), imagePushCmd(a), imageListCmd(a), imageInspectCmd(a),
		imageRemoveCmd(a), imageCommitCmd(a), imageBuildCmd(a), imageDefaultCmd(a))
	return c
}

// importKind tells what SOURCE is when --kind is auto: docker:REF is the
// Docker engine's image REF; a directory holding oci-layout is an OCI
// layout, another directory a plain one; a file is an archive.
func importKind(source string) (kind, src string, err error) {
	if ref, ok := strings.CutPrefix(source, "docker:"); ok {
		return wire.ImageFromDocker, ref, nil
	}
	abs, err := filepath.Abs(source)
	if err != nil {
		return "", "", err
	}
	st, err := os.Stat(abs)
	if err != nil {
		return "", "", usageError{fmt.Errorf("image import: source %q: %w (give a directory, an archive, docker:REF, or --kind)", source, err)}
	}
	if !st.IsDir() {
		return wire.ImageFromArchive, abs, nil
	}
	if _, err := os.Stat(filepath.Join(abs, "oci-layout")); err == nil {
		return wire.ImageFromLayout, abs, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", "", err
	}
	return wire.ImageFromDir, abs, nil
}

func imageImportCmd(a *app) *cobra.Command {
	var kind string
	var insecure bool
	c := &cobra.Command{
		Use:   "import NAME SOURCE",
		Short: "Store an image as NAME: from an OCI layout, a docker save or OCI archive, docker:REF (the Docker engine's), a registry or a directory",
		Long: `Store the image at SOURCE as NAME (a reference such as team/env:3.12). Each
layer becomes a commit on the one below, so images on one base share its
commits and chunks; only the layers the Store lacks are read. SOURCE is, by
--kind (auto by default): a directory holding an OCI layout (oci-layout), a
docker save or OCI archive file (archive), docker:REF for an image of the
Docker engine the daemon reaches (docker), a registry reference (registry;
see image pull), or a plain directory as one layer (dir). Paths are on the
daemon's host. A bad layer is refused whole and names nothing.`,
		Args: args(cobra.ExactArgs(2)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			req := wire.ImageImport{Name: argv[0], Kind: kind, Source: argv[1], Insecure: insecure}
			if kind == "auto" {
				var err error
				if req.Kind, req.Source, err = importKind(argv[1]); err != nil {
					return err
				}
			} else if kind != wire.ImageFromDocker && kind != wire.ImageFromRegistry {
				abs, err := filepath.Abs(argv[1])
				if err != nil {
					return err
				}
				req.Source = abs
			}
			return a.withStore(cmd, func(c *client.Client) error {
				res, err := c.ImportImage(cmd.Context(), req)
				if err != nil {
					return err
				}
				return a.emit(res, func(w io.Writer) { showImageResult(w, "imported", res) })
			})
		},
	}
	c.Flags().StringVar(&kind, "kind", "auto", "oci-layout, archive, docker, registry, dir, or auto")
	c.Flags().BoolVar(&insecure, "insecure", false, "reach a registry over plain HTTP (one on localhost always may)")
	return c
}

func imagePullCmd(a *app) *cobra.Command {
	var name string
	var insecure bool
	c := &cobra.Command{
		Use:   "pull REF",
		Short: "Store a registry's image REF (as --name, default REF); credentials from the Docker config of the daemon's user and its helpers",
		Args:  args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			if name == "" {
				name = argv[0]
			}
			return a.withStore(cmd, func(c *client.Client) error {
				res, err := c.ImportImage(cmd.Context(), wire.ImageImport{Name: name, Kind: wire.ImageFromRegistry, Source: argv[0], Insecure: insecure})
				if err != nil {
					return err
				}
				return a.emit(res, func(w io.Writer) { showImageResult(w, "pulled", res) })
			})
		},
	}
	c.Flags().StringVar(&name, "name", "", "store it under this name (default: REF)")
	c.Flags().BoolVar(&insecure, "insecure", false, "reach the registry over plain HTTP (one on localhost always may)")
	return c
}

func imagePushCmd(a *app) *cobra.Command {
	var insecure bool
	c := &cobra.Command{
		Use:   "push NAME REF",
		Short: "Write the image NAME to a registry as REF, its layers from the Store",
		Args:  args(cobra.ExactArgs(2)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			return a.withStore(cmd, func(c *client.Client) error {
				res, err := c.PushImage(cmd.Context(), wire.ImagePush{Name: argv[0], Ref: argv[1], Insecure: insecure})
				if err != nil {
					return err
				}
				return a.emit(res, func(w io.Writer) {
					fmt.Fprintf(w, "pushed %s as %s (%d layers, %s)\n", res.Image.Name, res.Pushed, len(res.Image.Layers), time.Duration(res.Stats.WallNs).Round(time.Millisecond))
				})
			})
		},
	}
	c.Flags().BoolVar(&insecure, "insecure", false, "reach the registry over plain HTTP (one on localhost always may)")
	return c
}

func imageListCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List the Store's images",
		Args:    args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.withStore(cmd, func(c *client.Client) error {
				imgs, err := c.Images(cmd.Context())
				if err != nil {
					return err
				}
				return a.emit(nonNil(imgs), func(w io.Writer) {
					fmt.Fprintln(w, "NAME\tDIGEST\tLAYERS\tSIZE\tCREATED")
					for _, img := range imgs {
						fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%s\n", img.Name, shortDigest(img.Digest), len(img.Layers), showBytes(img.Bytes), showTime(img.Created))
					}
				})
			})
		},
	}
}

func imageInspectCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "inspect NAME[@DIGEST]",
		Short: "Show an image: digest, layers (diff IDs, commits), config",
		Args:  args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			return a.withStore(cmd, func(c *client.Client) error {
				img, err := c.Image(cmd.Context(), argv[0])
				if err != nil {
					return err
				}
				return a.emit(img, func(w io.Writer) { showImage(w, img) })
			})
		},
	}
}

func imageRemoveCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:     "rm NAME",
		Aliases: []string{"remove"},
		Short:   "Remove an image's name (gc collects what nothing else uses; workspaces on it keep their root)",
		Args:    args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			return a.withStore(cmd, func(c *client.Client) error {
				if err := c.RemoveImage(cmd.Context(), argv[0]); err != nil {
					return err
				}
				return a.emit(map[string]string{"removed": argv[0]}, func(w io.Writer) { fmt.Fprintf(w, "removed image %s\n", argv[0]) })
			})
		},
	}
}

func imageCommitCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "commit WS NAME",
		Short: "Make the changes WS's execs made to its root a new image NAME (its image plus one layer), as docker commit",
		Args:  args(cobra.ExactArgs(2)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			return a.withWorkspace(cmd, argv[0], func(ws *client.Workspace) error {
				res, err := ws.CommitImage(cmd.Context(), argv[1])
				if err != nil {
					return err
				}
				return a.emit(res, func(w io.Writer) { showImageResult(w, "committed", res) })
			})
		},
	}
}

func imageDefaultCmd(a *app) *cobra.Command {
	var none bool
	c := &cobra.Command{
		Use:   "default PROJECT [NAME[@DIGEST]]",
		Short: "Show or set the image a project's workspaces get when they name none (--none: no default)",
		Args:  args(cobra.RangeArgs(1, 2)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			return a.withStore(cmd, func(c *client.Client) error {
				var p wire.Project
				var err error
				switch {
				case len(argv) == 2 && none:
					return usageError{fmt.Errorf("image default: give NAME or --none, not both")}
				case len(argv) == 2 || none:
					img := ""
					if !none {
						img = argv[1]
					}
					p, err = c.SetProjectImage(cmd.Context(), argv[0], img)
				default:
					p, err = c.Project(cmd.Context(), argv[0])
				}
				if err != nil {
					return err
				}
				return a.emit(p, func(w io.Writer) {
					img := p.Image
					if img == "" {
						img = "(none: the platform's runtime)"
					}
					fmt.Fprintf(w, "%s\t%s\n", p.Name, img)
				})
			})
		},
	}
	c.Flags().BoolVar(&none, "none", false, "remove the project's default image")
	return c
}

func shortDigest(d string) string {
	if algo, h, ok := strings.Cut(d, ":"); ok && len(h) > 12 {
		return algo + ":" + h[:12]
	}
	return d
}

func showImageResult(w io.Writer, verb string, res wire.ImageResult) {
	st := res.Stats
	fmt.Fprintf(w, "%s %s %s: %d layers (%d read, %s), %s new in the Store, %s\n", verb, res.Image.Name, res.Image.Digest,
		st.Layers, st.LayersRead, showBytes(st.Bytes), showBytes(st.StoreGrowth), time.Duration(st.WallNs).Round(time.Millisecond))
	for _, s := range res.Steps {
		how := time.Duration(s.WallNs).Round(time.Millisecond).String()
		if s.Cached {
			how = "cached"
		}
		fmt.Fprintf(w, "  %s\t%s\n", s.Instruction, how)
	}
}

func showImage(w io.Writer, img wire.Image) {
	fmt.Fprintf(w, "name\t%s\n", img.Name)
	fmt.Fprintf(w, "digest\t%s\n", img.Digest)
	if img.ManifestDigest != "" {
		fmt.Fprintf(w, "manifest\t%s\n", img.ManifestDigest)
	}
	fmt.Fprintf(w, "commit\t%s\n", img.Commit)
	fmt.Fprintf(w, "source\t%s\n", img.Source)
	fmt.Fprintf(w, "files\t%d (%s)\n", img.Files, showBytes(img.Bytes))
	cfg := img.Config
	fmt.Fprintf(w, "user\t%s\n", cfg.User)
	fmt.Fprintf(w, "working dir\t%s\n", cfg.WorkingDir)
	for _, e := range cfg.Env {
		fmt.Fprintf(w, "env\t%s\n", e)
	}
	if len(cfg.Entrypoint)+len(cfg.Cmd) > 0 {
		fmt.Fprintf(w, "entrypoint\t%q\ncmd\t%q\n", cfg.Entrypoint, cfg.Cmd)
	}
	fmt.Fprintf(w, "layers\t%d\n", len(img.Layers))
	for _, l := range img.Layers {
		fmt.Fprintf(w, "  %s\tcommit %s\t%s\n", l.DiffID, short(l.Commit), showBytes(l.Size))
	}
}

func imageBuildCmd(a *app) *cobra.Command {
	var req wire.ImageBuild
	var file string
	c := &cobra.Command{
		Use:   "build NAME -f FILE [CONTEXT]",
		Short: "Build the image NAME from a build file (Dockerfile format) with CONTEXT (default .); each RUN in a LayerFS sandbox, steps cached",
		Long: `Build the image NAME from FILE with the directory CONTEXT (default: the
current directory; it must be on the daemon's host). Supported: FROM (an
image of the Store, or scratch; one stage), RUN, COPY and ADD of files of
the context (--chown, --chmod), ENV, ARG (--build-arg), WORKDIR, USER,
LABEL, EXPOSE, CMD and ENTRYPOINT. Each RUN runs in a sandbox whose root is
the image so far; steps are cached by their inputs, so a rebuild after an
edit of the last step runs only that step. Refused, naming the instruction
and its line: a second FROM, COPY --from, ADD of a URL or of a local
archive, RUN --mount and --network, heredocs, HEALTHCHECK, VOLUME, ONBUILD,
STOPSIGNAL, SHELL and MAINTAINER.`,
		Args: args(cobra.RangeArgs(1, 2)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			if file == "" {
				return usageError{fmt.Errorf("image build: -f FILE is required")}
			}
			b, err := os.ReadFile(file)
			if err != nil {
				return usageError{fmt.Errorf("image build: %w", err)}
			}
			dir := "."
			if len(argv) == 2 {
				dir = argv[1]
			}
			if req.Context, err = filepath.Abs(dir); err != nil {
				return err
			}
			req.Name, req.File = argv[0], string(b)
			return a.withStore(cmd, func(c *client.Client) error {
				res, err := c.BuildImage(cmd.Context(), req)
				if err != nil {
					return err
				}
				return a.emit(res, func(w io.Writer) { showImageResult(w, "built", res) })
			})
		},
	}
	f := c.Flags()
	f.StringVarP(&file, "file", "f", "", "the build file")
	f.StringArrayVar(&req.Args, "build-arg", nil, "NAME=VALUE for an ARG (repeatable)")
	f.StringVar(&req.Platform, "platform", "", "run the RUN steps on this sandbox platform (default: the daemon's first)")
	f.StringVar(&req.Network, "network", "", "RUN steps' network: none (default) or host")
	f.BoolVar(&req.NoCache, "no-cache", false, "run every step again")
	return c
}
