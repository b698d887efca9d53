package maxprocs

import (
	"os"
	"runtime"
)

// Headroom is how many Ps WithHeadroom adds to the runtime's default (the
// CPUs the process may use, its cgroup's limit included).
const Headroom = 2

// WithHeadroom sets GOMAXPROCS to the runtime's default plus Headroom,
// unless the GOMAXPROCS environment variable chose a value, and returns
// the value in effect. Call it first in main: setting GOMAXPROCS stops the
// runtime from following later changes of the cgroup's CPU limit.
func WithHeadroom() int {
	n := runtime.GOMAXPROCS(0)
	if os.Getenv("GOMAXPROCS") != "" {
		return n
	}
	runtime.GOMAXPROCS(n + Headroom)
	return n + Headroom
}
