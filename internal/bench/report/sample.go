package report

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	"layerfs.dev/layerfs/internal/platforms"
)

// Arm is which side of the comparison a sample ran on.
type Arm string

// The two arms: the body in a LayerFS workspace, and the same body in a
// plain directory on the same disk through the same sandbox.
const (
	LayerFS Arm = "layerfs"
	Native  Arm = "native"
)

// Status is how a sample ended.
type Status string

// Sample outcomes. A failed or ineligible sample is kept and shown, never
// turned into a zero.
const (
	OK         Status = "ok"         // ran, exited 0 and verified
	Failed     Status = "failed"     // an error, a non-zero exit or a failed verification
	Ineligible Status = "ineligible" // the platform cannot run the cell (its probe failed)
)

// SQLStats is what SQLite did in one phase of a sample.
type SQLStats struct {
	Statements   int64 `json:"statements"`
	Transactions int64 `json:"transactions,omitempty"`
	RowsWritten  int64 `json:"rows_written"`
	BytesWritten int64 `json:"bytes_written"`
}

// Sample is one timed run of one cell on one platform and arm. The runner
// fills it from the exec result and the receipts; durations are JSON
// nanoseconds. Fields that do not apply to the native arm (mount, commit,
// FUSE, SQLite, Store) stay zero there and are not summarized for it.
type Sample struct {
	Cell     string             `json:"cell"`
	Platform string             `json:"platform"`
	Arm      Arm                `json:"arm"`
	Index    int                `json:"index"` // 0.. within cell, platform and arm
	Start    time.Time          `json:"start"`
	Identity platforms.Identity `json:"identity"`
	Status   Status             `json:"status"`
	Error    string             `json:"error,omitempty"` // why it failed or is ineligible

	ExitCode int `json:"exit_code"`
	// Command is the body's time on the sandbox's own clock (date +%s%N
	// before and after it, inside); ExecWall is the SDK's exec call from
	// entry to return; Overhead is ExecWall minus Command.
	Command  time.Duration `json:"command_ns"`
	ExecWall time.Duration `json:"exec_wall_ns"`
	Overhead time.Duration `json:"overhead_ns"`
	Mount    time.Duration `json:"mount_ns"`
	Unmount  time.Duration `json:"unmount_ns"`
	Commit   time.Duration `json:"commit_ns"`

	// Verified: the workspace after the run and a fresh workspace of the
	// commit made from it both passed the verifier (for the native arm:
	// the directory after the run).
	Verified    bool   `json:"verified"`
	VerifyError string `json:"verify_error,omitempty"`

	// Requests counts the FUSE requests the body caused, by opcode name;
	// RequestTime is the daemon's service time for them by opcode, and
	// DaemonTime their total.
	Requests    map[string]int64         `json:"fuse_requests,omitempty"`
	RequestTime map[string]time.Duration `json:"fuse_time_ns,omitempty"`
	DaemonTime  time.Duration            `json:"daemon_ns"`

	SQLMount  SQLStats `json:"sql_mount"`
	SQLRun    SQLStats `json:"sql_run"`
	SQLCommit SQLStats `json:"sql_commit"`

	StoreBytes   int64 `json:"store_bytes"`   // database and payload files after the commit
	OverlayBytes int64 `json:"overlay_bytes"` // the workspace's upper layer after the run

	// Phases is where the sample's wall time went, by step of the method
	// ("base", "warm-up", "open", "verify live", "commit", "verify commit",
	// "end", and "total"), as the runner saw it: what a platform spends
	// around the timed body, which a slow guest makes long.
	Phases map[string]time.Duration `json:"phases_ns,omitempty"`

	// Details pins anything else a reader needs (file system of the upper
	// layer, whether FUSE passthrough ran, cache state).
	Details map[string]string `json:"details,omitempty"`
}

// Good reports whether the sample counts towards medians: it ran, exited 0
// and verified.
func (s Sample) Good() bool {
	return s.Status == OK && s.Error == "" && s.ExitCode == 0 && s.Verified
}

// TotalRequests is the sum of Requests over opcodes.
func (s Sample) TotalRequests() int64 {
	var n int64
	for _, v := range s.Requests {
		n += v
	}
	return n
}

// Reason is the sample's error, or its verifier error, or its exit code:
// what a table shows for a sample that is not Good.
func (s Sample) Reason() string {
	switch {
	case s.Error != "":
		return s.Error
	case s.ExitCode != 0:
		return fmt.Sprintf("exit %d", s.ExitCode)
	case !s.Verified && s.VerifyError != "":
		return "verify: " + s.VerifyError
	case !s.Verified:
		return "not verified"
	}
	return ""
}

// Log appends samples as JSON lines, one per completed sample, so a run
// that stops half way keeps what it measured.
type Log struct {
	f *os.File
}

// OpenLog opens (creating or appending to) the JSON-lines file at path.
func OpenLog(path string) (*Log, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open sample log: %w", err)
	}
	return &Log{f: f}, nil
}

// Append writes s as one line, in a single write.
func (l *Log) Append(s Sample) error {
	if err := WriteSample(l.f, s); err != nil {
		return fmt.Errorf("append sample %s/%s/%s#%d: %w", s.Platform, s.Cell, s.Arm, s.Index, err)
	}
	return nil
}

// Close flushes the file to disk and closes it.
func (l *Log) Close() error {
	serr := l.f.Sync()
	if err := l.f.Close(); err != nil {
		return fmt.Errorf("close sample log: %w", err)
	}
	if serr != nil {
		return fmt.Errorf("sync sample log: %w", serr)
	}
	return nil
}

// WriteSample writes s to w as one JSON line.
func WriteSample(w io.Writer, s Sample) error {
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// ReadSamples reads a JSON-lines sample log; blank lines are skipped.
func ReadSamples(r io.Reader) ([]Sample, error) {
	var out []Sample
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	line := 0
	for sc.Scan() {
		line++
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		var s Sample
		if err := json.Unmarshal(b, &s); err != nil {
			return nil, fmt.Errorf("sample log line %d: %w", line, err)
		}
		out = append(out, s)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read sample log: %w", err)
	}
	return out, nil
}
