package tokenfile

import (
	"errors"
	"fmt"
	"os"
	"strings"
)

// ErrLoose is wrapped by the warning Read returns along with a token whose
// file other users can read.
var ErrLoose = errors.New("token file is readable by other users")

// Read returns the one token in the file at path: non-empty, without
// spaces, surrounding white space trimmed. When the file is readable by
// group or others the token is returned with a warning wrapping ErrLoose.
func Read(path string) (token string, warning error, err error) {
	if path == "" {
		return "", nil, errors.New("no token file given")
	}
	fi, err := os.Stat(path)
	if err != nil {
		return "", nil, fmt.Errorf("token file: %w", err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", nil, fmt.Errorf("token file: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" || strings.ContainsAny(tok, " \t\r\n") {
		return "", nil, fmt.Errorf("token file %s: want one non-empty token without spaces", path)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		warning = fmt.Errorf("%w: %s has mode %v", ErrLoose, path, perm)
	}
	return tok, warning, nil
}
