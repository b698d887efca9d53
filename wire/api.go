package wire

// Checkout is POST /v1/projects/{p}/checkout: materialize Ref into Path, a
// directory on the daemon's host.
type Checkout struct {
	Ref  string `json:"ref"`
	Path string `json:"path"`
}

// CodeMethodNotAllowed answers a known path with a method it does not take (405).
const CodeMethodNotAllowed = "method_not_allowed"

// Headers and media types of the API beyond plain JSON.
const (
	// MediaNDJSON, sent in Accept on POST .../execs, streams ExecEvent lines.
	MediaNDJSON = "application/x-ndjson"
	// MediaTar is the body of PUT/GET .../tar.
	MediaTar = "application/x-tar"
)
