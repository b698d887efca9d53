package tokenfile

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
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
		if err := os.WriteFile(p, []byte(tc.content), tc.mode); err != nil {
			t.Fatal(err)
		}
		os.Chmod(p, tc.mode)
		tok, warn, err := Read(p)
		if tok != tc.want || (err != nil) != tc.bad || errors.Is(warn, ErrLoose) != tc.loose {
			t.Errorf("%s: Read = %q, %v, %v", tc.name, tok, warn, err)
		}
	}
	if _, _, err := Read(""); err == nil {
		t.Error("no path accepted")
	}
	if _, _, err := Read(filepath.Join(dir, "missing")); err == nil {
		t.Error("missing file accepted")
	}
}
