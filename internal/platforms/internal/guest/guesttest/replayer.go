package guesttest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/internal/platforms/internal/guest"
)

// Scenario is a recorded conversation with a tool. Argv elements and
// outputs may name a file in testdata/ as "@file" (replaced by its text
// without the final newline) and use the variables the test passes to
// NewReplayer as $NAME.
type Scenario struct {
	Comment string `json:"comment"`
	Calls   []Call `json:"calls"`
}

// Call is one recorded command line and the tool's answer.
type Call struct {
	Argv   []string `json:"argv"`
	Stdout string   `json:"stdout"`
	Stderr string   `json:"stderr"`
	Exit   int      `json:"exit"`
	// Missing: the tool is not installed (exec.ErrNotFound).
	Missing bool `json:"missing"`
	// Hook names a test action run when the call is made, e.g. to check a
	// file the command is given or to start a daemon.
	Hook string `json:"hook"`
}

// Replayer is a guest.Runner that checks each command line against a
// Scenario and answers with the recorded output.
type Replayer struct {
	// Hooks are the actions a scenario's calls name; set them before the
	// platform runs.
	Hooks map[string]func()

	t    *testing.T
	sc   Scenario
	vars map[string]string

	mu   sync.Mutex
	next int
}

var _ guest.Runner = (*Replayer)(nil)

// NewReplayer loads testdata/file. When the test ends, it fails the test
// if recorded calls were never made.
func NewReplayer(t *testing.T, file string, vars map[string]string) *Replayer {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", file))
	require.NoError(t, err)
	r := &Replayer{Hooks: map[string]func(){}, t: t, vars: vars}
	require.NoError(t, json.Unmarshal(b, &r.sc), "%s", file)
	t.Cleanup(func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.next != len(r.sc.Calls) {
			t.Errorf("%s: %d of %d recorded calls were never made; next: %q", file, len(r.sc.Calls)-r.next, len(r.sc.Calls), r.expand(r.sc.Calls[r.next].Argv))
		}
	})
	return r
}

// expandString substitutes variables, and a whole "@file" by the file's
// text (without its final newline).
func (r *Replayer) expandString(s string) string {
	if name, ok := strings.CutPrefix(s, "@"); ok {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		require.NoError(r.t, err)
		s = strings.TrimSuffix(string(b), "\n")
	}
	for k, v := range r.vars {
		s = strings.ReplaceAll(s, "$"+k, v)
	}
	return s
}

func (r *Replayer) expand(argv []string) []string {
	out := make([]string, len(argv))
	for i, a := range argv {
		out[i] = r.expandString(a)
	}
	return out
}

// Run implements guest.Runner.
func (r *Replayer) Run(ctx context.Context, argv []string, stdin io.Reader) (guest.Result, error) {
	r.mu.Lock()
	if r.next >= len(r.sc.Calls) {
		r.mu.Unlock()
		r.t.Errorf("unexpected call %q after the %d recorded ones", argv, len(r.sc.Calls))
		return guest.Result{ExitCode: 99}, nil
	}
	c := r.sc.Calls[r.next]
	r.next++
	n := r.next
	want := r.expand(c.Argv)
	r.mu.Unlock()
	assert.Equal(r.t, want, argv, "call %d: command line", n)
	if c.Hook != "" {
		h, ok := r.Hooks[c.Hook]
		if !ok {
			r.t.Fatalf("scenario names hook %q, which the test did not set", c.Hook)
		}
		h()
	}
	if c.Missing {
		return guest.Result{}, fmt.Errorf("find %s: %w", argv[0], exec.ErrNotFound)
	}
	return guest.Result{Stdout: []byte(r.expandString(c.Stdout)), Stderr: []byte(r.expandString(c.Stderr)), ExitCode: c.Exit}, nil
}
