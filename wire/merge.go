package wire

// Merge preferences: how every conflict is settled.
const (
	PreferOurs   = "ours"   // the branch merged into (a workspace's own changes, for an update)
	PreferTheirs = "theirs" // what is merged in
)

// MergeRequest is POST /v1/projects/{p}/merges: merge the commit Source (a
// ref) into the branch Into.
type MergeRequest struct {
	Source  string `json:"source"`
	Into    string `json:"into"`
	Message string `json:"message,omitempty"`
	Author  string `json:"author,omitempty"`
	// DryRun says what the merge would do and publishes nothing.
	DryRun bool `json:"dry_run,omitempty"`
	// Prefer ("ours" or "theirs") settles every conflict by that side:
	// the merge is then clean.
	Prefer string `json:"prefer,omitempty"`
	// RenameThreshold is the similarity, in percent (1 to 100), from which
	// a file a side removed and one it added are a rename, as git's
	// --find-renames=N (0: git's 50; 100: exact renames only).
	RenameThreshold int `json:"rename_threshold,omitempty"`
	// NoRenames finds no renames, as git's --no-renames: a renamed file is
	// a delete and an add.
	NoRenames bool `json:"no_renames,omitempty"`
}

// MergeResult answers a merge: Result is FastForward, Merged or UpToDate
// (conflicts are a conflict error listing them, nothing published). Commit
// is the merge commit, the source (fast-forward) or the head that holds it
// already (up-to-date); Head is the branch head after.
type MergeResult struct {
	Result string   `json:"result"`
	Commit string   `json:"commit,omitempty"`
	Head   string   `json:"head"`
	Tree   string   `json:"tree,omitempty"`
	Bases  []string `json:"bases,omitempty"`
	Tries  int      `json:"tries"`
	DryRun bool     `json:"dry_run,omitempty"`
	// Paths is the number of paths either side changed: what the merge
	// visited.
	Paths   int64    `json:"paths"`
	Receipt *Receipt `json:"receipt,omitempty"`
}

// Conflict kinds (see docs/concepts.md).
const (
	ConflictContent       = "content"
	ConflictBinary        = "binary"
	ConflictAddAdd        = "add/add"
	ConflictModifyDelete  = "modify/delete"
	ConflictFileDirectory = "file/directory"
	ConflictType          = "type"
	ConflictSymlink       = "symlink"
	ConflictSpecial       = "special"
	ConflictMetadata      = "metadata"
	ConflictRenameRename  = "rename/rename"
	ConflictRenameDelete  = "rename/delete"
)

// Conflict is one path a merge could not decide.
type Conflict struct {
	Path string `json:"path"`
	Kind string `json:"kind"`
	// Base, Ours and Theirs are the path on each side (a rename moves it)
	// and what it holds there; a side without an entry has no type.
	Base   ConflictSide `json:"base"`
	Ours   ConflictSide `json:"ours"`
	Theirs ConflictSide `json:"theirs"`
	// Markers: the workspace's file at Path holds git-style conflict
	// markers (an update with conflict markers).
	Markers bool `json:"markers,omitempty"`
	// Moved: where an update put the file of a file/directory conflict so
	// the directory could stay at Path.
	Moved string `json:"moved,omitempty"`
}

// ConflictSide is one side of a conflict.
type ConflictSide struct {
	Path string `json:"path"`
	// Type is "file", "dir", "symlink", ...; "" where the side has nothing.
	Type   string `json:"type,omitempty"`
	Mode   uint32 `json:"mode,omitempty"`
	Object string `json:"object,omitempty"` // content or tree id
	Target string `json:"target,omitempty"` // a symlink's
}

// UpdateRequest is POST /v1/workspaces/{id}/update: bring the new head of
// a branch (Ref, default the workspace's branch; any ref) into the live
// workspace, its uncommitted changes kept.
type UpdateRequest struct {
	Ref string `json:"ref,omitempty"`
	// ConflictMarkers, on a conflict, writes git-style markers into the
	// conflicted files (other conflicts keep the workspace's side) and
	// records the conflicts: the workspace's status lists them and a
	// commit is refused until they are resolved. Without it a conflict
	// changes nothing.
	ConflictMarkers bool `json:"conflict_markers,omitempty"`
	// Prefer ("ours": the workspace's, or "theirs") settles every
	// conflict by that side.
	Prefer string `json:"prefer,omitempty"`
}

// UpdateResult answers an update: Result is Updated or UpToDate; Head is
// the workspace's head after (the ref's commit); Conflicts are those left
// in the workspace with conflict markers.
type UpdateResult struct {
	Result    string     `json:"result"`
	Head      string     `json:"head"`
	Bases     []string   `json:"bases,omitempty"`
	Changed   int64      `json:"changed"` // paths written into the workspace
	Conflicts []Conflict `json:"conflicts,omitempty"`
	Receipt   *Receipt   `json:"receipt,omitempty"`
}

// ResolveRequest is POST /v1/workspaces/{id}/resolve: mark conflicts left
// by an update resolved, the files as they now are (Paths empty: all).
// A text conflict is also resolved by removing its markers.
type ResolveRequest struct {
	Paths []string `json:"paths,omitempty"`
}

// ResolveResult answers a resolve: the conflicts left.
type ResolveResult struct {
	Conflicts []Conflict `json:"conflicts"`
}

// ForkRequest is POST /v1/workspaces/{id}/fork: open Count (default 1)
// new workspaces holding everything the workspace holds now, committed or
// not, on its branch and platform.
type ForkRequest struct {
	Count int `json:"count,omitempty"`
}

// ForkResult answers a fork: the new workspaces, mounted.
type ForkResult struct {
	Workspaces []Workspace `json:"workspaces"`
	Receipt    *Receipt    `json:"receipt,omitempty"`
}

// MaxForkCount is the most workspaces one fork opens.
const MaxForkCount = 64
