package wire

import (
	"time"

	"layerfs.dev/layerfs/wire/errclass"
)

// APIVersion is the path prefix of every API resource.
const APIVersion = "v1"

// Version answers GET /v1/version.
type Version struct {
	Version   string `json:"version"`
	API       string `json:"api"`
	GoVersion string `json:"go_version"`
	PID       int    `json:"pid"`
	Store     string `json:"store"`
}

// Error codes carried in ErrorBody; each is one class of package errclass,
// which maps it to one HTTP status (and the CLI to one exit code).
const (
	CodeInvalid     = errclass.CodeInvalid      // 400
	CodeUnauth      = errclass.CodeUnauthorized // 401
	CodeNotFound    = errclass.CodeNotFound     // 404
	CodeExists      = errclass.CodeExists       // 409
	CodeHeadMoved   = errclass.CodeHeadMoved    // 409
	CodeUncommitted = errclass.CodeUncommitted  // 409
	CodeBusy        = errclass.CodeBusy         // 409
	CodeTooLarge    = errclass.CodeTooLarge     // 413
	CodeUnavailable = errclass.CodeUnavailable  // 503: shutting down, platform not available
	CodeInternal    = errclass.CodeInternal     // 500
	CodeCorrupt     = errclass.CodeCorrupt      // 500: stored data fails its check (run fsck)
	CodeNoSpace     = errclass.CodeNoSpace      // 507: a file system of the Store or a workspace is full
	// CodeMisdirected (421) answers a request for a workspace that another
	// host of a fleet serves: Error.Node names that host and its address.
	// Nothing was done, so the request may be sent there unchanged (the
	// SDK does, once).
	CodeMisdirected = errclass.CodeMisdirected
	// CodeConflict (409) answers a merge that found paths it cannot decide:
	// Error.Conflicts lists them; nothing was published.
	CodeConflict = errclass.CodeConflict
	// CodeUnreachable (502) answers a request the daemon was to pass on to
	// a workspace's port when nothing listens on it; the message names
	// the port.
	CodeUnreachable = errclass.CodeUnreachable
	// CodeDaemonLost is never sent: the SDK reports it when the connection
	// to the daemon broke before a response was whole (the daemon crashed
	// or was killed mid-request). The request's outcome is unknown; a
	// restarted daemon recovers the workspace it touched.
	CodeDaemonLost = errclass.CodeDaemonLost
)

// ErrorBody is every error response: {"error": {"code": ..., "message": ...}}.
type ErrorBody struct {
	Error Error `json:"error"`
}

// Error is a typed API error.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	// Node, on a misdirected error, is the host that serves the workspace.
	Node *Node `json:"node,omitempty"`
	// Conflicts, on a conflict error, are the paths a merge could not
	// decide; nothing was published.
	Conflicts []Conflict `json:"conflicts,omitempty"`
}

