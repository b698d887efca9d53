package lima

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/lima-vm/lima/pkg/limayaml"
	"github.com/lima-vm/lima/pkg/store"

	"layerfs.dev/layerfs/internal/platforms/internal/guest"
)

// instance is the part of one `limactl list --json` line that the platform
// reads. limactl prints one JSON object per instance per line: lima's
// store.PrintInstances renders format "json" as the template "{{json .}}"
// over store.FormatData, whose embedded store.Instance carries these tags.
// (store.Instance itself cannot be decoded: its Errors are []error.)
type instance struct {
	Name        string             `json:"name"`
	Status      string             `json:"status"`
	Dir         string             `json:"dir"`
	VMType      string             `json:"vmType"`
	Arch        string             `json:"arch"`
	CPUs        int                `json:"cpus"`
	Memory      int64              `json:"memory"`
	LimaVersion string             `json:"limaVersion"`
	Config      *limayaml.LimaYAML `json:"config"`
}

// running reports whether limactl sees the instance as running.
func (i instance) running() bool { return i.Status == store.StatusRunning }

// parseList decodes `limactl list --json`. An empty output is no instance
// (limactl then only warns on stderr).
func parseList(out []byte) ([]instance, error) {
	var list []instance
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		var in instance
		if err := json.Unmarshal([]byte(line), &in); err != nil {
			return nil, fmt.Errorf("parse limactl list --json line %q: %w", guest.Truncate(line, 200), err)
		}
		if in.Name == "" {
			return nil, fmt.Errorf("parse limactl list --json: an instance has no name: %q", guest.Truncate(line, 200))
		}
		list = append(list, in)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read limactl list --json: %w", err)
	}
	return list, nil
}

// parseVersion reads `limactl --version`, which cobra prints as
// "limactl version 1.2.1" (Lima sets the root command's Version from its
// build's git describe, without the leading "v").
func parseVersion(out []byte) (guest.Semver, string, error) {
	s := strings.TrimSpace(string(out))
	rest, ok := strings.CutPrefix(s, "limactl version ")
	if !ok {
		return guest.Semver{}, "", fmt.Errorf("unexpected limactl --version output %q", guest.Truncate(s, 200))
	}
	v, err := guest.ParseSemver(rest)
	if err != nil {
		return guest.Semver{}, "", fmt.Errorf("limactl --version: %w", err)
	}
	return v, rest, nil
}
