package libkrun

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"layerfs.dev/layerfs/internal/platforms/internal/guest"
)

// sandboxInfo is one element of `msb ls --format json`, which msb prints
// as a pretty JSON array of {"name", "status", "created_at", "image"}
// (crates/cli/lib/commands/list.rs); status is the Debug name of the
// sandbox's state: "Running", "Stopped", "Created", "Crashed", ...
type sandboxInfo struct {
	Name      string `json:"name"`
	Status    string `json:"status"`
	CreatedAt string `json:"created_at"`
	Image     string `json:"image"`
}

func (s sandboxInfo) running() bool { return s.Status == "Running" }

// parseList decodes `msb ls --format json`.
func parseList(out []byte) ([]sandboxInfo, error) {
	out = bytes.TrimSpace(out)
	if len(out) == 0 {
		return nil, nil
	}
	var list []sandboxInfo
	if err := json.Unmarshal(out, &list); err != nil {
		return nil, fmt.Errorf("parse msb ls --format json %q: %w", guest.Truncate(string(out), 200), err)
	}
	for _, s := range list {
		if s.Name == "" {
			return nil, fmt.Errorf("parse msb ls --format json: a sandbox has no name")
		}
	}
	return list, nil
}

// parseVersion reads `msb --version`, clap's "msb 0.7.8".
func parseVersion(out []byte) (guest.Semver, string, error) {
	s := strings.TrimSpace(string(out))
	rest, ok := strings.CutPrefix(s, "msb ")
	if !ok {
		return guest.Semver{}, "", fmt.Errorf("unexpected msb --version output %q", guest.Truncate(s, 200))
	}
	v, err := guest.ParseSemver(rest)
	if err != nil {
		return guest.Semver{}, "", fmt.Errorf("msb --version: %w", err)
	}
	return v, rest, nil
}
