package errclass

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestClassesThroughWrapping(t *testing.T) {
	sentinel := New(NotFound, "no such thing")
	for _, tc := range []struct {
		name string
		err  error
		want *Class
		exit int
	}{
		{"sentinel", sentinel, NotFound, 3},
		{"wrapped sentinel", fmt.Errorf("project %q: %w", "p", sentinel), NotFound, 3},
		{"class itself", fmt.Errorf("x: %w", Busy), Busy, 5},
		{"merge conflict", fmt.Errorf("merge: %w", Conflict), Conflict, 11},
		{"unreachable", fmt.Errorf("port: %w", Unreachable), Unreachable, 12},
		{"Errorf", Errorf(Invalid, "field %q: bad", "name"), Invalid, 2},
		{"Errorf over another class", Errorf(Invalid, "path: %w", sentinel), Invalid, 2},
		{"ENOSPC", &fs.PathError{Op: "write", Path: "f", Err: syscall.ENOSPC}, NoSpace, 8},
		{"EDQUOT", fmt.Errorf("w: %w", syscall.EDQUOT), NoSpace, 8},
		{"canceled", fmt.Errorf("exec: %w", context.Canceled), Unavailable, 6},
		{"plain", errors.New("boom"), Internal, 1},
	} {
		if got := Of(tc.err); got != tc.want {
			t.Errorf("%s: Of = %v, want %v", tc.name, got, tc.want)
		}
		if got := ExitCode(tc.err); got != tc.exit {
			t.Errorf("%s: ExitCode = %d, want %d", tc.name, got, tc.exit)
		}
		// Errors that wrap a class are that class for errors.Is too;
		// errnos, context ends and plain errors are classified by Of only.
		if wraps := !errors.Is(tc.err, syscall.ENOSPC) && !errors.Is(tc.err, syscall.EDQUOT) &&
			!errors.Is(tc.err, context.Canceled) && tc.want != Internal; wraps && !errors.Is(tc.err, tc.want) {
			t.Errorf("%s: errors.Is(err, %v) = false", tc.name, tc.want)
		}
	}
	if !errors.Is(fmt.Errorf("a: %w", sentinel), sentinel) {
		t.Error("the sentinel itself is lost")
	}
	if err := Errorf(Invalid, "path: %w", sentinel); !errors.Is(err, NotFound) || err.Error() != "path: no such thing" {
		t.Errorf("Errorf lost what it wrapped: %v", err)
	}
	if Of(nil) != nil || ExitCode(nil) != 0 {
		t.Error("nil has a class")
	}
}

func TestCodesAndStatuses(t *testing.T) {
	seen := map[string]bool{}
	for _, c := range all {
		if seen[c.Code()] {
			t.Errorf("code %s twice", c.Code())
		}
		seen[c.Code()] = true
		assert.Equal(t, c, FromCode(c.Code()), "FromCode(%q)", c.Code())
		if c.ExitCode() == 0 {
			t.Errorf("%v exits 0", c)
		}
	}
	if FromCode("bogus") != nil {
		t.Error("an unknown code has a class")
	}
	for status, want := range map[int]*Class{400: Invalid, 404: NotFound, 409: Busy, 500: Internal, 503: Unavailable, 507: NoSpace, 421: Misdirected, 418: Internal} {
		if got := FromStatus(status); got != want {
			t.Errorf("FromStatus(%d) = %v, want %v", status, got, want)
		}
	}
}
