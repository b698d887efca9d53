package mcpserver

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"layerfs.dev/layerfs/client"
)

type execIn struct {
	Workspace      string   `json:"workspace" jsonschema:"the workspace id"`
	Command        string   `json:"command,omitempty" jsonschema:"a bash command line, run as bash -o pipefail -c COMMAND; give this or argv"`
	Argv           []string `json:"argv,omitempty" jsonschema:"a program and its arguments, run without a shell; give this or command"`
	TimeoutSeconds float64  `json:"timeout_seconds,omitempty" jsonschema:"wall-clock limit in seconds; past it the command is killed and timed_out is true (default: the daemon's)"`
	Stdin          string   `json:"stdin,omitempty" jsonschema:"text fed to the command's standard input"`
	Env            []string `json:"env,omitempty" jsonschema:"extra environment variables as NAME=VALUE"`
	Dir            string   `json:"dir,omitempty" jsonschema:"working directory relative to the workspace root (default: the root)"`
}

type receiptOut struct {
	WallMs       float64 `json:"wall_ms" jsonschema:"the exec's time on the daemon, request to result"`
	CommandMs    float64 `json:"command_ms" jsonschema:"the command's own run time"`
	LaunchMs     float64 `json:"launch_ms" jsonschema:"wall_ms - command_ms: the sandbox's fixed cost"`
	FUSERequests int64   `json:"fuse_requests" jsonschema:"file system requests the command made"`
	Platform     string  `json:"platform,omitempty"`
}

type execOut struct {
	ExitCode        int        `json:"exit_code"`
	Signal          string     `json:"signal,omitempty" jsonschema:"the signal that ended the command, if one did"`
	TimedOut        bool       `json:"timed_out"`
	Stdout          string     `json:"stdout"`
	Stderr          string     `json:"stderr"`
	StdoutTruncated bool       `json:"stdout_truncated" jsonschema:"the middle of stdout was cut"`
	StderrTruncated bool       `json:"stderr_truncated" jsonschema:"the middle of stderr was cut"`
	Receipt         receiptOut `json:"receipt"`
}

func (s *Server) exec(ctx context.Context, req *mcp.CallToolRequest, c *client.Client, in execIn) (execOut, error) {
	if (in.Command == "") == (len(in.Argv) == 0) {
		return execOut{}, badInput("give exactly one of command (a bash command line) and argv (a program and its arguments)")
	}
	if in.TimeoutSeconds < 0 {
		return execOut{}, badInput("timeout_seconds must not be negative (got %v)", in.TimeoutSeconds)
	}
	ws, err := handle(ctx, c, in.Workspace)
	if err != nil {
		return execOut{}, err
	}
	p := &progress{ctx: ctx, req: req}
	stdout := &headTail{max: s.cfg.MaxOutput, progress: p}
	stderr := &headTail{max: s.cfg.MaxOutput, progress: p}
	opts := client.ExecOptions{
		Timeout: time.Duration(in.TimeoutSeconds * float64(time.Second)),
		Env:     in.Env, Dir: in.Dir, Stdin: []byte(in.Stdin),
		Stdout: stdout, Stderr: stderr,
	}
	var res *client.ExecResult
	if in.Command != "" {
		res, err = ws.Exec(ctx, in.Command, opts)
	} else {
		res, err = ws.ExecArgv(ctx, in.Argv, opts)
	}
	if err != nil {
		return execOut{}, err
	}
	r := res.Receipt
	out := execOut{ExitCode: res.ExitCode, Signal: res.Signal, TimedOut: res.TimedOut,
		Stdout: stdout.text(), Stderr: stderr.text(),
		StdoutTruncated: stdout.cut > 0, StderrTruncated: stderr.cut > 0,
		Receipt: receiptOut{WallMs: ms(r.WallNs), CommandMs: ms(r.CommandNs), LaunchMs: ms(r.LaunchNs),
			FUSERequests: r.FUSE.Requests, Platform: r.Platform}}
	if res.OutputTruncated {
		// The daemon's own cap cut the end of a stream.
		out.StdoutTruncated, out.StderrTruncated = true, true
	}
	return out, nil
}

// headTail keeps the first and the last max/2 bytes written to it and
// counts what it cut in between: a failing build's first error and its
// summary both survive.
type headTail struct {
	max      int
	head     []byte
	tail     []byte // a ring once full: tail[start:] + tail[:start]
	start    int
	cut      int64
	progress *progress
}

func (h *headTail) Write(p []byte) (int, error) {
	h.progress.report(p)
	n := len(p)
	if room := h.max/2 - len(h.head); room > 0 {
		k := min(room, len(p))
		h.head = append(h.head, p[:k]...)
		p = p[k:]
	}
	keep := h.max - h.max/2
	for _, b := range p {
		if len(h.tail) < keep {
			h.tail = append(h.tail, b)
			continue
		}
		h.tail[h.start] = b
		h.start = (h.start + 1) % keep
		h.cut++
	}
	return n, nil
}

// text is what was kept, as valid UTF-8, with a marker where bytes were cut.
func (h *headTail) text() string {
	var b strings.Builder
	b.Write(h.head)
	if h.cut > 0 {
		fmt.Fprintf(&b, "\n[... %d bytes cut ...]\n", h.cut)
	}
	b.Write(h.tail[h.start:])
	b.Write(h.tail[:h.start])
	return strings.ToValidUTF8(b.String(), "\uFFFD")
}

// progress forwards exec output as MCP progress notifications when the
// client asked for them (a progress token in the call), so a client sees a
// long command's output as it comes.
type progress struct {
	ctx  context.Context
	req  *mcp.CallToolRequest
	mu   sync.Mutex
	sent int64
}

// maxProgressMessage bounds one notification's text.
const maxProgressMessage = 4 << 10

func (p *progress) report(b []byte) {
	if p == nil || p.req == nil || p.req.Session == nil || p.req.Params.GetProgressToken() == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.sent += int64(len(b))
	msg := strings.ToValidUTF8(string(b[:min(len(b), maxProgressMessage)]), "\uFFFD")
	// Best effort: a client that cannot take a notification still gets the result.
	_ = p.req.Session.NotifyProgress(p.ctx, &mcp.ProgressNotificationParams{
		ProgressToken: p.req.Params.GetProgressToken(), Progress: float64(p.sent), Message: msg})
}

// readPrefix reads up to max bytes of a file, stopping the transfer there.
func readPrefix(ctx context.Context, ws *client.Workspace, path string, max int) ([]byte, bool, error) {
	w := &prefix{max: max}
	_, err := ws.ReadTo(ctx, path, w)
	if errors.Is(err, errPrefixFull) {
		return w.buf, true, nil
	}
	return w.buf, false, err
}

var errPrefixFull = errors.New("read limit reached")

type prefix struct {
	buf []byte
	max int
}

func (w *prefix) Write(p []byte) (int, error) {
	room := w.max - len(w.buf)
	if len(p) > room {
		w.buf = append(w.buf, p[:room]...)
		return room, errPrefixFull
	}
	w.buf = append(w.buf, p...)
	return len(p), nil
}

// encode returns data as text when it is UTF-8, else as base64.
func encode(data []byte) (content, encoding string) {
	if utf8.Valid(data) {
		return string(data), "utf-8"
	}
	return base64.StdEncoding.EncodeToString(data), "base64"
}

func fsMode(m uint64) fs.FileMode { return fs.FileMode(m).Perm() }
