package wire

import (
	"time"

	"layerfs.dev/layerfs/wire/errclass"
)

// Checkout is POST /v1/projects/{p}/checkout: materialize Ref into Path, a
// directory on the daemon's host that must be empty or absent unless
// Overwrite (then entries in the way are replaced).
type Checkout struct {
	Ref       string `json:"ref"`
	Path      string `json:"path"`
	Overwrite bool   `json:"overwrite,omitempty"`
}

// CheckoutResult answers a checkout: the commit written and what it took.
type CheckoutResult struct {
	Commit  string `json:"commit"`
	Path    string `json:"path"`
	Entries int64  `json:"entries"`
	Files   int64  `json:"files"`
	Bytes   int64  `json:"bytes"` // logical file bytes (holes included)
}

// CodeMethodNotAllowed answers a known path with a method it does not take (405).
const CodeMethodNotAllowed = errclass.CodeMethodNotAllowed

// Headers and media types of the API beyond plain JSON.
const (
	// MediaNDJSON, sent in Accept on POST .../execs, streams ExecEvent lines.
	MediaNDJSON = "application/x-ndjson"
	// MediaTar is the body of PUT/GET .../tar.
	MediaTar = "application/x-tar"
)

// FileInfo describes one path of a workspace: GET /v1/workspaces/{id}/stat
// answers one, GET .../list a page of them.
type FileInfo struct {
	// Path is relative to the workspace root, slash separated ("." for the root).
	Path string `json:"path"`
	// Type is "file", "dir", "symlink", "fifo", "socket", "char" or "block".
	Type    string    `json:"type"`
	Size    int64     `json:"size"`
	Mode    uint32    `json:"mode"` // permission bits, 0 to 0o7777
	ModTime time.Time `json:"mtime"`
	// Target is a symlink's target, as stored (never followed).
	Target string `json:"target,omitempty"`
}

// DirPage answers GET /v1/workspaces/{id}/list?path=&recursive=&cursor=&limit=:
// entries in name order (depth first when recursive), without the listed
// directory itself.
type DirPage struct {
	Entries []FileInfo `json:"entries"`
	Next    string     `json:"next,omitempty"` // cursor of the next page; "" at the end
}

// Listing limits: entries per page by default and at most.
const (
	DefaultListLimit = 1000
	MaxListLimit     = 10000
)

// Kinds of FileEvent beyond the changes ("created", "modified", "removed",
// "renamed").
const (
	// EventReady is the first line of a stream: changes from now on are reported.
	EventReady = "ready"
	// EventOverflow: the kernel's queue overflowed and changes were lost.
	EventOverflow = "overflow"
	// EventDropped: the stream's buffer was full; Count changes were not sent.
	EventDropped = "dropped"
	// EventEnded is the last line when the workspace (or the prefix
	// directory) went away.
	EventEnded = "ended"
	// EventService: a service of the workspace started, ended or was
	// started again (Service says which, as the service is now); only
	// on a stream of the whole workspace (no prefix).
	EventService = "service"
)

// FileEvent is one line of GET /v1/workspaces/{id}/events?prefix= (NDJSON):
// a change of a path in the workspace, made by any process.
type FileEvent struct {
	Kind    string    `json:"kind"`
	Path    string    `json:"path,omitempty"`     // relative to the workspace root
	OldPath string    `json:"old_path,omitempty"` // renamed: the path before
	Type    string    `json:"type,omitempty"`     // file, dir, symlink...; when known
	Size    int64     `json:"size,omitempty"`     // when delivered
	Count   int64     `json:"count,omitempty"`    // dropped: how many
	Time    time.Time `json:"time,omitzero"`      // when the daemon saw the change
	// Net is the decision of an EventNet.
	Net     *NetEvent `json:"net,omitempty"`
	Service *Service  `json:"service,omitempty"` // EventService: the service
}
