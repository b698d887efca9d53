package criu

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"

	"layerfs.dev/layerfs/wire/errclass"
)

// BinaryEnv names a criu command to run instead of the installed one.
const BinaryEnv = "LAYERFS_CRIU"

// DefaultBinary is where scripts/ensure-criu installs criu's wrapper.
const DefaultBinary = "/var/cache/layerfs/criu/bin/criu"

// ErrUnavailable: no criu can run here (not installed, or it fails its
// own start).
var ErrUnavailable = errclass.New(errclass.Unavailable, "checkpoints unavailable")

// ErrUnsupported: the tree holds something that cannot be checkpointed
// (Scan's problems, or CRIU's refusal).
var ErrUnsupported = errclass.New(errclass.Invalid, "cannot be checkpointed")

var findBinary = sync.OnceValues(func() (string, error) {
	cands := []string{os.Getenv(BinaryEnv), DefaultBinary}
	if p, err := exec.LookPath("criu"); err == nil {
		cands = append(cands, p)
	}
	for _, c := range cands {
		if c == "" {
			continue
		}
		if out, err := exec.Command(c, "--version").Output(); err == nil && bytes.Contains(out, []byte("Version:")) {
			return c, nil
		}
	}
	return "", fmt.Errorf("%w: no criu found (%s, %s or criu on PATH); scripts/ensure-criu installs it", ErrUnavailable, BinaryEnv, DefaultBinary)
})

// Binary is the criu command to run (see the package comment).
func Binary() (string, error) { return findBinary() }

// Failure is a dump or restore that criu refused or failed: its log's
// errors, the reason first-hand.
type Failure struct {
	Op     string   // "dump" or "restore"
	Errors []string // the log's error lines, in order
	Log    string   // the log file, when kept
	Exit   error    // how criu ended
}

func (f *Failure) Error() string {
	msg := "criu " + f.Op + " failed"
	if len(f.Errors) > 0 {
		// The first errors are the cause; what follows them is criu
		// unwinding.
		n := min(len(f.Errors), 3)
		msg += ": " + strings.Join(f.Errors[:n], "; ")
	} else if f.Exit != nil {
		msg += ": " + f.Exit.Error()
	}
	return msg
}

func (f *Failure) Unwrap() error { return f.Exit }

// benign are log errors criu reports and goes on from: not a cause.
var benign = []string{
	"Can't setup RLIMIT_NOFILE", // no CAP_SYS_RESOURCE: it keeps the limit it has
	"cgroupd: recv req error",   // its cgroup helper's end, after a failure
}

// logErrors returns the error lines of criu's log at path, without
// criu's timestamps and source positions.
func logErrors(path string) []string {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		l := sc.Text()
		i := strings.Index(l, "Error (")
		if i < 0 {
			continue
		}
		skip := false
		for _, b := range benign {
			skip = skip || strings.Contains(l, b)
		}
		if skip {
			continue
		}
		msg := l[i:]
		if j := strings.Index(msg, "): "); j >= 0 {
			msg = msg[j+3:]
		}
		if msg != "Dumping FAILED." && msg != "Restoring FAILED." {
			out = append(out, strings.TrimSpace(msg))
		}
	}
	return out
}

// run runs criu with args, its log in workDir/OP.log; a failure is of
// class (with the log's errors in its Failure), or Unavailable when ctx
// ended it.
func run(ctx context.Context, op string, class error, workDir string, args []string, configure func(*exec.Cmd)) error {
	bin, err := Binary()
	if err != nil {
		return err
	}
	logPath := filepath.Join(workDir, op+".log")
	args = append([]string{op, "--work-dir", workDir, "--log-file", logPath, "-v2"}, args...)
	cmd := exec.CommandContext(ctx, bin, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if configure != nil {
		configure(cmd)
	}
	if err := cmd.Run(); err != nil {
		f := &Failure{Op: op, Errors: logErrors(logPath), Log: logPath, Exit: err}
		if len(f.Errors) == 0 && stderr.Len() > 0 {
			f.Errors = []string{strings.TrimSpace(stderr.String())}
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%w: criu %s: %w", errclass.Unavailable, op, errors.Join(ctx.Err(), f))
		}
		return fmt.Errorf("%w: %w", class, f)
	}
	return nil
}
