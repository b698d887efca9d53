package main

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/user"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"layerfs.dev/layerfs/client"
	"layerfs.dev/layerfs/internal/platforms"
	"layerfs.dev/layerfs/wire"
)

// The ws verbs drive workspaces through the daemon (auto-started when none
// answers): create, list, status, exec, cp, commit, end, mount.

func wsCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "ws",
		Short: "Workspaces: create, exec, cp, commit, update, fork, end (through the daemon)",
	}
	cmd.AddCommand(
		wsCreateCmd(a), wsListCmd(a), wsStatusCmd(a), wsPathCmd(a), wsExecCmd(a), wsCpCmd(a),
		wsCommitCmd(a), wsUpdateCmd(a), wsResolveCmd(a), wsForkCmd(a), wsEndCmd(a), wsMountCmd(a), wsWatchCmd(a), wsShellCmd(a),
		wsNetworkCmd(a),
		wsRunCmd(a), wsServicesCmd(a), wsLogsCmd(a), wsStopCmd(a), wsWaitCmd(a),
		wsPortCmd(a), wsShareCmd(a), wsSharesCmd(a), wsUnshareCmd(a),
	)
	return cmd
}

// withWorkspace runs fn with workspace id, looked up in the (auto-started)
// daemon.
func (a *app) withWorkspace(cmd *cobra.Command, id string, fn func(ws *client.Workspace) error) error {
	return a.withDaemon(cmd, func(c *client.Client) error {
		ws, err := c.Workspace(cmd.Context(), id)
		if err != nil {
			return err
		}
		return fn(ws)
	})
}

