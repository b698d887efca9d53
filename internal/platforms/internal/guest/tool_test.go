package guest_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/internal/platforms"
	"layerfs.dev/layerfs/internal/platforms/internal/guest"
	"layerfs.dev/layerfs/internal/platforms/internal/guest/guesttest"
)

// newTool is a Tool as a platform sets one up, over r.
func newTool(r guest.Runner, log *slog.Logger) *guest.Tool {
	return &guest.Tool{
		Argv0:   "faketool",
		Prefix:  "demo",
		Missing: "faketool not found in PATH (install faketool 1.1.0 or newer)",
		Refuse: func(res guest.Result) error {
			if res.ExitCode != 0 && strings.Contains(string(res.Stderr), "refusing to start as root") {
				return fmt.Errorf("faketool refuses root: %w", platforms.ErrUnavailable)
			}
			return nil
		},
		ParseVersion: func(out []byte) (guest.Semver, string, error) {
			rest, ok := strings.CutPrefix(strings.TrimSpace(string(out)), "faketool version ")
			if !ok {
				return guest.Semver{}, "", fmt.Errorf("unexpected faketool --version output %q", out)
			}
			v, err := guest.ParseSemver(rest)
			return v, rest, err
		},
		MinVersion: guest.Semver{1, 1, 0},
		Upgrade:    "upgrade: faketool self-update",
		Runner:     r,
		Log:        log,
	}
}

func TestToolRunAndMust(t *testing.T) {
	var logged bytes.Buffer
	tool := newTool(guesttest.NewReplayer(t, "tool-run.json", nil), slog.New(slog.NewTextHandler(&logged, &slog.HandlerOptions{Level: slog.LevelDebug})))
	ctx := t.Context()

	res, err := tool.Run(ctx, "list", "--json")
	if err != nil || string(res.Stdout) != "[]\n" || res.ExitCode != 0 {
		t.Errorf("Run = %q, exit %d, %v", res.Stdout, res.ExitCode, err)
	}
	assert.Contains(t, logged.String(), `level=DEBUG msg="demo: run" argv="[faketool list --json]"`, "debug log")
	if res, err := tool.Must(ctx, "list", "--json"); err != nil || string(res.Stdout) != "[]\n" {
		t.Errorf("Must of a command that succeeds = %q, %v", res.Stdout, err)
	}

	// A non-zero exit is the caller's to judge for Run, an error for Must.
	if res, err := tool.Run(ctx, "shell", "box", "false"); err != nil || res.ExitCode != 4 {
		t.Errorf("Run of a failing command = exit %d, %v; want exit 4 and no error", res.ExitCode, err)
	}
	res, err = tool.Must(ctx, "shell", "box", "false")
	assert.ErrorIs(t, err, platforms.ErrCommand, "Must of a failing command")
	assert.EqualError(t, err, "demo: faketool shell exited with status 4: platform command failed; stderr:\none\ntwo\nthree", "Must of a failing command")
	assert.Equal(t, 4, res.ExitCode, "Must of a failing command: exit")

	_, err = tool.Run(ctx, "start", "box")
	assert.ErrorIs(t, err, platforms.ErrUnavailable, "Run of a command Refuse rejects")
	assert.EqualError(t, err, "demo: faketool refuses root: platform unavailable", "Run of a command Refuse rejects")
}

func TestToolMissing(t *testing.T) {
	tool := newTool(guesttest.NewReplayer(t, "tool-missing.json", nil), nil)
	ctx := t.Context()
	want := "demo: faketool not found in PATH (install faketool 1.1.0 or newer): platform unavailable"
	_, errRun := tool.Run(ctx, "list")
	_, errMust := tool.Must(ctx, "list")
	errVersion := tool.CheckVersion(ctx)
	for i, err := range []error{errRun, errMust, errVersion} {
		assert.ErrorIs(t, err, platforms.ErrUnavailable, "call %d without the tool", i+1)
		assert.EqualError(t, err, want, "call %d without the tool", i+1)
	}
}

// TestToolCannotRun: an error other than a missing tool (here a context
// already canceled, through the real os/exec runner) names the command.
func TestToolCannotRun(t *testing.T) {
	guesttest.FakeBin(t, "FAKE_TOOL_LOG")
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := newTool(guest.ExecRunner{}, nil).Run(ctx, "shell", "box", "sh", "-c", "true")
	assert.ErrorIs(t, err, context.Canceled, "Run with a canceled context")
	assert.EqualError(t, err, "demo: faketool shell box: faketool: context canceled", "Run with a canceled context")
}

func TestToolCheckVersion(t *testing.T) {
	tool := newTool(guesttest.NewReplayer(t, "tool-version.json", nil), nil)
	ctx := t.Context()
	for _, want := range []string{
		"demo: faketool --version exited with status 2: platform unavailable; stderr:\na\nunknown flag: --version",
		"demo: platform unavailable: unexpected faketool --version output \"Usage: faketool COMMAND\\n\"",
		"demo: faketool 0.9.7 is too old, LayerFS needs 1.1.0 or newer (upgrade: faketool self-update): platform unavailable",
	} {
		err := tool.CheckVersion(ctx)
		assert.ErrorIs(t, err, platforms.ErrUnavailable, "CheckVersion")
		assert.EqualError(t, err, want, "CheckVersion")
		assert.Equal(t, "", tool.Version(), "Version after a failed check")
	}
	// The replayer fails the test on a call past the recorded ones, so the
	// checks after the first that passes must run nothing.
	for i := range 3 {
		require.NoError(t, tool.CheckVersion(ctx), "CheckVersion #%d of 1.2.0-rc.1", i+1)
	}
	assert.Equal(t, "1.2.0-rc.1", tool.Version(), "Version: want the text faketool printed")
}
