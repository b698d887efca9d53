package report

import (
	"os"
	"strings"
)

// LoadAverage is the machine's 1, 5 and 15 minute load averages as
// /proc/loadavg has them ("unknown" elsewhere). Benches print it next to
// their figures: they are only comparable between runs at similar load.
func LoadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}
