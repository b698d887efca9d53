package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"layerfs.dev/layerfs/client"
	"layerfs.dev/layerfs/wire"
)

// The verbs that bring lines of work together: merge (a ref into a
// branch) and, on workspaces, update (catch up with a branch), resolve
// (conflicts an update left) and fork (copies of a live workspace).

func mergeCmd(a *app) *cobra.Command {
	var req wire.MergeRequest
	c := &cobra.Command{
		Use:   "merge PROJECT SOURCE --into BRANCH",
		Short: "Merge a ref into a branch: fast-forward, merged or up-to-date; conflicts publish nothing (exit code 11)",
		Long: `Merge the commit SOURCE names (a branch, layer:N or a commit) into BRANCH,
published by compare-and-swap on its head like a commit: fast-forward when
BRANCH has no commits of its own, a merge commit whose parents are BRANCH's
head and SOURCE, or up-to-date. Paths both changed in ways a merge cannot
decide are conflicts: nothing is published, they are listed (path, kind,
the three sides' objects) and the exit code is 11. --prefer settles every
conflict by one side (ours: BRANCH's). --dry-run says what would happen.
Renamed files are found as git finds them, by similarity (50% by default,
--find-renames=N another, --no-renames none), and merged at their new path.`,
		Args: args(cobra.ExactArgs(2)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			req.Source = argv[1]
			return a.withStore(cmd, func(c *client.Client) error {
				res, err := c.Merge(cmd.Context(), argv[0], req)
				if err != nil {
					return a.conflicts(err)
				}
				return a.emit(res, func(w io.Writer) {
					fmt.Fprintln(w, "RESULT\tCOMMIT\tHEAD\tBASES")
					bases := ""
					for i, b := range res.Bases {
						if i > 0 {
							bases += ","
						}
						bases += short(b)
					}
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", res.Result+dryRun(res.DryRun), short(res.Commit), short(res.Head), bases)
				})
			})
		},
	}
	c.Flags().StringVar(&req.Into, "into", "main", "the branch to merge into")
	c.Flags().StringVarP(&req.Message, "message", "m", "", "the merge commit's message (default: merge SOURCE into BRANCH)")
	c.Flags().StringVar(&req.Author, "author", "", "the merge commit's author (default: the daemon's)")
	c.Flags().BoolVar(&req.DryRun, "dry-run", false, "say what the merge would do, publish nothing")
	c.Flags().StringVar(&req.Prefer, "prefer", "", "settle every conflict by one side: ours (BRANCH's) or theirs (SOURCE's)")
	c.Flags().IntVar(&req.RenameThreshold, "find-renames", 0, "N: a removed and an added file with N% of their content in common are a rename (default 50, git's; 100: exact renames only)")
	c.Flags().BoolVar(&req.NoRenames, "no-renames", false, "find no renames: a renamed file is a delete and an add")
	return c
}

func dryRun(d bool) string {
	if d {
		return " (dry run)"
	}
	return ""
}

// conflicts prints the conflicts a conflict error lists (as JSON with
// --json) and returns err, whose class gives the exit code.
func (a *app) conflicts(err error) error {
	cs := client.Conflicts(err)
	if len(cs) == 0 {
		return err
	}
	if e := a.emit(map[string]any{"result": "conflicts", "conflicts": cs}, func(w io.Writer) { conflictTable(w, cs) }); e != nil {
		return e
	}
	return err
}

func conflictTable(w io.Writer, cs []wire.Conflict) {
	fmt.Fprintln(w, "CONFLICT\tPATH\tBASE\tOURS\tTHEIRS")
	for _, c := range cs {
		note := ""
		if c.Markers {
			note = " (markers in the file)"
		}
		if c.Moved != "" {
			note = " (the file moved to " + showPath(c.Moved) + ")"
		}
		fmt.Fprintf(w, "%s\t%s%s\t%s\t%s\t%s\n", c.Kind, showPath(c.Path), note, side(c.Base), side(c.Ours), side(c.Theirs))
	}
}

