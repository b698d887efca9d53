package api

import (
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"layerfs.dev/layerfs/internal/netpolicy"
	"layerfs.dev/layerfs/wire"
)

// The API checks shapes early; the engine and the Store still check meaning.
var (
	// nameRE is the Store's rule for project and branch names.
	nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)
	// refRE: "layer:N", a branch name, or a commit id or prefix.
	refRE = regexp.MustCompile(`^(layer:[0-9]{1,9}|[a-z0-9][a-z0-9._-]{0,127})$`)
	// idRE: workspace ids are safe in names ([a-z0-9-], platforms.Workspace).
	idRE       = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,63}$`)
	platformRE = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,31}$`)
)

const maxPathLen = 4096

func checkName(field, s string) error {
	if s == "" {
		return invalid("%s is required", field)
	}
	if !nameRE.MatchString(s) {
		return invalid("%s %q is not a valid name: want 1-63 of [a-z0-9._-], starting with a letter or digit (no \"/\", no \"..\")", field, s)
	}
	return nil
}

func checkRef(field, s string) error {
	if s == "" {
		return invalid("%s is required", field)
	}
	if !refRE.MatchString(s) || strings.Contains(s, "..") {
		return invalid("%s %q is not a valid ref: want \"layer:N\", a branch name, or a commit id or prefix", field, s)
	}
	return nil
}

func checkID(s string) error {
	if !idRE.MatchString(s) {
		return invalid("workspace id %q is not valid: want 1-64 of [a-z0-9-]", s)
	}
	return nil
}

// workspacePath checks a path inside a workspace (wire.WorkspacePath: a
// leading "/" is the workspace root, ".." never leaves it) and returns it
// cleaned, "." for the root (allowed only when root is true).
func workspacePath(field, p string, root bool) (string, error) {
	if len(p) > maxPathLen {
		return "", invalid("%s is longer than %d bytes", field, maxPathLen)
	}
	c, err := wire.WorkspacePath(p)
	if errors.Is(err, wire.ErrPathEscapes) {
		return "", invalid("%s %q contains \"..\" above the workspace root: paths must stay inside the workspace", field, p)
	}
	if err != nil {
		return "", invalid("%s: %w", field, err)
	}
	if c == "." && !root {
		return "", invalid("%s must name a file inside the workspace, not its root", field)
	}
	return c, nil
}

// hostPath checks a path on the daemon's host: absolute and clean.
func hostPath(field, p string, required bool) error {
	switch {
	case p == "" && !required:
		return nil
	case p == "":
		return invalid("%s is required", field)
	case strings.ContainsRune(p, 0):
		return invalid("%s contains a NUL byte", field)
	case len(p) > maxPathLen:
		return invalid("%s is longer than %d bytes", field, maxPathLen)
	case !filepath.IsAbs(p):
		return invalid("%s %q must be an absolute path on the daemon's host", field, p)
	case filepath.Clean(p) != p:
		return invalid("%s %q is not clean (want %q)", field, p, filepath.Clean(p))
	}
	return nil
}

func checkText(field, s string, max int) error {
	if strings.ContainsRune(s, 0) {
		return invalid("%s contains a NUL byte", field)
	}
	if len(s) > max {
		return invalid("%s is longer than %d bytes", field, max)
	}
	return nil
}

func checkSpec(spec *wire.WorkspaceSpec) error {
	switch {
	case spec.QuotaBytes < 0 || spec.QuotaInodes < 0:
		return invalid("quota_bytes and quota_inodes must not be negative")
	case spec.QuotaInodes > 0 && spec.QuotaBytes == 0:
		return invalid("quota_inodes needs quota_bytes")
	case spec.Native:
		// A native workspace is a plain directory: no history to name.
		if spec.Project != "" || spec.Branch != "" || spec.At != "" {
			return invalid("a native workspace has no project, branch or at")
		}
	default:
		if err := checkName("project", spec.Project); err != nil {
			return err
		}
		if err := checkName("branch", spec.Branch); err != nil {
			return err
		}
	}
	if spec.At != "" {
		if err := checkRef("at", spec.At); err != nil {
			return err
		}
	}
	if err := hostPath("mount_path", spec.MountPath, false); err != nil {
		return err
	}
	if spec.Image != "" {
		if err := checkImage("image", spec.Image, true); err != nil {
			return err
		}
	}
	if spec.Platform != "" && !platformRE.MatchString(spec.Platform) {
		return invalid("platform %q is not a valid platform name", spec.Platform)
	}
	return netpolicy.Check(spec.Network, spec.Egress)
}

// query checks that r has no query parameters but allowed ones, each given
// at most once, and returns them.
func query(q url.Values, allowed ...string) (map[string]string, error) {
	out := make(map[string]string, len(q))
	for k, vs := range q {
		if !containsStr(allowed, k) {
			if len(allowed) == 0 {
				return nil, invalid("unknown query parameter %q (this route takes none)", k)
			}
			return nil, invalid("unknown query parameter %q (want one of %s)", k, strings.Join(allowed, ", "))
		}
		if len(vs) != 1 {
			return nil, invalid("query parameter %q given %d times", k, len(vs))
		}
		out[k] = vs[0]
	}
	return out, nil
}

func containsStr(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// intParam parses an optional integer query parameter within [min, max].
func intParam(q map[string]string, key string, def, min, max int) (int, error) {
	v, ok := q[key]
	if !ok || v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < min || n > max {
		return 0, invalid("query parameter %s=%q: want an integer from %d to %d", key, v, min, max)
	}
	return n, nil
}

func boolParam(q map[string]string, key string) (bool, error) {
	v, ok := q[key]
	if !ok || v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, invalid("query parameter %s=%q: want true or false", key, v)
	}
	return b, nil
}

// modeParam parses an octal permission (default 0644).
func modeParam(q map[string]string) (uint32, error) {
	v, ok := q["mode"]
	if !ok || v == "" {
		return 0o644, nil
	}
	n, err := strconv.ParseUint(v, 8, 32)
	if err != nil || n > 0o777 {
		return 0, invalid("query parameter mode=%q: want octal permissions from 0 to 0777 such as 0644", v)
	}
	return uint32(n), nil
}

func fmtBytes(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%d bytes", n)
}
