package guest

import (
	"bufio"
	"bytes"
	"fmt"
	"strconv"
	"strings"

	"layerfs.dev/layerfs/internal/platforms"
)

// FactsScript prints what Identity pins, one fact a line: kernel release,
// online CPUs, and the MemTotal line of /proc/meminfo. Platforms run it
// with `sh -c` in the guest.
const FactsScript = "uname -r; nproc; grep MemTotal /proc/meminfo"

// ParseFacts reads FactsScript's output into the guest's part of an
// Identity: Kernel, CPUs and MemoryBytes. The platform fills in the rest.
func ParseFacts(out []byte) (platforms.Identity, error) {
	var lines []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" {
			lines = append(lines, l)
		}
	}
	if len(lines) != 3 {
		return platforms.Identity{}, fmt.Errorf("guest facts: want 3 lines (uname -r, nproc, MemTotal), got %d: %q", len(lines), out)
	}
	cpus, err := strconv.Atoi(lines[1])
	if err != nil || cpus <= 0 {
		return platforms.Identity{}, fmt.Errorf("guest facts: nproc printed %q", lines[1])
	}
	// "MemTotal:       16377236 kB"
	f := strings.Fields(lines[2])
	if len(f) != 3 || f[0] != "MemTotal:" || f[2] != "kB" {
		return platforms.Identity{}, fmt.Errorf("guest facts: unexpected meminfo line %q", lines[2])
	}
	kb, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil || kb <= 0 {
		return platforms.Identity{}, fmt.Errorf("guest facts: unexpected meminfo line %q", lines[2])
	}
	return platforms.Identity{Kernel: lines[0], CPUs: cpus, MemoryBytes: kb * 1024}, nil
}