func wsCreateCmd(a *app) *cobra.Command {
	var spec wire.WorkspaceSpec
	var owner string
	var allow []string
	cmd := &cobra.Command{
		Use:   "create PROJECT BRANCH",
		Short: "Create and mount a workspace on a branch head (prints its id and mount path)",
		Long: `Create and mount a workspace on a branch head (prints its id and mount path).

The mount path is the owner's (--owner, default: you): where sandboxes run in a
user namespace, the sandbox's root is the owner there, and what the owner (or
root) creates there is the sandbox root's. Give another user a workspace with
--owner USER and a --path that user can reach.`,
		Args: args(cobra.ExactArgs(2)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			spec.Project, spec.Branch = argv[0], argv[1]
			if owner != "" {
				o, err := parseOwner(owner)
				if err != nil {
					return usageError{fmt.Errorf("--owner %q: %w", owner, err)}
				}
				spec.Owner = &o
			}
			var err error
			if spec.Egress, err = parseRules(allow); err != nil {
				return err
			}
			return a.withDaemon(cmd, func(c *client.Client) error {
				ws, err := c.CreateWorkspace(cmd.Context(), spec)
				if err != nil {
					return err
				}
				info := ws.Info()
				return a.emit(info, func(w io.Writer) {
					fmt.Fprintln(w, "ID\tPATH")
					fmt.Fprintf(w, "%s\t%s\n", info.ID, showPath(info.MountPath))
				})
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&spec.At, "at", "", "mount this ref instead of the branch head (commits still go to the branch)")
	f.StringVar(&spec.MountPath, "path", "", "mount here (absolute path on the daemon's host; default under the store)")
	f.StringVar(&spec.Network, "network", "", "sandbox network: none (default), egress (what --allow allows) or host (the host's, all of it)")
	f.StringArrayVar(&allow, "allow", nil, "with --network egress: DOMAIN, *.DOMAIN or CIDR, each with :PORTS (443 or 8000-8100, comma-separated) or every port; repeat")
	f.StringVar(&spec.Platform, "platform", "", "sandbox platform (default: the daemon's first)")
	f.Int64Var(&spec.QuotaBytes, "quota-bytes", 0, "bound what execs can write to this many bytes (a file system of the workspace's own)")
	f.Int64Var(&spec.QuotaInodes, "quota-inodes", 0, "bound the files execs can create (needs --quota-bytes)")
	f.StringVar(&spec.DataPath, "data-path", "", "overlay (kernel overlayfs over the daemon's FUSE view of the commit) or fuse (default: the daemon's)")
	f.StringVar(&spec.Durability, "durability", "", "commit (writes reach the disk with commits: a host crash can lose what is uncommitted, fsync returns at once) or fsync (as a local disk) (default: the daemon's, commit)")
	f.StringVar(&owner, "owner", "", "the host user the mount path is for: USER, UID or UID:GID (default: you)")
	f.StringVar(&spec.Image, "image", "", "NAME or NAME@DIGEST: the image whose tree is every exec's root, the workspace's own copy-on-write (default: the project's default image, else the platform's runtime)")
	return cmd
}

// parseOwner reads a host user: a name (with its primary group), a uid
// (its user's group, else the same number) or uid:gid.
func parseOwner(s string) (wire.Owner, error) {
	num := func(v string) (uint32, error) {
		n, err := strconv.ParseUint(v, 10, 32)
		return uint32(n), err
	}
	if u, g, ok := strings.Cut(s, ":"); ok {
		uid, err1 := num(u)
		gid, err2 := num(g)
		if err1 != nil || err2 != nil {
			return wire.Owner{}, errors.New("want USER, UID or UID:GID")
		}
		return wire.Owner{UID: uid, GID: gid}, nil
	}
	var (
		usr *user.User
		err error
	)
	if uid, nerr := num(s); nerr == nil {
		if usr, err = user.LookupId(s); err != nil {
			return wire.Owner{UID: uid, GID: uid}, nil
		}
	} else if usr, err = user.Lookup(s); err != nil {
		return wire.Owner{}, err
	}
	uid, err1 := num(usr.Uid)
	gid, err2 := num(usr.Gid)
	if err1 != nil || err2 != nil {
		return wire.Owner{}, fmt.Errorf("user %s has ids %s:%s", s, usr.Uid, usr.Gid)
	}
	return wire.Owner{UID: uid, GID: gid}, nil
}

func wsListCmd(a *app) *cobra.Command {
	var all bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List workspaces",
		Long: `List the daemon's workspaces. On a shared Store, --all lists every host's,
with the host (NODE) that serves each; the other verbs follow a workspace to
its host by themselves.`,
		Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.withDaemon(cmd, func(c *client.Client) error {
				list := c.Workspaces
				if all {
					list = c.FleetWorkspaces
				}
				wss, err := list(cmd.Context())
				if err != nil {
					return err
				}
				if wss == nil {
					wss = []wire.Workspace{}
				}
				return a.emit(wss, func(w io.Writer) {
					head := "ID\tPROJECT\tBRANCH\tHEAD\tSTATE\tPLATFORM\tPATH\tCREATED"
					if all {
						head += "\tNODE\tADDRESS"
					}
					fmt.Fprintln(w, head)
					for _, ws := range wss {
						fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s", ws.ID, ws.Project, ws.Branch, short(ws.Head),
							ws.State, ws.Platform, showPath(ws.MountPath), showTime(ws.Created))
						if all {
							fmt.Fprintf(w, "\t%s\t%s", orDash(ws.Node), orDash(ws.NodeAddress))
						}
						fmt.Fprintln(w)
					}
				})
			})
		},
	}
	cmd.Flags().BoolVar(&all, "all", false, "every host's workspaces on a shared Store, with their host")
	return cmd
}

func short(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// wsPathCmd prints a workspace's mount path alone, for a shell
// (cd "$(layerfs ws path WS)") or an editor: the owner's directory.
func wsPathCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "path WS",
		Short: "Print a workspace's mount path: a directory its owner reads and writes as their own",
		Args:  args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			return a.withWorkspace(cmd, argv[0], func(ws *client.Workspace) error {
				_, err := fmt.Fprintln(cmd.OutOrStdout(), ws.MountPath())
				return err
			})
		},
	}
}

func wsStatusCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "status WS",
		Short: "Show a workspace: changed paths, upper-layer bytes, FUSE requests",
		Args:  args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			return a.withWorkspace(cmd, argv[0], func(ws *client.Workspace) error {
				st, err := ws.Status(cmd.Context())
				if err != nil {
					return err
				}
				return a.emit(st, func(w io.Writer) {
					fmt.Fprintf(w, "workspace\t%s (%s)\n", st.ID, st.State)
					fmt.Fprintf(w, "project\t%s, branch %s\n", st.Project, st.Branch)
					fmt.Fprintf(w, "base\t%s\n", st.Base)
					fmt.Fprintf(w, "head\t%s\n", st.Head)
					fmt.Fprintf(w, "path\t%s\n", showPath(st.MountPath))
					if st.Owner != nil {
						fmt.Fprintf(w, "owner\t%d:%d (a view of the sandboxes' files, data %s)\n", st.Owner.UID, st.Owner.GID, st.HostView)
					}
					fmt.Fprintf(w, "platform\t%s, network %s\n", st.Platform, st.Network)
					for _, r := range st.Egress {
						fmt.Fprintf(w, "allow\t%s\n", ruleString(r))
					}
					if st.Image != "" {
						fmt.Fprintf(w, "image\t%s\n", st.Image)
					}
					if st.DataPath != "" {
						fmt.Fprintf(w, "data path\t%s\n", st.DataPath)
						fmt.Fprintf(w, "durability\t%s\n", st.Durability)
					}
					fmt.Fprintf(w, "upper layer\t%s\n", showBytes(st.UpperBytes))
					fmt.Fprintf(w, "fuse requests\t%d (%s in the daemon)\n", st.FUSE.Requests, time.Duration(st.FUSE.ServiceNs))
					fmt.Fprintf(w, "changes\t%d\n", len(st.Changes))
					for _, ch := range st.Changes {
						fmt.Fprintf(w, "  %s\t%s\n", ch.Kind, showPath(ch.Path))
					}
					if len(st.Conflicts) > 0 {
						fmt.Fprintf(w, "conflicts\t%d (resolve them before a commit: edit the markers away, or ws resolve)\n", len(st.Conflicts))
						for _, c := range st.Conflicts {
							fmt.Fprintf(w, "  %s\t%s\n", c.Kind, showPath(c.Path))
						}
					}
				})
			})
		},
	}
}

func wsCommitCmd(a *app) *cobra.Command {
	var req wire.CommitRequest
	cmd := &cobra.Command{
		Use:   "commit WS",
		Short: "Commit a workspace's changes to its branch (the workspace stays mounted)",
		Args:  args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			return a.withWorkspace(cmd, argv[0], func(ws *client.Workspace) error {
				res, err := ws.CommitWith(cmd.Context(), req)
				if err != nil {
					if client.IsHeadMoved(err) {
						return fmt.Errorf("%w (nothing is lost: the workspace keeps its changes)", err)
					}
					return a.conflicts(err)
				}
				return a.emit(res, func(w io.Writer) {
					fmt.Fprintln(w, "COMMIT\tRESULT\tHEAD")
					fmt.Fprintf(w, "%s\t%s\t%s\n", res.Commit, res.Result, res.Head)
					if res.Result == wire.HeadMoved {
						fmt.Fprintln(w, "(the branch moved on: the commit is stored but not on it, and the workspace keeps its changes; ws commit --merge merges them in)")
					}
				})
			})
		},
	}
	cmd.Flags().StringVarP(&req.Message, "message", "m", "", "commit message")
	cmd.Flags().StringVar(&req.Author, "author", "", "commit author (default: the daemon's)")
	cmd.Flags().BoolVar(&req.Merge, "merge", false, "when the branch head moved, merge with it and publish the merge (conflicts: exit code 11, nothing published)")
	return cmd
}

