package libkrun

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"layerfs.dev/layerfs/wire"
)

// factsScript prints what Identity pins, one fact a line: kernel release,
// online CPUs, and the MemTotal line of /proc/meminfo.
const factsScript = "uname -r; nproc; grep MemTotal /proc/meminfo"

// guestFacts is what factsScript reported.
type guestFacts struct {
	Kernel      string
	CPUs        int
	MemoryBytes int64
}

// parseFacts reads factsScript's output.
func parseFacts(out []byte) (guestFacts, error) {
	var lines []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" {
			lines = append(lines, l)
		}
	}
	if len(lines) != 3 {
		return guestFacts{}, fmt.Errorf("guest facts: want 3 lines (uname -r, nproc, MemTotal), got %d: %q", len(lines), out)
	}
	cpus, err := strconv.Atoi(lines[1])
	if err != nil || cpus <= 0 {
		return guestFacts{}, fmt.Errorf("guest facts: nproc printed %q", lines[1])
	}
	// "MemTotal:       16377236 kB"
	f := strings.Fields(lines[2])
	if len(f) != 3 || f[0] != "MemTotal:" || f[2] != "kB" {
		return guestFacts{}, fmt.Errorf("guest facts: unexpected meminfo line %q", lines[2])
	}
	kb, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil || kb <= 0 {
		return guestFacts{}, fmt.Errorf("guest facts: unexpected meminfo line %q", lines[2])
	}
	return guestFacts{Kernel: lines[0], CPUs: cpus, MemoryBytes: kb * 1024}, nil
}

// semver is a parsed MAJOR.MINOR.PATCH; pre-release and build suffixes are
// ignored (a "1.2.1-12-gabcdef" development build counts as 1.2.1).
type semver [3]int

func parseSemver(s string) (semver, error) {
	s = strings.TrimPrefix(strings.TrimSpace(s), "v")
	if i := strings.IndexAny(s, "-+ "); i >= 0 {
		s = s[:i]
	}
	parts := strings.Split(s, ".")
	if len(parts) < 2 || len(parts) > 3 {
		return semver{}, fmt.Errorf("version %q is not MAJOR.MINOR[.PATCH]", s)
	}
	var v semver
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return semver{}, fmt.Errorf("version %q is not MAJOR.MINOR[.PATCH]", s)
		}
		v[i] = n
	}
	return v, nil
}

func (v semver) less(w semver) bool {
	for i := range v {
		if v[i] != w[i] {
			return v[i] < w[i]
		}
	}
	return false
}

func (v semver) String() string { return fmt.Sprintf("%d.%d.%d", v[0], v[1], v[2]) }

// tail returns the last n lines of b, trimmed, for error messages.
func tail(b []byte, n int) string {
	s := strings.TrimRight(string(b), "\n")
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// errNotAnswering is the last reason a daemon probe failed.
var errNotAnswering = errors.New("no answer")

// probeVersion asks the daemon at url for GET /v1/version once.
func probeVersion(ctx context.Context, c *http.Client, url, token string) (wire.Version, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/"+wire.APIVersion+"/version", nil)
	if err != nil {
		return wire.Version{}, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		return wire.Version{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return wire.Version{}, err
	}
	if resp.StatusCode != http.StatusOK {
		return wire.Version{}, fmt.Errorf("%w: GET /v1/version answered %s: %s", errNotAnswering, resp.Status, tail(body, 3))
	}
	var v wire.Version
	if err := json.Unmarshal(body, &v); err != nil {
		return wire.Version{}, fmt.Errorf("GET /v1/version: decode %q: %w", tail(body, 3), err)
	}
	return v, nil
}

// waitVersion polls GET /v1/version until the daemon answers or timeout
// passes; it returns the last probe's error on timeout.
func waitVersion(ctx context.Context, c *http.Client, url, token string, timeout time.Duration) (wire.Version, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		v, err := probeVersion(ctx, c, url, token)
		if err == nil {
			return v, nil
		}
		select {
		case <-ctx.Done():
			return wire.Version{}, err
		case <-tick.C:
		}
	}
}
