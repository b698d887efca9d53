package object

import (
	"crypto/sha256"
	"fmt"
	"math/rand/v2"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func sampleTree() *Tree {
	chunk := Hash(KindChunk, []byte("x"))
	man := Hash(KindManifest, []byte("m"))
	sub := Hash(KindTree, []byte("t"))
	return &Tree{Entries: []Entry{
		{Name: "a b", Type: TypeFile, Mode: 0o4755, Size: 100 << 20, MtimeNs: 1700000000123456789, Object: man, ObjectKind: KindManifest, Link: 42},
		{Name: "dev", Type: TypeChar, Mode: 0o600, Rdev: 0x0501},
		{Name: "dir", Type: TypeDir, Mode: 0o1777, Object: sub, ObjectKind: KindTree,
			Xattrs: []Xattr{{Name: "trusted.overlay.opaque", Value: []byte("y")}, {Name: "user.k", Value: []byte{0, 1, 2}}}},
		{Name: "empty", Type: TypeFile, Mode: 0o644},
		{Name: "fifo", Type: TypeFIFO, Mode: 0o644},
		{Name: "line\nbreak", Type: TypeSymlink, Mode: 0o777, Size: 9, Target: "../\x01target"},
		{Name: "sock", Type: TypeSocket, Mode: 0o755},
		{Name: "\xff\xfebin", Type: TypeFile, Mode: 0o755, UID: 1000, GID: 1000, Size: 1, MtimeNs: -5, Object: chunk, ObjectKind: KindChunk},
	}}
}

func TestTreeRoundTrip(t *testing.T) {
	for _, tr := range []*Tree{{}, sampleTree()} {
		require.NoError(t, tr.Validate())
		b := tr.Encode()
		got, err := DecodeTree(b)
		require.NoError(t, err)
		if len(tr.Entries) == 0 {
			require.Empty(t, got.Entries)
			continue
		}
		require.Equal(t, tr, got, "round trip")
		require.Equal(t, b, got.Encode(), "re-encoding differs: encoding is not canonical")
		e, ok := got.Find("line\nbreak")
		require.True(t, ok, "Find of a present name")
		require.Equal(t, "../\x01target", e.Target, "Find")
		_, ok = got.Find("nope")
		require.False(t, ok, "Find found a missing name")
	}
}

func TestTreeValidate(t *testing.T) {
	id := Hash(KindChunk, nil)
	cases := map[string][]Entry{
		"empty name":  {{Name: "", Type: TypeFile}},
		"dot":         {{Name: ".", Type: TypeDir, ObjectKind: KindTree}},
		"dotdot":      {{Name: "..", Type: TypeDir, ObjectKind: KindTree}},
		"slash":       {{Name: "a/b", Type: TypeFile}},
		"nul":         {{Name: "a\x00", Type: TypeFile}},
		"unsorted":    {{Name: "b", Type: TypeFile}, {Name: "a", Type: TypeFile}},
		"duplicate":   {{Name: "a", Type: TypeFile}, {Name: "a", Type: TypeFile}},
		"dir no tree": {{Name: "d", Type: TypeDir, Object: id, ObjectKind: KindChunk}},
		"file a tree": {{Name: "f", Type: TypeFile, Object: id, ObjectKind: KindTree}},
		"fifo object": {{Name: "p", Type: TypeFIFO, Object: id, ObjectKind: KindChunk}},
		"xattr order": {{Name: "f", Type: TypeFile, Xattrs: []Xattr{{Name: "user.b"}, {Name: "user.a"}}}},
		"xattr dup":   {{Name: "f", Type: TypeFile, Xattrs: []Xattr{{Name: "user.a"}, {Name: "user.a"}}}},
	}
	for name, entries := range cases {
		t.Run(name, func(t *testing.T) {
			require.ErrorIs(t, (&Tree{Entries: entries}).Validate(), ErrCorrupt)
		})
	}
}

func TestManifestRoundTrip(t *testing.T) {
	a, b := Hash(KindChunk, []byte("a")), Hash(KindChunk, []byte("b"))
	m := &Manifest{Size: 1<<20 + 10, Extents: []Extent{{Chunk: a, Length: 5}, {Length: 1 << 20}, {Chunk: b, Length: 5}}}
	got, err := DecodeManifest(m.Encode())
	require.NoError(t, err)
	require.Equal(t, m, got)
	bad := &Manifest{Size: 11, Extents: m.Extents}
	_, err = DecodeManifest(bad.Encode())
	require.ErrorIs(t, err, ErrCorrupt, "size mismatch")
	zero := &Manifest{Size: 0, Extents: []Extent{{Chunk: a, Length: 0}}}
	_, err = DecodeManifest(zero.Encode())
	require.ErrorIs(t, err, ErrCorrupt, "zero-length extent")
}

func TestCommitRoundTrip(t *testing.T) {
	p1, p2 := Hash(KindCommit, []byte("p")), Hash(KindCommit, []byte("q"))
	for _, parents := range [][]ID{nil, {p1}, {p1, p2}, {p2, p1, Hash(KindCommit, []byte("r"))}} {
		c := &Commit{Root: Hash(KindTree, nil), Parents: parents, Generation: 7, Message: "msg\nwith lines \xff",
			Author: "agent", TimeNs: 1234567890123, Stats: CommitStats{Files: 3, Dirs: 2, Bytes: 1 << 40, Changed: -1}}
		got, err := DecodeCommit(c.Encode())
		require.NoError(t, err)
		require.Equal(t, c, got)
	}
	require.NotEqual(t, Hash(KindCommit, (&Commit{Parents: []ID{p1, p2}}).Encode()), Hash(KindCommit, (&Commit{Parents: []ID{p2, p1}}).Encode()),
		"the parents' order is part of the commit")
}

// commitV1Bytes is a version 1 commit as the store wrote it before commits
// had several parents: root, parent, message, author, time and stats.
func commitV1Bytes(root, parent ID, msg string) []byte {
	e := enc{}
	e.b = append(e.b, commitV1)
	e.id(root)
	e.id(parent)
	e.s(msg)
	e.s("old author")
	e.i(42)
	for _, v := range []int64{1, 2, 3, 4} {
		e.i(v)
	}
	return e.b
}

func TestCommitVersion1StillReads(t *testing.T) {
	root, parent := Hash(KindTree, nil), Hash(KindCommit, []byte("p"))
	got, err := DecodeCommit(commitV1Bytes(root, parent, "old"))
	require.NoError(t, err)
	require.Equal(t, &Commit{Root: root, Parents: []ID{parent}, Message: "old", Author: "old author", TimeNs: 42,
		Stats: CommitStats{Files: 1, Dirs: 2, Bytes: 3, Changed: 4}}, got)
	require.Equal(t, parent, got.Parent())
	first, err := DecodeCommit(commitV1Bytes(root, ZeroID, "first"))
	require.NoError(t, err)
	require.Empty(t, first.Parents, "a zero parent in version 1 is no parent")
	require.Equal(t, ZeroID, first.Parent())
}

func TestCommitRejectsBadParents(t *testing.T) {
	p := Hash(KindCommit, []byte("p"))
	for name, c := range map[string]*Commit{
		"duplicate": {Parents: []ID{p, p}},
		"zero":      {Parents: []ID{p, ZeroID}},
	} {
		require.ErrorIs(t, c.Validate(), ErrInvalidCommit, name)
		_, err := DecodeCommit(c.Encode())
		require.ErrorIs(t, err, ErrCorrupt, "%s decoded", name)
	}
	e := enc{}
	e.b = append(e.b, commitV2)
	e.id(ZeroID)
	e.u(1 << 40) // more parents than bytes
	_, err := DecodeCommit(e.b)
	require.ErrorIs(t, err, ErrCorrupt, "huge parent count")
}

func TestDecodeRejectsDamage(t *testing.T) {
	enc := map[string][]byte{
		"tree":     sampleTree().Encode(),
		"manifest": (&Manifest{Size: 3, Extents: []Extent{{Length: 3}}}).Encode(),
		"commit":   (&Commit{Message: "m", Parents: []ID{Hash(KindCommit, []byte("p"))}, Generation: 2}).Encode(),
		"commitv1": commitV1Bytes(Hash(KindTree, nil), Hash(KindCommit, []byte("p")), "m"),
	}
	decode := map[string]func([]byte) error{
		"tree":     func(b []byte) error { _, err := DecodeTree(b); return err },
		"manifest": func(b []byte) error { _, err := DecodeManifest(b); return err },
		"commit":   func(b []byte) error { _, err := DecodeCommit(b); return err },
		"commitv1": func(b []byte) error { _, err := DecodeCommit(b); return err },
	}
	for kind, b := range enc {
		f := decode[kind]
		for n := 0; n < len(b); n++ {
			require.ErrorIs(t, f(b[:n]), ErrCorrupt, "%s truncated to %d bytes", kind, n)
		}
		require.ErrorIs(t, f(append(append([]byte(nil), b...), 0)), ErrCorrupt, "%s with a trailing byte", kind)
		v := append([]byte(nil), b...)
		v[0] = 99
		require.ErrorIs(t, f(v), ErrCorrupt, "%s with version 99", kind)
	}
}

func TestIDText(t *testing.T) {
	id := Hash(KindCommit, []byte("x"))
	b, _ := id.MarshalText()
	var got ID
	require.NoError(t, got.UnmarshalText(b), "UnmarshalText")
	require.Equal(t, id, got, "UnmarshalText")
	_, err := ParseID("abc")
	require.Error(t, err, "ParseID accepted a short id")
	_, err = ParseID(string(b[:63]) + "g")
	require.Error(t, err, "ParseID accepted a non-hex id")
	require.Len(t, id.Short(), 12, "Short")
	require.NotEqual(t, id, Hash(KindTree, []byte("x")), "kinds must not share ids")
}

// Fuzz the decoders: never panic, and whatever decodes re-encodes to the
// same canonical bytes.
func FuzzDecodeTree(f *testing.F) {
	f.Add(sampleTree().Encode())
	f.Add((&Tree{}).Encode())
	f.Fuzz(func(t *testing.T, b []byte) {
		tr, err := DecodeTree(b)
		if err != nil {
			require.ErrorIs(t, err, ErrCorrupt)
			return
		}
		require.Equal(t, b, tr.Encode(), "decoded tree re-encodes differently")
	})
}

func FuzzDecodeManifest(f *testing.F) {
	f.Add((&Manifest{Size: 3, Extents: []Extent{{Chunk: Hash(KindChunk, nil), Length: 3}}}).Encode())
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := DecodeManifest(b)
		if err != nil {
			return
		}
		require.Equal(t, b, m.Encode(), "decoded manifest re-encodes differently")
	})
}