func wsEndCmd(a *app) *cobra.Command {
	var opts client.EndOptions
	cmd := &cobra.Command{
		Use:   "end WS",
		Short: "Unmount a workspace and remove it (refuses uncommitted changes without --discard)",
		Args:  args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			return a.withWorkspace(cmd, argv[0], func(ws *client.Workspace) error {
				if err := ws.End(cmd.Context(), opts); err != nil {
					if client.IsUncommitted(err) {
						return fmt.Errorf("%w (commit them, or end with --discard)", err)
					}
					return err
				}
				if a.json {
					return a.emit(map[string]any{"id": argv[0], "ended": true, "discarded": opts.Discard}, nil)
				}
				fmt.Fprintf(a.stdout, "ended %s\n", argv[0])
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&opts.Discard, "discard", false, "drop uncommitted changes")
	return cmd
}

func wsMountCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "mount WS",
		Short: "Mount a workspace again (after a crash left it unmounted)",
		Args:  args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			return a.withWorkspace(cmd, argv[0], func(ws *client.Workspace) error {
				if err := ws.Mount(cmd.Context()); err != nil {
					return err
				}
				info := ws.Info()
				return a.emit(info, func(w io.Writer) {
					fmt.Fprintln(w, "ID\tSTATE\tPATH")
					fmt.Fprintf(w, "%s\t%s\t%s\n", info.ID, info.State, showPath(info.MountPath))
				})
			})
		},
	}
}

