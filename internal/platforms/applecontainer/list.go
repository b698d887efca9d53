package applecontainer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"layerfs.dev/layerfs/internal/platforms/internal/guest"
)

// containerInfo is the part of one element of `container list --all
// --format json` that the platform reads. The CLI encodes its container
// snapshots with Swift's JSONEncoder: an array of objects with a
// "configuration" (ContainerConfiguration: id, image, resources, ...) and a
// "status", which releases before 1.x print as a bare RuntimeStatus string
// ("running") and later ones as an object with a "state".
type containerInfo struct {
	Status        json.RawMessage `json:"status"`
	Configuration struct {
		ID    string `json:"id"`
		Image struct {
			Reference  string `json:"reference"`
			Descriptor struct {
				Digest string `json:"digest"`
			} `json:"descriptor"`
		} `json:"image"`
		Resources struct {
			CPUs          int   `json:"cpus"`
			MemoryInBytes int64 `json:"memoryInBytes"`
		} `json:"resources"`
	} `json:"configuration"`
}

// state is the container's runtime state: "running", "stopped",
// "stopping" or "unknown".
func (c containerInfo) state() string {
	var s string
	if json.Unmarshal(c.Status, &s) == nil {
		return s
	}
	var o struct {
		State string `json:"state"`
	}
	if json.Unmarshal(c.Status, &o) == nil {
		return o.State
	}
	return ""
}

func (c containerInfo) running() bool { return c.state() == "running" }

// image names the image with its digest when the CLI reports one.
func (c containerInfo) image() string {
	img := c.Configuration.Image
	if img.Descriptor.Digest == "" {
		return img.Reference
	}
	return img.Reference + "@" + img.Descriptor.Digest
}

// parseList decodes `container list --all --format json`.
func parseList(out []byte) ([]containerInfo, error) {
	out = bytes.TrimSpace(out)
	if len(out) == 0 {
		return nil, nil
	}
	var list []containerInfo
	if err := json.Unmarshal(out, &list); err != nil {
		return nil, fmt.Errorf("parse container list --format json %q: %w", guest.Truncate(string(out), 200), err)
	}
	for _, c := range list {
		if c.Configuration.ID == "" {
			return nil, fmt.Errorf("parse container list --format json: a container has no configuration.id")
		}
	}
	return list, nil
}

// parseVersion reads `container --version`: "container CLI version 1.2.1
// (build: release, commit: 0a1b2c3)" (the version command of
// apple/container; a source build may leave the version empty).
func parseVersion(out []byte) (guest.Semver, string, error) {
	s := strings.TrimSpace(string(out))
	rest, ok := strings.CutPrefix(s, "container CLI version ")
	if !ok {
		return guest.Semver{}, "", fmt.Errorf("unexpected container --version output %q", guest.Truncate(s, 200))
	}
	raw, _, _ := strings.Cut(rest, " ")
	v, err := guest.ParseSemver(raw)
	if err != nil {
		return guest.Semver{}, "", fmt.Errorf("container --version: %w", err)
	}
	return v, raw, nil
}
