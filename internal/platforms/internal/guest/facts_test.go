package guest

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"layerfs.dev/layerfs/internal/platforms"
)

func TestParseFacts(t *testing.T) {
	id, err := ParseFacts([]byte("6.8.0-51-generic\n2\nMemTotal:        8127228 kB\n"))
	want := platforms.Identity{Kernel: "6.8.0-51-generic", CPUs: 2, MemoryBytes: 8127228 * 1024}
	if assert.NoError(t, err, "ParseFacts") {
		assert.Equal(t, want, id, "ParseFacts")
	}
	for _, bad := range []string{"", "6.8\n2\n", "6.8\nzero\nMemTotal: 1 kB\n", "6.8\n2\nMemTotal: 1 MB\n", "6.8\n2\nMemFree: 1 kB\n"} {
		_, err := ParseFacts([]byte(bad))
		assert.Error(t, err, "ParseFacts(%q) accepted it", bad)
	}
}
