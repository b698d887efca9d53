package wire

import (
	"path"
	"strings"

	"layerfs.dev/layerfs/wire/errclass"
)

// ErrPathEscapes is wrapped by WorkspacePath for a path that is not inside
// the workspace.
var ErrPathEscapes = errclass.New(errclass.Invalid, "path leaves the workspace")

// WorkspacePath is the one rule for a path inside a workspace, shared by
// the SDK and the daemon: it is relative to the workspace root, and a
// leading "/" names that root too (as docker cp reads a container path), so
// "/src/a.go" and "src/a.go" are one path. It returns the path cleaned,
// "." for the root. ".." may move up within the workspace ("a/../b" is
// "b") but never above its root, and a NUL byte is refused.
func WorkspacePath(p string) (string, error) {
	if strings.ContainsRune(p, 0) {
		return "", errclass.New(errclass.Invalid, "path contains a NUL byte")
	}
	c := path.Clean(strings.TrimLeft(p, "/"))
	if c == ".." || strings.HasPrefix(c, "../") {
		return "", ErrPathEscapes
	}
	return c, nil
}
