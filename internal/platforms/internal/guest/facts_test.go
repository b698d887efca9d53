package guest

import (
	"testing"

	"layerfs.dev/layerfs/internal/platforms"
)

func TestParseFacts(t *testing.T) {
	id, err := ParseFacts([]byte("6.8.0-51-generic\n2\nMemTotal:        8127228 kB\n"))
	want := platforms.Identity{Kernel: "6.8.0-51-generic", CPUs: 2, MemoryBytes: 8127228 * 1024}
	if err != nil || id != want {
		t.Errorf("ParseFacts = %+v, %v; want %+v", id, err, want)
	}
	for _, bad := range []string{"", "6.8\n2\n", "6.8\nzero\nMemTotal: 1 kB\n", "6.8\n2\nMemTotal: 1 MB\n", "6.8\n2\nMemFree: 1 kB\n"} {
		if _, err := ParseFacts([]byte(bad)); err == nil {
			t.Errorf("ParseFacts(%q) accepted it", bad)
		}
	}
}
