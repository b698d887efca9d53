package guest

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"layerfs.dev/layerfs/wire/errclass"
)

// ErrNoProject: a project name is needed to name the guest.
var ErrNoProject = errclass.New(errclass.Invalid, "project name is empty")

// Name derives the name of a project's guest (Lima instance, container,
// microVM): "layerfs-" and the project name lower-cased with every run of
// characters outside [a-z0-9] made one "-". When that changed the name, the
// first 3 bytes of the original's SHA-256, in hex, are appended, so that
// "My App" and "my-app" do not share a guest. Each platform adds its tool's
// own limit on names.
func Name(project string) (string, error) {
	if project == "" {
		return "", ErrNoProject
	}
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(project) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
			dash = false
		} else if !dash {
			b.WriteByte('-')
			dash = true
		}
	}
	clean := strings.Trim(b.String(), "-")
	if clean != project {
		sum := sha256.Sum256([]byte(project))
		clean = strings.TrimPrefix(clean+"-"+hex.EncodeToString(sum[:3]), "-")
	}
	return "layerfs-" + clean, nil
}
