package guest_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

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
	ctx := context.Background()

	res, err := tool.Run(ctx, "list", "--json")
	if err != nil || string(res.Stdout) != "[]\n" || res.ExitCode != 0 {
		t.Errorf("Run = %q, exit %d, %v", res.Stdout, res.ExitCode, err)
	}
	if !strings.Contains(logged.String(), `level=DEBUG msg="demo: run" argv="[faketool list --json]"`) {
		t.Errorf("debug log:\n%s", logged.String())
	}
	if res, err := tool.Must(ctx, "list", "--json"); err != nil || string(res.Stdout) != "[]\n" {
		t.Errorf("Must of a command that succeeds = %q, %v", res.Stdout, err)
	}

	// A non-zero exit is the caller's to judge for Run, an error for Must.
	if res, err := tool.Run(ctx, "shell", "box", "false"); err != nil || res.ExitCode != 4 {
		t.Errorf("Run of a failing command = exit %d, %v; want exit 4 and no error", res.ExitCode, err)
	}
	res, err = tool.Must(ctx, "shell", "box", "false")
	if want := "demo: faketool shell exited with status 4: platform command failed; stderr:\none\ntwo\nthree"; !errors.Is(err, platforms.ErrCommand) || err.Error() != want || res.ExitCode != 4 {
		t.Errorf("Must of a failing command = exit %d, %v; want %q", res.ExitCode, err, want)
	}

	_, err = tool.Run(ctx, "start", "box")
	if want := "demo: faketool refuses root: platform unavailable"; !errors.Is(err, platforms.ErrUnavailable) || err.Error() != want {
		t.Errorf("Run of a command Refuse rejects: got %v, want %q", err, want)
	}
}

func TestToolMissing(t *testing.T) {
	tool := newTool(guesttest.NewReplayer(t, "tool-missing.json", nil), nil)
	ctx := context.Background()
	want := "demo: faketool not found in PATH (install faketool 1.1.0 or newer): platform unavailable"
	_, errRun := tool.Run(ctx, "list")
	_, errMust := tool.Must(ctx, "list")
	errVersion := tool.CheckVersion(ctx)
	for i, err := range []error{errRun, errMust, errVersion} {
		if !errors.Is(err, platforms.ErrUnavailable) || err.Error() != want {
			t.Errorf("call %d without the tool: got %v, want %q", i+1, err, want)
		}
	}
}

// TestToolCannotRun: an error other than a missing tool (here a context
// already canceled, through the real os/exec runner) names the command.
func TestToolCannotRun(t *testing.T) {
	guesttest.FakeBin(t, "FAKE_TOOL_LOG")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := newTool(guest.ExecRunner{}, nil).Run(ctx, "shell", "box", "sh", "-c", "true")
	if want := "demo: faketool shell box: faketool: context canceled"; !errors.Is(err, context.Canceled) || err.Error() != want {
		t.Errorf("Run with a canceled context: got %v, want %q", err, want)
	}
}

func TestToolCheckVersion(t *testing.T) {
	tool := newTool(guesttest.NewReplayer(t, "tool-version.json", nil), nil)
	ctx := context.Background()
	for _, want := range []string{
		"demo: faketool --version exited with status 2: platform unavailable; stderr:\na\nunknown flag: --version",
		"demo: unexpected faketool --version output \"Usage: faketool COMMAND\\n\": platform unavailable",
		"demo: faketool 0.9.7 is too old, LayerFS needs 1.1.0 or newer (upgrade: faketool self-update): platform unavailable",
	} {
		if err := tool.CheckVersion(ctx); !errors.Is(err, platforms.ErrUnavailable) || err.Error() != want {
			t.Errorf("CheckVersion: got %v, want %q", err, want)
		}
		if v := tool.Version(); v != "" {
			t.Errorf("Version after a failed check = %q", v)
		}
	}
	// The replayer fails the test on a call past the recorded ones, so the
	// checks after the first that passes must run nothing.
	for i := range 3 {
		if err := tool.CheckVersion(ctx); err != nil {
			t.Fatalf("CheckVersion #%d of 1.2.0-rc.1: %v", i+1, err)
		}
	}
	if v := tool.Version(); v != "1.2.0-rc.1" {
		t.Errorf("Version = %q, want the text faketool printed", v)
	}
}
