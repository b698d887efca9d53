package fswatch

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// collect reads events until pred holds for what was read (bounded).
func collect(t *testing.T, w *Watcher, pred func([]Event) bool) []Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var all []Event
	for !pred(all) {
		batch, err := w.Next(ctx)
		require.NoError(t, err, "after %v", show(all))
		all = append(all, batch...)
	}
	return all
}

func show(evs []Event) []string {
	var out []string
	for _, e := range evs {
		s := e.Kind + " " + e.Path
		if e.OldPath != "" {
			s += " from " + e.OldPath
		}
		out = append(out, s)
	}
	return out
}

func has(want ...string) func([]Event) bool {
	return func(evs []Event) bool {
		got := show(evs)
		for _, w := range want {
			if !slices.Contains(got, w) {
				return false
			}
		}
		return true
	}
}

func TestEvents(t *testing.T) {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "old", "deep"), 0o755)
	os.WriteFile(filepath.Join(root, "before.txt"), []byte("x"), 0o644)
	w, err := Watch(root, Options{})
	require.NoError(t, err)
	defer w.Close()

	os.WriteFile(filepath.Join(root, "a.txt"), []byte("hello"), 0o644)
	// A tree made at once: what lands before the new directories' watches
	// is reported by the scan that follows each.
	os.MkdirAll(filepath.Join(root, "x", "y", "z"), 0o755)
	os.WriteFile(filepath.Join(root, "x", "y", "z", "f"), []byte("1"), 0o644)
	os.WriteFile(filepath.Join(root, "old", "deep", "g"), []byte("2"), 0o644)
	os.Rename(filepath.Join(root, "old"), filepath.Join(root, "new"))
	os.WriteFile(filepath.Join(root, "new", "deep", "h"), []byte("3"), 0o644)
	os.Remove(filepath.Join(root, "before.txt"))
	evs := collect(t, w, has("created a.txt", "created x", "created x/y/z/f", "created old/deep/g",
		"renamed new from old", "created new/deep/h", "removed before.txt"))
	for _, e := range evs {
		if e.Path == "x/y/z/f" && e.Kind == Created && e.Size != 1 {
			t.Errorf("x/y/z/f size %d", e.Size)
		}
	}

	// A file written many times between two reads is one event.
	for i := range 100 {
		os.WriteFile(filepath.Join(root, "busy"), []byte(fmt.Sprint(i)), 0o644)
	}
	evs = collect(t, w, has("created busy"))
	if n := slices.Index(show(evs), "created busy"); slices.Contains(show(evs[n+1:]), "created busy") {
		t.Errorf("busy reported twice in one batch: %v", show(evs))
	}
}

func TestPrefixAndSymlinks(t *testing.T) {
	base := t.TempDir()
	root, outside := filepath.Join(base, "root"), filepath.Join(base, "outside")
	os.MkdirAll(filepath.Join(root, "src"), 0o755)
	os.MkdirAll(outside, 0o755)
	os.Symlink(outside, filepath.Join(root, "src", "escape"))
	_, err := Watch(root, Options{Prefix: "src/escape"})
	assert.Error(t, err, "a prefix through a symlink was watched")
	_, err = Watch(root, Options{Prefix: "../x"})
	assert.Error(t, err, "a prefix outside was accepted")
	w, err := Watch(root, Options{Prefix: "src"})
	require.NoError(t, err)
	defer w.Close()
	os.WriteFile(filepath.Join(outside, "secret"), []byte("s"), 0o644) // never seen
	os.WriteFile(filepath.Join(root, "top"), []byte("t"), 0o644)       // outside the prefix
	os.WriteFile(filepath.Join(root, "src", "in"), []byte("i"), 0o644)
	evs := collect(t, w, has("created src/in"))
	for _, e := range show(evs) {
		if e != "created src/in" && e != "modified src/in" {
			t.Errorf("unexpected event %q", e)
		}
	}
	// Removing the prefix directory ends the watch.
	os.RemoveAll(filepath.Join(root, "src"))
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	for {
		_, err := w.Next(ctx)
		if errors.Is(err, ErrEnded) {
			break
		}
		require.NoError(t, err)
	}
}

func TestPendingBound(t *testing.T) {
	var p pending
	p.byPath = map[string]*Event{}
	for i := range 10 {
		p.add(Event{Kind: Created, Path: fmt.Sprint(i)}, 4)
	}
	p.add(Event{Kind: Modified, Path: "0"}, 4)
	p.add(Event{Kind: Removed, Path: "1"}, 4)
	for range 1000 { // a create/remove loop on one path stays one slot
		p.add(Event{Kind: Created, Path: "2"}, 4)
		p.add(Event{Kind: Removed, Path: "2"}, 4)
	}
	p.add(Event{Kind: Renamed, Path: "3b", OldPath: "3"}, 4) // 3 was never seen: 3b is new
	p.add(Event{Kind: Overflow}, 4)
	got := show(p.take())
	want := []string{"created 0", "created 3b", "dropped ", "overflow "}
	if !slices.Equal(got, want) || len(p.order) != 0 || len(p.byPath) != 0 {
		t.Errorf("take = %q, want %q", got, want)
	}
}
