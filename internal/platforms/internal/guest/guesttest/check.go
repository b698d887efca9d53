package guesttest

import (
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/internal/platforms"
)

// New applies mod, when not nil, to cfg and makes a platform of it with
// newPlatform (a platform package's New), failing the test on an error.
// It lets a test start from one good Config and change a field or two.
func New[C, P any](t *testing.T, newPlatform func(C) (P, error), cfg C, mod func(*C)) P {
	t.Helper()
	if mod != nil {
		mod(&cfg)
	}
	p, err := newPlatform(cfg)
	require.NoError(t, err)
	return p
}

// Up brings p up times times in a row, failing the test on the first
// error: Up must do nothing more once the guest daemon answers.
func Up(t *testing.T, p platforms.Platform, times int) {
	t.Helper()
	for i := range times {
		require.NoError(t, p.Up(t.Context()), "Up #%d", i+1)
	}
}

// WantError fails the test unless err wraps want and its message mentions
// each of mentions.
func WantError(t *testing.T, err, want error, mentions ...string) {
	t.Helper()
	require.ErrorIs(t, err, want)
	for _, s := range mentions {
		assert.ErrorContains(t, err, s)
	}
}

// WantLog fails the test unless the fake tools logged (see FakeBin)
// exactly want: each command line one argument a line, then "--".
func WantLog(t *testing.T, log, want string) {
	t.Helper()
	got, err := os.ReadFile(log)
	require.NoError(t, err)
	assert.Equal(t, want, string(got), "what the tool saw")
}

// NameCase is a project name and the guest name derived from it.
type NameCase struct{ Project, Want string }

// NameCases are the names every platform derives alike (guest.Name): kept
// as they are, lower-cased and hashed, and cleaned of what a path would
// make of them.
func NameCases() []NameCase {
	return []NameCase{
		{"demo", "layerfs-demo"},
		{"my-app2", "layerfs-my-app2"},
		{"My App", "layerfs-my-app-96c6f4"},
		{"my_app", "layerfs-my-app-3fe582"},
		{"../../etc", "layerfs-etc-74ccf3"},
	}
}

// CheckNames fails the test unless name (guest.Name, or a platform's
// wrapper of it) derives each of NameCases as it should.
func CheckNames(t *testing.T, fn string, name func(project string) (string, error)) {
	t.Helper()
	for _, tc := range NameCases() {
		got, err := name(tc.Project)
		if assert.NoError(t, err, "%s(%q)", fn, tc.Project) {
			assert.Equal(t, tc.Want, got, "%s(%q)", fn, tc.Project)
		}
	}
}

// DownAgain runs Down on a platform that is already down, which must
// succeed (a missing guest is not an error), and checks that the platform
// then says it is not up: Identity, and Endpoint of a remote platform, wrap
// platforms.ErrNotUp.
func DownAgain(t *testing.T, p platforms.Platform) {
	t.Helper()
	ctx := t.Context()
	require.NoError(t, p.Down(ctx), "second Down")
	_, err := p.Identity(ctx)
	assert.ErrorIs(t, err, platforms.ErrNotUp, "Identity after Down")
	if r, ok := p.(platforms.Remote); ok {
		_, _, err := r.Endpoint(ctx)
		assert.ErrorIs(t, err, platforms.ErrNotUp, "Endpoint after Down")
	}
}

// UpWithoutTool makes a platform of cfg with newPlatform and runs Up
// through the real os/exec runner with nothing on PATH: it must fail with
// platforms.ErrUnavailable, and its message mention each of mentions (the
// install hint).
func UpWithoutTool[C any, P platforms.Platform](t *testing.T, newPlatform func(C) (P, error), cfg C, mentions ...string) {
	t.Helper()
	t.Setenv("PATH", t.TempDir())
	p := New(t, newPlatform, cfg, nil)
	WantError(t, p.Up(t.Context()), platforms.ErrUnavailable, mentions...)
}
