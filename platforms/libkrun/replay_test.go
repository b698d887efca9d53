package libkrun

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

// A scenario is a recorded conversation with msb: the exact command
// lines the platform must make, in order, and what it answered.
// Outputs follow microsandbox's sources (see doc.go); argv
// elements and outputs may name a testdata file as "@file" and use the
// variables the test sets ($STATEDIR, $DAEMON, $PORT).
type scenario struct {
	Comment string `json:"comment"`
	Calls   []struct {
		Argv   []string `json:"argv"`
		Stdout string   `json:"stdout"`
		Stderr string   `json:"stderr"`
		Exit   int      `json:"exit"`
		// Missing: the tool is not installed (exec.ErrNotFound).
		Missing bool `json:"missing"`
		// Hook names a test action run when the call is made, e.g. to check
		// a command's effect or to start a daemon.
		Hook string `json:"hook"`
	} `json:"calls"`
}

// replayer is a Runner that checks each command line against a scenario
// and answers with the recorded output.
type replayer struct {
	t     *testing.T
	sc    scenario
	vars  map[string]string
	hooks map[string]func()

	mu   sync.Mutex
	next int
}

func newReplayer(t *testing.T, file string, vars map[string]string) *replayer {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", file))
	if err != nil {
		t.Fatal(err)
	}
	r := &replayer{t: t, vars: vars, hooks: map[string]func(){}}
	if err := json.Unmarshal(b, &r.sc); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
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
func (r *replayer) expandString(s string) string {
	if name, ok := strings.CutPrefix(s, "@"); ok {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			r.t.Fatal(err)
		}
		s = strings.TrimSuffix(string(b), "\n")
	}
	for k, v := range r.vars {
		s = strings.ReplaceAll(s, "$"+k, v)
	}
	return s
}

func (r *replayer) expand(argv []string) []string {
	out := make([]string, len(argv))
	for i, a := range argv {
		out[i] = r.expandString(a)
	}
	return out
}

func (r *replayer) Run(ctx context.Context, argv []string, stdin io.Reader) (Result, error) {
	r.mu.Lock()
	if r.next >= len(r.sc.Calls) {
		r.mu.Unlock()
		r.t.Errorf("unexpected call %q after the %d recorded ones", argv, len(r.sc.Calls))
		return Result{ExitCode: 99}, nil
	}
	c := r.sc.Calls[r.next]
	r.next++
	want := r.expand(c.Argv)
	r.mu.Unlock()
	if !slices.Equal(argv, want) {
		r.t.Errorf("call %d: command line\n got: %q\nwant: %q", r.next, argv, want)
	}
	if c.Hook != "" {
		h, ok := r.hooks[c.Hook]
		if !ok {
			r.t.Fatalf("scenario names hook %q, which the test did not set", c.Hook)
		}
		h()
	}
	if c.Missing {
		return Result{}, fmt.Errorf("find %s: %w", argv[0], exec.ErrNotFound)
	}
	return Result{Stdout: []byte(r.expandString(c.Stdout)), Stderr: []byte(r.expandString(c.Stderr)), ExitCode: c.Exit}, nil
}