func wsExecCmd(a *app) *cobra.Command {
	var (
		body    string
		opts    client.ExecOptions
		stdin   bool
		timeout time.Duration
		cpus    float64
	)
	cmd := &cobra.Command{
		Use:   "exec WS (-c BODY | -- CMD [ARGS...])",
		Short: "Run a command in a fresh sandbox on the workspace; its exit code becomes this command's",
		Long: `Run a command in a fresh sandbox with the workspace at /workspace.
  layerfs ws exec WS -- CMD [ARGS...]   runs CMD with ARGS exactly as given (no shell)
  layerfs ws exec WS -c 'BODY'          runs BODY with bash -o pipefail -c
Output streams as the command writes it (with --json it is collected into one
JSON result instead). The command's exit code becomes layerfs's.`,
		Args: func(cmd *cobra.Command, argv []string) error {
			dash := cmd.ArgsLenAtDash()
			switch {
			case len(argv) == 0:
				return usageError{errors.New("ws exec: name a workspace")}
			case body != "" && len(argv) > 1:
				return usageError{errors.New("ws exec: give -c BODY or -- CMD [ARGS...], not both")}
			case body == "" && (dash != 1 || len(argv) < 2):
				return usageError{errors.New("ws exec: give -c BODY or -- CMD [ARGS...] after the workspace")}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, argv []string) error {
			opts.Timeout = timeout
			if cpus < 0 {
				return usageError{errors.New("ws exec: --cpus must not be negative")}
			}
			opts.MilliCPUs = int(math.Ceil(cpus * 1000))
			var code int
			err := a.withWorkspace(cmd, argv[0], func(ws *client.Workspace) error {
				if !a.json {
					opts.Stdout, opts.Stderr = a.stdout, a.stderr
				}
				var (
					res *client.ExecResult
					err error
				)
				switch {
				case stdin:
					res, err = execStreamingStdin(cmd, ws, body, argv[1:], opts)
				case body != "":
					res, err = ws.Exec(cmd.Context(), body, opts)
				default:
					res, err = ws.ExecArgv(cmd.Context(), argv[1:], opts)
				}
				if err != nil {
					return err
				}
				code = res.ExitCode
				if a.json {
					return a.emit(res, nil)
				}
				switch {
				case res.TimedOut:
					fmt.Fprintf(a.stderr, "layerfs: the command timed out after %s\n", timeout)
				case res.Signal != "":
					fmt.Fprintf(a.stderr, "layerfs: the command was killed by %s\n", res.Signal)
				}
				if res.OutputTruncated {
					fmt.Fprintln(a.stderr, "layerfs: output was truncated at the exec's output limit")
				}
				return nil
			})
			if err != nil {
				return err
			}
			if code != 0 {
				return exitError{code}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVarP(&body, "command", "c", "", "run BODY with bash -o pipefail -c")
	f.DurationVar(&timeout, "timeout", 0, "kill the command after this long (default: the daemon's)")
	f.StringArrayVarP(&opts.Env, "env", "e", nil, "set NAME=VALUE in the command's environment (repeatable)")
	f.StringVarP(&opts.Dir, "workdir", "w", "", "working directory relative to /workspace")
	f.BoolVarP(&stdin, "interactive", "i", false, "stream this command's standard input to the command as it comes")
	f.Int64Var(&opts.OutputLimit, "output-limit", 0, "cap each output stream at this many bytes (default: the daemon's)")
	f.Int64Var(&opts.MemoryBytes, "memory", 0, "limit the command's memory to this many bytes")
	f.IntVar(&opts.Pids, "pids", 0, "limit the command's processes and threads (default: the platform's, 1024)")
	f.Float64Var(&cpus, "cpus", 0, "limit the command's CPU time to this many CPUs (0.5: half a CPU)")
	f.IntVar(&opts.OpenFiles, "open-files", 0, "limit the command's open files (RLIMIT_NOFILE)")
	return cmd
}

// wsRef matches WS:PATH (a workspace id, a colon, a path).
var wsRef = regexp.MustCompile(`^([a-z0-9][a-z0-9-]*):(.*)$`)

func splitRef(s string) (id, p string, ok bool) {
	m := wsRef.FindStringSubmatch(s)
	if m == nil {
		return "", "", false
	}
	if m[2] == "" {
		m[2] = "."
	}
	return m[1], m[2], true
}

func wsCpCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "cp SRC DST",
		Short: "Copy files or directories between this host and a workspace (one side WS:PATH)",
		Long: `Copy a file or a directory tree into or out of a workspace, like cp -r:
  layerfs ws cp ./src WS:app        upload (a directory's contents go into app/)
  layerfs ws cp WS:out/report.txt . download (into an existing directory, under the base name)
Workspace paths are relative to the workspace root; WS: alone is the root, and
a leading / names it too (WS:/src/a.go is WS:src/a.go, as in docker cp);
".." never leads above it.
A local path containing a colon can be written as ./name:with:colons.`,
		Args: args(cobra.ExactArgs(2)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			srcID, srcPath, srcWS := splitRef(argv[0])
			dstID, dstPath, dstWS := splitRef(argv[1])
			switch {
			case srcWS && dstWS:
				return usageError{errors.New("ws cp: copy between two workspaces by way of a local directory")}
			case !srcWS && !dstWS:
				return usageError{errors.New("ws cp: one side must be WS:PATH")}
			}
			id := dstID
			if srcWS {
				id = srcID
			}
			return a.withWorkspace(cmd, id, func(ws *client.Workspace) error {
				ctx := cmd.Context()
				if srcWS {
					return ws.Download(ctx, srcPath, argv[1])
				}
				// Checked before any joining: path.Join would quietly
				// drop a ".." above the root.
				clean, err := wire.WorkspacePath(dstPath)
				if err != nil {
					return usageError{fmt.Errorf("ws cp: workspace path %q: %w", dstPath, err)}
				}
				// A file copied to a directory (the root, or a path ending
				// in "/") keeps its name, as cp does.
				if fi, err := os.Stat(argv[0]); err == nil && !fi.IsDir() && (clean == "." || strings.HasSuffix(dstPath, "/")) {
					clean = path.Join(clean, filepath.Base(argv[0]))
				}
				return ws.Upload(ctx, argv[0], clean)
			})
		},
	}
}

// execStreamingStdin runs the exec attached, this process's standard input
// streamed to it as it comes (a command can answer before the input ends).
func execStreamingStdin(cmd *cobra.Command, ws *client.Workspace, body string, argv []string, opts client.ExecOptions) (*client.ExecResult, error) {
	if body != "" {
		argv = platforms.ShellArgv(body)
	}
	att, err := ws.Attach(cmd.Context(), argv, client.AttachOptions{ExecOptions: opts})
	if err != nil {
		return nil, err
	}
	defer att.Close()
	go func() {
		// Ends when the command does (Write fails) or the input ends.
		if _, err := io.Copy(att, os.Stdin); err == nil {
			_ = att.CloseStdin()
		}
	}()
	return att.Wait()
}
