package tokenfile

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRead(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, content string
		mode          os.FileMode
		want          string
		loose, bad    bool
	}{
		{"good", "abc123\n", 0o600, "abc123", false, false},
		{"loose", "abc123", 0o644, "abc123", true, false},
		{"empty", "\n", 0o600, "", false, true},
		{"spaces", "a b", 0o600, "", false, true},
	} {
		p := filepath.Join(dir, tc.name)
		require.NoError(t, os.WriteFile(p, []byte(tc.content), tc.mode))
		os.Chmod(p, tc.mode)
		tok, warn, err := Read(p)
		if tok != tc.want || (err != nil) != tc.bad || errors.Is(warn, ErrLoose) != tc.loose {
			t.Errorf("%s: Read = %q, %v, %v", tc.name, tok, warn, err)
		}
	}
	_, _, err := Read("")
	assert.Error(t, err, "no path accepted")
	_, _, err = Read(filepath.Join(dir, "missing"))
	assert.Error(t, err, "missing file accepted")
}
