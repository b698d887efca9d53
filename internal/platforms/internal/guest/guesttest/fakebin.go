package guesttest

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// FakeBin puts the package's testdata/fakebin, where its stand-in tool
// scripts live, first on PATH for the rest of the test, and points the
// environment variable logVar at a fresh file for the fakes to log their
// command lines to; it returns that file. The fakes let a test run a
// platform through the real os/exec runner (guest.ExecRunner).
func FakeBin(t *testing.T, logVar string) string {
	t.Helper()
	bin, err := filepath.Abs(filepath.Join("testdata", "fakebin"))
	require.NoError(t, err)
	log := filepath.Join(t.TempDir(), "argv.log")
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	t.Setenv(logVar, log)
	return log
}
