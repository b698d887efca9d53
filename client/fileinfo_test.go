package client_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/client"
)

func TestStatAndList(t *testing.T) {
	ctx := t.Context()
	c := dial(t)
	p := project(t, c)
	ws, err := c.CreateWorkspace(ctx, client.WorkspaceSpec{Project: p, Branch: "main"})
	require.NoError(t, err)
	for _, f := range []string{"src/a.go", "src/b.go", "src/deep/c.go", "README"} {
		require.NoError(t, ws.WriteFile(ctx, f, []byte(f), 0o640))
	}
	fi, err := ws.Stat(ctx, "src/a.go")
	if err != nil || fi.Type != "file" || fi.Size != 8 || fi.Mode != 0o640 || fi.Path != "src/a.go" {
		t.Errorf("stat = %+v, %v", fi, err)
	}
	if fi, err := ws.Stat(ctx, "src"); err != nil || fi.Type != "dir" {
		t.Errorf("stat dir = %+v, %v", fi, err)
	}
	page, err := ws.List(ctx, "src", client.ListOptions{})
	if err != nil || len(page.Entries) != 3 || page.Entries[2].Path != "src/deep" || page.Next != "" {
		t.Errorf("list src = %+v, %v", page, err)
	}
	page, err = ws.List(ctx, ".", client.ListOptions{Recursive: true, Limit: 2})
	if err != nil || len(page.Entries) != 2 || page.Next != page.Entries[1].Path {
		t.Errorf("first page = %+v, %v", page, err)
	}
	all, err := ws.ListAll(ctx, ".", true)
	if err != nil || len(all) != 6 {
		t.Errorf("list all = %+v, %v", all, err)
	}
	// A leading "/" is the workspace root: "/etc" is just not there.
	if _, err := ws.Stat(ctx, "/etc"); !client.IsNotFound(err) {
		t.Errorf("stat /etc: %v (want not_found)", err)
	}
	for _, bad := range []string{"../etc", "/../etc", "a\x00b"} {
		if _, err := ws.Stat(ctx, bad); !client.IsInvalid(err) {
			t.Errorf("stat %q: %v (want invalid_argument)", bad, err)
		}
		if _, err := ws.List(ctx, bad, client.ListOptions{}); !client.IsInvalid(err) {
			t.Errorf("list %q: %v (want invalid_argument)", bad, err)
		}
	}
	if _, err := ws.Stat(ctx, "missing"); !client.IsNotFound(err) {
		t.Errorf("stat missing: %v", err)
	}
	if _, err := ws.List(ctx, "README", client.ListOptions{}); !client.IsInvalid(err) {
		t.Errorf("list a file: %v", err)
	}
	if _, err := ws.List(ctx, ".", client.ListOptions{Limit: 1 << 20}); !client.IsInvalid(err) {
		t.Errorf("list limit past the cap: %v", err)
	}
}
