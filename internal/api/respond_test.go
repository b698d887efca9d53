package api

import (
	"fmt"
	"testing"

	"layerfs.dev/layerfs/wire"
)

// A typed error answered again (a merge's conflicts) names its class once:
// the client puts the code before the message.
func TestClassifyNamesClassOnce(t *testing.T) {
	we := &wire.Error{Code: wire.CodeConflict, Message: "merge B into A: 1 conflicts, nothing published: [a.txt (content)]",
		Conflicts: []wire.Conflict{{Path: "a.txt", Kind: "content"}}}
	for _, tc := range []struct {
		err  error
		want string
	}{
		{we, "conflict: merge B into A: 1 conflicts, nothing published: [a.txt (content)]"},
		{fmt.Errorf("project demo: %w", we), "conflict: project demo: merge B into A: 1 conflicts, nothing published: [a.txt (content)]"},
	} {
		_, e, _ := classify(tc.err)
		if got := e.Error(); got != tc.want {
			t.Errorf("classify(%q) reads %q, want %q", tc.err, got, tc.want)
		}
		if len(e.Conflicts) != 1 {
			t.Errorf("classify(%q): conflicts %v, want a.txt's", tc.err, e.Conflicts)
		}
	}
}