// Node is one host's daemon among those that share a Store (a fleet).
type Node struct {
	// Name is the host's name in the shared Store.
	Name string `json:"name"`
	// Address is where its daemon answers the API (layerfsd serve
	// --advertise: tcp://HOST:PORT); "" when it advertises none.
	Address string `json:"address,omitempty"`
	// Seen is the daemon's last heartbeat (the database's clock); zero
	// when it has never run.
	Seen time.Time `json:"seen,omitzero"`
	// Live: the daemon runs and was heard from within the heartbeat's
	// expiry (30 s).
	Live bool `json:"live"`
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// Unwrap returns the error class of the code (nil for an unknown code), so
// that errors.Is(err, errclass.NotFound) holds for an API error too.
func (e *Error) Unwrap() error {
	if c := errclass.FromCode(e.Code); c != nil {
		return c
	}
	return nil
}

// Project is a named history.
type Project struct {
	Name     string    `json:"name"`
	Created  time.Time `json:"created"`
	Layers   int       `json:"layers"`
	Branches int       `json:"branches"`
	// Image is the image its workspaces get when they name none.
	Image string `json:"image,omitempty"`
}

// CreateProject is POST /v1/projects. FromPath, when set, is a directory on
// the daemon's host captured as the first layer (else the project starts
// empty).
type CreateProject struct {
	Name     string `json:"name"`
	FromPath string `json:"from_path,omitempty"`
	Message  string `json:"message,omitempty"`
}

// Layer is one published snapshot in a project's stack (Index from 1).
type Layer struct {
	Project string    `json:"project"`
	Index   int       `json:"index"`
	Commit  string    `json:"commit"`
	Created time.Time `json:"created"`
}

// AddLayer is POST /v1/projects/{p}/layers: promote a branch head.
type AddLayer struct {
	Branch string `json:"branch"`
}

// Branch is a named writable line.
type Branch struct {
	Project string    `json:"project"`
	Name    string    `json:"name"`
	Head    string    `json:"head"`
	Created time.Time `json:"created"`
	Updated time.Time `json:"updated"`
}

// ForkBranch is POST /v1/projects/{p}/branches. From is a ref: "layer:N",
// a branch name, or a commit id or unique prefix.
type ForkBranch struct {
	Name string `json:"name"`
	From string `json:"from"`
}

// CommitStats summarise a commit.
type CommitStats struct {
	Files   int64 `json:"files"`
	Dirs    int64 `json:"dirs"`
	Bytes   int64 `json:"bytes"`
	Changed int64 `json:"changed"`
}

// Commit is an immutable snapshot. Parents lists the commits it follows,
// the first parent first (two or more for a merge); Parent is the first.
type Commit struct {
	ID      string      `json:"id"`
	Root    string      `json:"root"`
	Parent  string      `json:"parent,omitempty"`
	Parents []string    `json:"parents,omitempty"`
	Message string      `json:"message"`
	Author  string      `json:"author"`
	Time    time.Time   `json:"time"`
	Stats   CommitStats `json:"stats"`
}

// CommitDir is POST /v1/projects/{p}/branches/{b}/commits: capture a
// directory on the daemon's host as the branch's next commit.
type CommitDir struct {
	FromPath string `json:"from_path"`
	Message  string `json:"message,omitempty"`
	Author   string `json:"author,omitempty"`
}

// Publication results of a commit (compare-and-swap on the branch head),
// and of a merge.
const (
	Created     = "created"
	UpToDate    = "up-to-date"
	HeadMoved   = "head-moved"
	Merged      = "merged"       // a merge commit was published
	FastForward = "fast-forward" // the branch head moved to the source, which holds it
	Updated     = "updated"      // a workspace took in a branch's new head
)

// CommitResult answers a commit. On head-moved nothing is lost: Commit is
// the stored commit and Head the branch's current head. On merged, Commit
// is the merge commit (the head) and Merge tells what was merged.
type CommitResult struct {
	Commit  string     `json:"commit"`
	Result  string     `json:"result"`
	Head    string     `json:"head"`
	Merge   *MergeInfo `json:"merge,omitempty"`
	Receipt *Receipt   `json:"receipt,omitempty"`
}

// MergeInfo tells how a commit with merge was merged: the workspace's own
// commit (the merge's second parent), the merge bases and how many
// merges it took (more than one when the head moved again).
type MergeInfo struct {
	Own   string   `json:"own"`
	Bases []string `json:"bases"`
	Tries int      `json:"tries"`
}

// Change kinds in a diff.
const (
	Added       = "added"
	Removed     = "removed"
	Modified    = "modified"
	TypeChanged = "type-changed"
)

// Change is one path that differs between two trees.
type Change struct {
	Path    string `json:"path"`
	Kind    string `json:"kind"`
	OldType string `json:"old_type,omitempty"`
	NewType string `json:"new_type,omitempty"`
}

// DiffPage answers GET /v1/projects/{p}/diff?from=&to=&cursor=&limit=.
type DiffPage struct {
	Changes []Change `json:"changes"`
	Next    string   `json:"next,omitempty"` // cursor of the next page; "" at the end
}

// Network modes of a workspace's sandboxes (docs/concepts.md#networks).
const (
	// NetworkNone: a network namespace of the sandbox's own with only lo.
	NetworkNone = "none"
	// NetworkEgress: a routed interface to the daemon's egress, which lets
	// through only what the workspace's Egress rules allow.
	NetworkEgress = "egress"
	// NetworkHost: the host's network namespace, all of it.
	NetworkHost = "host"
)

// WorkspaceSpec is POST /v1/workspaces.
type WorkspaceSpec struct {
	Project string `json:"project"`
	Branch  string `json:"branch"`
	// At is a ref to mount instead of the branch head; commits still go to Branch.
	At string `json:"at,omitempty"`
	// MountPath is where to mount; default under the Store's workspaces/.
	MountPath string `json:"mount_path,omitempty"`
	Platform  string `json:"platform,omitempty"` // default: the daemon's default platform
	Network   string `json:"network,omitempty"`  // NetworkNone (default), NetworkEgress or NetworkHost
	// Egress is what a workspace with NetworkEgress may reach; nothing
	// else answers. Empty: only names and addresses no rule allows, so
	// nothing.
	Egress []NetworkRule `json:"egress,omitempty"`
	// Native makes a plain directory instead of a FUSE workspace: no history,
	// no commit. The bench's native arm uses it on every platform.
	Native bool `json:"native,omitempty"`
	// QuotaBytes, when set, bounds what the workspace can hold (its upper
	// layer: what execs wrote) to a file system of that size of its own;
	// QuotaInodes bounds its files too (0: ext4's default for the size).
	QuotaBytes  int64 `json:"quota_bytes,omitempty"`
	QuotaInodes int64 `json:"quota_inodes,omitempty"`
	// DataPath chooses how the workspace is served: DataPathOverlay
	// (kernel overlayfs over the daemon's read-only FUSE view of the
	// commit: writes at the local file system's speed) or DataPathFUSE
	// (every operation through the daemon). Default: the daemon's, which is
	// overlay where the kernel allows it (else fuse, and the workspace's
	// data_path says why).
	DataPath string `json:"data_path,omitempty"`
	// Durability says what of the workspace's uncommitted changes outlives
	// a crash: DurabilityCommit or DurabilityFsync. Default: the daemon's,
	// which is commit unless it was started with another.
	Durability string `json:"durability,omitempty"`
	// Owner is the host user the mount path is for, where the workspace's
	// sandboxes run in a user namespace of their own: there the sandbox's
	// root is that user, and what the user creates is the sandbox root's
	// (docs/security.md, "The mount path"). Default: the caller (the peer
	// of the daemon's unix socket), else the daemon's user.
	Owner *Owner `json:"owner,omitempty"`
	// Image names the image whose tree is every exec's root, NAME or
	// NAME@DIGEST (pinned: the image must still have that digest, under
	// that name or another); its Env, WorkingDir and User are the execs'
	// defaults and the root is the workspace's own copy-on-write.
	// Default: the project's default image, else the platform's runtime.
	Image string `json:"image,omitempty"`
}

// Owner is a host user: a uid and a gid.
type Owner struct {
	UID uint32 `json:"uid"`
	GID uint32 `json:"gid"`
}

// Data paths of a workspace.
const (
	DataPathFUSE    = "fuse"
	DataPathOverlay = "overlay"
)

// Durabilities of a workspace: what of its uncommitted changes outlives a
// crash. Its commits are durable with either.
const (
	// DurabilityCommit: writes reach the disk with the workspace's
	// commits. A crash of the daemon loses nothing (the kernel's page cache
	// outlives it); a crash of the host can lose what was written since the
	// last commit. fsync(2) in the workspace returns at once, and on the
	// overlay path the first write to a committed file costs no disk write
	// (kernel overlayfs's volatile option). The default.
	DurabilityCommit = "commit"
	// DurabilityFsync: as on a local file system, fsync(2) reaches the
	// disk, and the overlay path syncs each committed file it copies up
	// before the write that caused the copy (for a 64 MiB file, most of
	// what the first write costs).
	DurabilityFsync = "fsync"
)

// Workspace states.
const (
	StateMounted   = "mounted"
	StateUnmounted = "unmounted" // recorded, not served (after a crash until remounted)
)

// Workspace describes one workspace.
type Workspace struct {
	ID      string `json:"id"`
	Project string `json:"project"`
	Branch  string `json:"branch"`
	// Base is the commit the workspace was made from: the one mounted as
	// its lower layer, or, after an update, a commit of the merged tree on
	// the commits it came from (stored, on no branch), or, for a fork, a
	// commit of what the source held. Head is the commit its next commit
	// follows: its last commit, the head it was updated to, or Base.
	Base      string `json:"base"`
	Head      string `json:"head"`
	MountPath string `json:"mount_path"`
	Platform  string `json:"platform"`
	Network   string `json:"network"`
	// Egress are the rules of a workspace with network NetworkEgress.
	Egress  []NetworkRule `json:"egress,omitempty"`
	Native  bool          `json:"native,omitempty"`
	State   string        `json:"state"`
	Created time.Time     `json:"created"`
	// Node is the host that serves the workspace, on a shared Store ("" on
	// an embedded one); NodeAddress its daemon's advertised address, in a
	// listing of every host's workspaces.
	Node        string `json:"node,omitempty"`
	NodeAddress string `json:"node_address,omitempty"`
	// Image is the image the workspace's root lies over, NAME@DIGEST
	// ("" for the platform's runtime).
	Image string `json:"image,omitempty"`
	// DataPath says how the workspace is served, then how file data
	// reaches the kernel: "overlay: metadata erofs, data cached or lower
	// passthrough",
	// "fuse: passthrough", "fuse: daemon: WHY"; a workspace that fell back
	// from overlay to fuse, or to overlay without its metadata image, says
	// why in parentheses.
	DataPath string `json:"data_path,omitempty"`
	// Durability is DurabilityCommit or DurabilityFsync ("" for a native
	// workspace).
	Durability string `json:"durability,omitempty"`
	// Owner is the host user the mount path is for, when the mount path
	// is a view of the sandboxes' mount for that user (sandboxes in a user
	// namespace); HostView then says how its file data is served:
	// "passthrough" (files the workspace wrote; committed files through the
	// daemon) or "daemon: WHY".
	Owner    *Owner `json:"owner,omitempty"`
	HostView string `json:"host_view,omitempty"`
	// Receipt, on the answer to a create or a remount, tells what mounting
	// cost.
	Receipt *Receipt `json:"receipt,omitempty"`
}

// WorkspaceStatus answers GET /v1/workspaces/{id}.
type WorkspaceStatus struct {
	Workspace
	Changes []Change `json:"changes"` // against Head
	// Conflicts are those an update left, not resolved yet: a commit is
	// refused until they are (resolve them, or remove the markers).
	Conflicts  []Conflict `json:"conflicts,omitempty"`
	UpperBytes int64      `json:"upper_bytes"` // disk used by the upper layer
	Upper      UpperStats `json:"upper"`       // what the upper layer holds
	FUSE       FUSEStats  `json:"fuse"`        // since mount
}

// EndWorkspace is DELETE /v1/workspaces/{id}?discard=true|false.
// A plain end refuses (uncommitted_changes) when there are changes.

// CommitRequest is POST /v1/workspaces/{id}/commit.
type CommitRequest struct {
	Message string `json:"message,omitempty"`
	Author  string `json:"author,omitempty"`
	// Merge, when the branch head moved since the workspace's last
	// commit, merges the workspace's commit with the new head and
	// publishes the merge (result merged), trying again a bounded number
	// of times when the head moves once more; the workspace then holds
	// the merged tree. A conflict publishes nothing and answers a conflict
	// error that lists the paths.
	Merge bool `json:"merge,omitempty"`
}

// ExecRequest is POST /v1/workspaces/{id}/execs. Exactly one of Argv and
// Body: Argv runs exactly as given; Body runs as bash -o pipefail -c Body.
type ExecRequest struct {
	Argv        []string `json:"argv,omitempty"`
	Body        string   `json:"body,omitempty"`
	Env         []string `json:"env,omitempty"`
	Dir         string   `json:"dir,omitempty"` // relative to /workspace
	Stdin       []byte   `json:"stdin,omitempty"`
	TimeoutMs   int64    `json:"timeout_ms,omitempty"`
	OutputLimit int64    `json:"output_limit,omitempty"`
	UID         *int     `json:"uid,omitempty"`
	GID         *int     `json:"gid,omitempty"`
	MemoryBytes int64    `json:"memory_bytes,omitempty"`
	Pids        int      `json:"pids,omitempty"`
	// MilliCPUs caps CPU time in thousandths of a CPU (500: half a CPU).
	MilliCPUs int `json:"milli_cpus,omitempty"`
	// OpenFiles is the command's open files limit (RLIMIT_NOFILE).
	OpenFiles int `json:"open_files,omitempty"`
	// TTY runs the command on a terminal of this size (its stdin, stdout
	// and stderr; the output all comes as stdout). Only an attached exec
	// (POST .../attach) has one: a terminal needs input as it is typed.
	TTY *TerminalSize `json:"tty,omitempty"`
}

// TerminalSize is a terminal's size in characters; 0 for the default (24
// rows, 80 columns).
type TerminalSize struct {
	Rows int `json:"rows"`
	Cols int `json:"cols"`
}

// ExecResult answers an exec. Stdout and Stderr are filled when the output
// was collected whole (not streamed).
type ExecResult struct {
	ExitCode        int     `json:"exit_code"`
	Signal          string  `json:"signal,omitempty"`
	TimedOut        bool    `json:"timed_out,omitempty"`
	OutputTruncated bool    `json:"output_truncated,omitempty"`
	Stdout          []byte  `json:"stdout,omitempty"`
	Stderr          []byte  `json:"stderr,omitempty"`
	Receipt         Receipt `json:"receipt"`
}

// ExecEvent is one line of a streamed exec (application/x-ndjson): output
// as it comes, then exactly one event with Result (or Error).
type ExecEvent struct {
	Stream string      `json:"stream,omitempty"` // "stdout" or "stderr"
	Data   []byte      `json:"data,omitempty"`
	Result *ExecResult `json:"result,omitempty"`
	Error  *Error      `json:"error,omitempty"`
}

// OpStats is one FUSE opcode's requests and the daemon's time serving them.
type OpStats struct {
	Count     int64 `json:"count"`
	ServiceNs int64 `json:"service_ns"`
}

// FUSEStats are FUSE requests by opcode.
type FUSEStats struct {
	Requests  int64              `json:"requests"`
	ServiceNs int64              `json:"service_ns"`
	ByOp      map[string]OpStats `json:"by_op,omitempty"`
	// ServiceP50Ns is the median service time of one request.
	ServiceP50Ns int64 `json:"service_p50_ns,omitempty"`
}

// UpperStats count what a workspace's upper layer holds: on the overlay
// data path everything the kernel wrote, where the FUSE requests show only
// what reached the daemon (lookups and reads of committed files).
type UpperStats struct {
	Files      int64 `json:"files"`      // regular files: new, copied up, or metacopies
	Bytes      int64 `json:"bytes"`      // their size, metacopies excepted
	Dirs       int64 `json:"dirs"`       // directories
	Whiteouts  int64 `json:"whiteouts"`  // removed committed names
	Metacopies int64 `json:"metacopies"` // files whose data is still the commit's (chmod, rename)
	CopyUps    int64 `json:"copy_ups"`   // committed files whose data was copied up (metacopies excepted)
}

// SQLStats are SQL transactions, statements and rows (SQLite's, or
// PostgreSQL's on a shared Store).
type SQLStats struct {
	Statements   int64 `json:"statements"`
	Rows         int64 `json:"rows"`
	Transactions int64 `json:"transactions"`
	TxNs         int64 `json:"tx_ns"`
}

// Receipt tells what an exec, a commit or another operation cost: what
// that request did, counted on its own account, never work that other
// requests did meanwhile (docs/api.md#receipts).
type Receipt struct {
	WallNs    int64 `json:"wall_ns"`              // on the daemon's side, request to result
	CommandNs int64 `json:"command_ns,omitempty"` // on the sandbox's own clock
	LaunchNs  int64 `json:"launch_ns,omitempty"`  // WallNs - CommandNs: the platform's fixed cost
	// Phases of a commit: capture (scan + chunk + hash), store (SQL + pack), publish.
	CaptureNs int64     `json:"capture_ns,omitempty"`
	FUSE      FUSEStats `json:"fuse"`
	// Upper is what the exec changed in the workspace's upper layer (its
	// counts after minus before), or what the upper held at a commit.
	Upper UpperStats `json:"upper"`
	SQL   SQLStats   `json:"sql"`
	// UpperBytes is the disk used by the workspace's upper layer after a
	// commit (execs leave it 0: measuring it walks the upper layer).
	UpperBytes int64 `json:"upper_bytes"`
	// Store writes: payload (pack) bytes and objects new vs deduplicated.
	StoreBytesWritten int64 `json:"store_bytes_written"`
	// StoreBytesRead are the chunk payload bytes read from packs (files,
	// or the bucket of a shared Store), and CacheBytesWritten the bytes of
	// contents placed in the Store's cache of contents: for an exec, what
	// its first reads of committed files cost.
	StoreBytesRead    int64  `json:"store_bytes_read"`
	CacheBytesWritten int64  `json:"cache_bytes_written"`
	NewObjects        int64  `json:"new_objects,omitempty"`
	ReusedObjects     int64  `json:"reused_objects,omitempty"`
	NewBytes          int64  `json:"new_bytes,omitempty"`
	ReusedBytes       int64  `json:"reused_bytes,omitempty"`
	Platform          string `json:"platform,omitempty"`
	Image             string `json:"image,omitempty"`
	// UserNamespace is an exec's user namespace mapping as
	// /proc/self/uid_map shows it ("0 2000000000 65536": uid 0 inside is
	// 2000000000 on the host), or "none: " and why it ran in the host's;
	// empty when the platform does not say.
	UserNamespace string `json:"user_namespace,omitempty"`
	// Quota is the workspace's quota and its use after the exec, for a
	// workspace that has one.
	Quota *QuotaUsage `json:"quota,omitempty"`
	// SharedMount: another exec ran in the same workspace at the same
	// time. The FUSE requests their processes made while both ran, and the
	// Store work those caused, could not be told apart and are on neither
	// receipt (they are in the daemon's totals, GET /metrics).
	SharedMount bool `json:"shared_mount,omitempty"`
	// Network is an exec's network: its mode and, with egress, what its
	// connections and names were allowed and denied and the bytes they
	// carried.
	Network *NetUsage `json:"network,omitempty"`
}

// QuotaUsage is a workspace quota's file system: its size and use in bytes
// and inodes (its metadata takes a few percent of the bytes). Full means
// it is within 1 MiB (or 1%) of its bytes, or has no inode left: writes
// fail, or are about to, with ENOSPC.
type QuotaUsage struct {
	Bytes      int64 `json:"bytes"`
	BytesUsed  int64 `json:"bytes_used"`
	Inodes     int64 `json:"inodes"`
	InodesUsed int64 `json:"inodes_used"`
	Full       bool  `json:"full,omitempty"`
}

// GCRequest is the optional body of POST /v1/gc.
type GCRequest struct {
	// DryRun marks and counts but deletes nothing.
	DryRun bool `json:"dry_run,omitempty"`
	// Vacuum also rebuilds the SQLite file to return its free pages.
	Vacuum bool `json:"vacuum,omitempty"`
}

// GCResult answers POST /v1/gc.
type GCResult struct {
	ObjectsRemoved int64 `json:"objects_removed"` // (to be) removed: rows and chunks
	BytesReclaimed int64 `json:"bytes_reclaimed"` // on disk: packs, cache and database
	PacksRewritten int   `json:"packs_rewritten"`
	PacksDeleted   int   `json:"packs_deleted"`
	DurationNs     int64 `json:"duration_ns"`
	DryRun         bool  `json:"dry_run,omitempty"`
	LiveCommits    int64 `json:"live_commits"`
	LiveChunks     int64 `json:"live_chunks"`
	// DeadChunkBytes is the payload of the chunks (to be) removed.
	DeadChunkBytes int64 `json:"dead_chunk_bytes"`
}

// FsckProblem is one thing fsck found wrong.
type FsckProblem struct {
	Object  string `json:"object,omitempty"`
	Where   string `json:"where"`
	Problem string `json:"problem"`
}

// FsckRequest is the optional body of POST /v1/fsck.
type FsckRequest struct {
	// Repair evicts the cache files found damaged, so that their contents
	// are made again from the packs on next use.
	Repair bool `json:"repair,omitempty"`
	// SkipCache leaves the cache of contents unchecked (it is read whole
	// otherwise, as the packs are).
	SkipCache bool `json:"skip_cache,omitempty"`
}

// FsckReport answers POST /v1/fsck.
type FsckReport struct {
	OK       bool          `json:"ok"`
	Checked  int64         `json:"checked"` // Objects + Chunks
	Problems []FsckProblem `json:"problems"`
	Refs     int64         `json:"refs"`
	Objects  int64         `json:"objects"` // manifests, trees and commits
	Chunks   int64         `json:"chunks"`
	Bytes    int64         `json:"bytes"` // chunk payload read and verified
	Packs    int           `json:"packs"`
	// CacheFiles are the files of the Store's cache of contents checked
	// against their contents' IDs, CacheBytes their bytes; a damaged one
	// is a problem "cache: ...". Repaired counts those evicted (Repair).
	CacheFiles int64 `json:"cache_files"`
	CacheBytes int64 `json:"cache_bytes"`
	Repaired   int64 `json:"repaired"`
}

// StoreStats answers GET /v1/stats.
type StoreStats struct {
	Objects      map[string]int64 `json:"objects"` // by kind
	LogicalBytes int64            `json:"logical_bytes"`
	StoredBytes  int64            `json:"stored_bytes"`
	DedupRatio   float64          `json:"dedup_ratio"`
	DBBytes      int64            `json:"db_bytes"`
	PackBytes    int64            `json:"pack_bytes"`
	PackFiles    int64            `json:"pack_files"`
	CacheBytes   int64            `json:"cache_bytes"`
	// CacheFiles is how many contents the cache holds; CacheLimit bounds
	// their bytes (0: no bound), beyond which the least recently read are
	// evicted.
	CacheFiles int64 `json:"cache_files"`
	CacheLimit int64 `json:"cache_limit"`
	// CacheVerified counts the contents of the cache the daemon has
	// checked against their IDs (or written from checked bytes) since it
	// started, which the kernel reads directly; CacheUnverified the
	// others, checked on their first use (docs/security.md).
	CacheVerified   int64 `json:"cache_verified"`
	CacheUnverified int64 `json:"cache_unverified"`
	// CacheVerity is "on" when the cache's files are sealed with
	// fs-verity (the kernel checks every page read from them), else
	// "off: " and why.
	CacheVerity string `json:"cache_verity"`
	// ObjectBytes are the encoded bytes by kind (chunks: payload bytes).
	ObjectBytes map[string]int64 `json:"object_bytes"`
	Projects    int64            `json:"projects"`
	Branches    int64            `json:"branches"`
	Layers      int64            `json:"layers"`
	Workspaces  int64            `json:"workspaces"`
}

// DaemonStatus answers GET /v1/daemon.
type DaemonStatus struct {
	Version
	Started    time.Time `json:"started"`
	Workspaces int       `json:"workspaces"`
	Execs      int       `json:"execs_running"`
	Platforms  []string  `json:"platforms"`
	Socket     string    `json:"socket"`
	TCP        string    `json:"tcp,omitempty"`
	// Node is this host's name in a shared Store ("" on an embedded one),
	// Advertise the address it gives other hosts' clients
	// (layerfsd serve --advertise).
	Node      string `json:"node,omitempty"`
	Advertise string `json:"advertise,omitempty"`
	IdleExit  string `json:"idle_exit,omitempty"`
	// Supervisor is the pid of the process that restarts this daemon when
	// it crashes (layerfsd serve --supervise), 0 when none does.
	Supervisor int `json:"supervisor_pid,omitempty"`
	// Isolation is what each platform's sandboxes get, in Platforms'
	// order. Every exec's receipt is held to it: an exec that ran with
	// less fails.
	Isolation []Isolation `json:"isolation,omitempty"`
	// HostNetwork lists the workspaces granted the host's network
	// (NetworkHost), which their sandboxes share with the daemon.
	HostNetwork []string `json:"host_network,omitempty"`
}

// Isolation says what keeps one platform's sandboxes from the host and
// from each other.
type Isolation struct {
	Platform string `json:"platform"`
	// UserNamespace is the sandboxes' user namespace mapping as uid_map
	// shows it ("0 2000000000 65536": inside, host, size). Empty means
	// they run in the host's user namespace (uid 0 without capabilities),
	// which a daemon does only when told to; NoUserNamespace says so.
	UserNamespace   string `json:"user_namespace,omitempty"`
	NoUserNamespace string `json:"no_user_namespace,omitempty"`
	// Seccomp names the system call filter every command runs under, or
	// is "off" with the reason.
	Seccomp string `json:"seccomp"`
	// Limits says how each per-exec limit is enforced ("cgroup v2",
	// "cgroup v1", "rlimit", or "none" with the reason).
	Limits IsolationLimits `json:"limits"`
	// Network is a sandbox's network: "none" (a namespace of its own with
	// only lo) unless the workspace is granted the host's.
	Network string `json:"network"`
	// Egress says how the platform gives NetworkEgress ("nftables ..."),
	// or "unavailable: " and why: such a platform refuses the mode.
	Egress string `json:"egress,omitempty"`
	// Boundary names what else separates a sandbox from the host: "the
	// host's kernel", or a VM ("a Lima VM (QEMU)").
	Boundary string `json:"boundary"`
}

// IsolationLimits says how the per-exec limits of ExecRequest are enforced.
type IsolationLimits struct {
	Memory    string `json:"memory"`
	Pids      string `json:"pids"`
	CPU       string `json:"cpu"`
	OpenFiles string `json:"open_files"`
}