func FuzzDecodeCommit(f *testing.F) {
	f.Add((&Commit{Message: "m", Stats: CommitStats{Files: 1}}).Encode())
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := DecodeCommit(b)
		if err != nil {
			return
		}
		require.Equal(t, b, c.Encode(), "decoded commit re-encodes differently")
	})
}

// BenchmarkHash is the evidence for BLAKE3 over SHA-256 in object ids.
func BenchmarkHash(b *testing.B) {
	for _, size := range []int{8 << 10, 64 << 10, 1 << 20} {
		data := benchData(1, size)
		b.Run(fmt.Sprintf("blake3/%dKiB", size>>10), func(b *testing.B) {
			b.SetBytes(int64(size))
			for b.Loop() {
				Hash(KindChunk, data)
			}
		})
		b.Run(fmt.Sprintf("sha256/%dKiB", size>>10), func(b *testing.B) {
			b.SetBytes(int64(size))
			for b.Loop() {
				h := sha256.New()
				h.Write([]byte(kindPrefix[KindChunk]))
				h.Write(data)
				h.Sum(nil)
			}
		})
	}
}

// BenchmarkHashSideBySide times BLAKE3 and SHA-256 alternately on the same
// buffer and reports the median of each and the median ratio, so that the
// comparison holds on a loaded machine where absolute rates drift.
func BenchmarkHashSideBySide(b *testing.B) {
	for _, size := range []int{8 << 10, 64 << 10} {
		data := benchData(2, size)
		b.Run(fmt.Sprintf("%dKiB", size>>10), func(b *testing.B) {
			var tb, ts, ratio []float64
			for b.Loop() {
				t0 := time.Now()
				Hash(KindChunk, data)
				t1 := time.Now()
				h := sha256.New()
				h.Write([]byte(kindPrefix[KindChunk]))
				h.Write(data)
				h.Sum(nil)
				t2 := time.Now()
				db, ds := t1.Sub(t0).Seconds(), t2.Sub(t1).Seconds()
				tb, ts, ratio = append(tb, db), append(ts, ds), append(ratio, ds/db)
			}
			mb := float64(size) / 1e6
			b.ReportMetric(mb/median(tb), "blake3-MB/s")
			b.ReportMetric(mb/median(ts), "sha256-MB/s")
			b.ReportMetric(median(ratio), "sha256/blake3")
		})
	}
}

// benchData is n bytes of a seeded random stream.
func benchData(seed uint64, n int) []byte {
	b := make([]byte, n)
	rand.NewChaCha8([32]byte{byte(seed)}).Read(b)
	return b
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return s[len(s)/2]
}
