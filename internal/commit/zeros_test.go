package commit

import (
	"bytes"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/internal/store"
)

// TestZeroRunsBecomeHoles: a file with written (allocated) zeros between
// data stores those zeros as holes: only the data is hashed and stored,
// and the content reads back the same, from the Store and from a checkout.
func TestZeroRunsBecomeHoles(t *testing.T) {
	src := t.TempDir()
	rng := rand.New(rand.NewPCG(7, 7))
	data := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.IntN(255) + 1)
		}
		return b
	}
	var want bytes.Buffer
	want.Write(data(300 << 10))
	want.Write(make([]byte, 4<<20)) // zeros, written: allocated, not a hole
	want.Write(data(300 << 10))
	want.Write(make([]byte, 100)) // a short zero run stays data
	want.Write(data(10 << 10))
	require.NoError(t, os.WriteFile(filepath.Join(src, "f"), want.Bytes(), 0o644))
	var st unix.Stat_t
	require.NoError(t, unix.Stat(filepath.Join(src, "f"), &st))
	if st.Blocks*512 < int64(want.Len()) {
		t.Fatalf("the source must be fully allocated (%d of %d bytes)", st.Blocks*512, want.Len())
	}

	db := newDB(t)
	root, cs := capture(t, db, src)
	if cs.NewBytes > 700<<10 {
		t.Errorf("stored %d payload bytes for %d data bytes: the zeros were stored", cs.NewBytes, 610<<10)
	}
	ctx := t.Context()
	tree, err := db.Tree(ctx, root)
	require.NoError(t, err)
	e, _ := tree.Find("f")
	m, err := db.Manifest(ctx, e.Object)
	require.NoError(t, err)
	var holes int64
	for _, x := range m.Extents {
		if x.Chunk.IsZero() {
			holes += x.Length
		}
	}
	if holes < 4<<20-64<<10 || holes > 4<<20 {
		t.Errorf("holes cover %d bytes, want about 4 MiB", holes)
	}
	for i := 1; i < len(m.Extents); i++ {
		if m.Extents[i].Chunk.IsZero() && m.Extents[i-1].Chunk.IsZero() {
			t.Errorf("adjacent holes at extent %d are not merged", i)
		}
	}
	r, err := db.OpenContent(ctx, e)
	require.NoError(t, err)
	got, err := io.ReadAll(r)
	r.Close()
	require.NoError(t, err)
	if !bytes.Equal(got, want.Bytes()) {
		t.Fatalf("content read back differs")
	}
	out := filepath.Join(t.TempDir(), "out")
	_, err = Checkout(ctx, db, root, out, nil)
	require.NoError(t, err)
	back, err := os.ReadFile(filepath.Join(out, "f"))
	require.NoError(t, err)
	if !bytes.Equal(back, want.Bytes()) {
		t.Fatalf("checked-out content differs")
	}
	if again, _ := capture(t, db, out); again != root {
		t.Errorf("re-capture of the (now sparse) checkout gives another root")
	}
	_ = store.ZeroID
}
