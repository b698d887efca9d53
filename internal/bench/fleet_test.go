package bench

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/internal/testenv"
)

// TestRunFleet: a small run of the fleet figures against this test
// binary's PostgreSQL and S3 server: every figure measured on every host
// it names, nothing failed, each open figure once per round, and the
// table shows all three hosts; the exec throughput ran execs on one, two
// and three daemons.
func TestRunFleet(t *testing.T) {
	testenv.RequireFUSE(t)
	rep, err := RunFleet(t.Context(), FleetConfig{
		URL:         testenv.StoreURL(t),
		WorkDir:     t.TempDir(),
		Files:       200,
		Samples:     3,
		Rounds:      2,
		ExecFor:     time.Second,
		ExecClients: 1,
		NewPlatform: localOnly,
	})
	require.NoError(t, err)
	require.Len(t, rep.Rows, 8)
	for i, r := range rep.Rows {
		assert.Empty(t, r.Errors, r.Name)
		hosts := FleetHosts
		switch {
		case strings.HasPrefix(r.Name, "fork") || strings.HasPrefix(r.Name, "commit") || strings.HasPrefix(r.Name, "import"):
			hosts = FleetHosts[:2] // measured where the project is made
		case strings.HasPrefix(r.Name, "first read over"):
			hosts = FleetHosts[1:] // over the embedded host's
			_, ok := r.Hosts[HostEmbedded]
			assert.False(t, ok, r.Name)
		}
		for _, h := range hosts {
			s, ok := r.Hosts[h]
			if assert.True(t, ok, "%s on %s", r.Name, h) {
				if i >= 2 { // the open figure's rows: a value per round
					assert.Equal(t, 2, s.N, "%s on %s", r.Name, h)
				}
				assert.Positive(t, s.P50, "%s on %s", r.Name, h)
			}
		}
	}
	require.Len(t, rep.Execs, 3)
	for i, e := range rep.Execs {
		assert.Empty(t, e.Error)
		assert.Equal(t, i+1, e.Daemons)
		require.Len(t, e.Execs, i+1)
		for d, n := range e.Execs {
			assert.Positive(t, n, "execs on daemon %d of %d", d+1, e.Daemons)
		}
		assert.Positive(t, e.Total)
	}
	var out strings.Builder
	require.NoError(t, rep.WriteTable(&out))
	for _, h := range FleetHosts {
		assert.Contains(t, out.String(), h)
	}
	assert.Contains(t, out.String(), "execs/s total")
	_, err = json.Marshal(rep)
	assert.NoError(t, err)
}