// side shows one side of a conflict: its type and object, and its path
// when a rename moved it.
func side(s wire.ConflictSide) string {
	if s.Type == "" {
		return "-"
	}
	out := s.Type
	if s.Object != "" {
		out += " " + short(s.Object)
	}
	if s.Target != "" {
		out += " -> " + s.Target
	}
	return out + " " + showPath(s.Path)
}

func wsUpdateCmd(a *app) *cobra.Command {
	var req wire.UpdateRequest
	c := &cobra.Command{
		Use:   "update WS [REF]",
		Short: "Bring a branch's new head (default the workspace's branch) into a live workspace, its changes kept",
		Long: `Merge the workspace's tree (its head and its uncommitted changes) with REF's
commit and make the difference in the mounted workspace: it then stands on
REF's commit with its changes still uncommitted. Refused while an exec runs
in it. A conflict changes nothing (exit code 11) unless --conflict-markers:
then conflicted texts get git-style markers (other conflicts keep the
workspace's side), ws status lists them, and ws commit is refused until
they are resolved: edit the markers away, or ws resolve.`,
		Args: args(cobra.RangeArgs(1, 2)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			if len(argv) == 2 {
				req.Ref = argv[1]
			}
			return a.withWorkspace(cmd, argv[0], func(ws *client.Workspace) error {
				res, err := ws.Update(cmd.Context(), req)
				if err != nil {
					if client.IsBusy(err) {
						return fmt.Errorf("%w (update it when its execs are done)", err)
					}
					return a.conflicts(err)
				}
				return a.emit(res, func(w io.Writer) {
					fmt.Fprintln(w, "RESULT\tHEAD\tCHANGED\tCONFLICTS")
					fmt.Fprintf(w, "%s\t%s\t%d\t%d\n", res.Result, short(res.Head), res.Changed, len(res.Conflicts))
					if len(res.Conflicts) > 0 {
						fmt.Fprintln(w)
						conflictTable(w, res.Conflicts)
					}
				})
			})
		},
	}
	c.Flags().BoolVar(&req.ConflictMarkers, "conflict-markers", false, "on a conflict, write git-style markers into the files and keep the conflicts to resolve")
	c.Flags().StringVar(&req.Prefer, "prefer", "", "settle every conflict by one side: ours (the workspace's) or theirs (REF's)")
	return c
}

func wsResolveCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "resolve WS [PATH...]",
		Short: "Mark conflicts an update left resolved, the files as they are (no PATH: all)",
		Args:  args(cobra.MinimumNArgs(1)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			return a.withWorkspace(cmd, argv[0], func(ws *client.Workspace) error {
				left, err := ws.Resolve(cmd.Context(), argv[1:]...)
				if err != nil {
					return err
				}
				return a.emit(wire.ResolveResult{Conflicts: nonNil(left)}, func(w io.Writer) {
					if len(left) == 0 {
						fmt.Fprintln(w, "no conflicts left")
						return
					}
					conflictTable(w, left)
				})
			})
		},
	}
}

func wsForkCmd(a *app) *cobra.Command {
	var count int
	c := &cobra.Command{
		Use:   "fork WS [--count N]",
		Short: "Open N new workspaces holding everything WS holds now, committed or not",
		Args:  args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, argv []string) error {
			if count < 1 || count > wire.MaxForkCount {
				return usageError{fmt.Errorf("ws fork: --count must be from 1 to %d", wire.MaxForkCount)}
			}
			return a.withWorkspace(cmd, argv[0], func(ws *client.Workspace) error {
				forks, err := ws.Fork(cmd.Context(), count)
				if err != nil {
					return err
				}
				infos := make([]wire.Workspace, 0, len(forks))
				for _, f := range forks {
					infos = append(infos, f.Info())
				}
				return a.emit(infos, func(w io.Writer) {
					fmt.Fprintln(w, "ID\tBRANCH\tHEAD\tPATH")
					for _, f := range infos {
						fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", f.ID, f.Branch, short(f.Head), showPath(f.MountPath))
					}
				})
			})
		},
	}
	c.Flags().IntVarP(&count, "count", "n", 1, "how many workspaces to open")
	return c
}
