package commit

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

func randBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := 0; i+8 <= n; i += 8 {
		v := r.Uint64()
		for j := 0; j < 8; j++ {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	for i := n &^ 7; i < n; i++ {
		b[i] = byte(r.Uint32())
	}
	return b
}

func cutAll(c *Chunker, data []byte) []int {
	var sizes []int
	for len(data) > 0 {
		n := c.Cut(data)
		sizes = append(sizes, n)
		data = data[n:]
	}
	return sizes
}

func TestChunkerBounds(t *testing.T) {
	c, err := NewChunker(DefaultParams)
	require.NoError(t, err)
	data := randBytes(1, 8<<20)
	sizes := cutAll(c, data)
	var sum, sq float64
	for i, n := range sizes {
		if n > DefaultParams.Max || (n < DefaultParams.Min && i != len(sizes)-1) {
			t.Fatalf("chunk %d has %d bytes, outside [%d, %d]", i, n, DefaultParams.Min, DefaultParams.Max)
		}
		sum += float64(n)
		sq += float64(n) * float64(n)
	}
	mean := sum / float64(len(sizes))
	biased := sq / sum // mean size of the chunk that holds a random byte
	t.Logf("%d chunks, mean %.0f, size-biased mean %.0f", len(sizes), mean, biased)
	if mean < float64(DefaultParams.Avg)/2 || mean > float64(DefaultParams.Avg)*2 {
		t.Errorf("mean chunk size %.0f is far from avg %d", mean, DefaultParams.Avg)
	}
}

func TestChunkerResyncs(t *testing.T) {
	c, _ := NewChunker(DefaultParams)
	data := randBytes(2, 4<<20)
	shifted := append([]byte("0123456789"), data...)
	a, b := cutAll(c, data), cutAll(c, shifted)
	// The cut offsets of the original must reappear, shifted by 10, after
	// the first few chunks.
	set := map[int]bool{}
	off := 0
	for _, n := range b {
		off += n
		set[off] = true
	}
	off = 10
	missing := 0
	for _, n := range a {
		off += n
		if !set[off] {
			missing++
		}
	}
	if missing > 3 {
		t.Errorf("%d of %d boundaries lost after a 10-byte prepend", missing, len(a))
	}
}

func TestChunkerDeterministic(t *testing.T) {
	// The gear table and masks are part of the store format: the same
	// bytes must always cut at the same places.
	c, _ := NewChunker(DefaultParams)
	data := randBytes(3, 1<<20)
	x, y := cutAll(c, data), cutAll(c, bytes.Clone(data))
	if len(x) != len(y) {
		t.Fatalf("cuts differ: %d vs %d chunks", len(x), len(y))
	}
	if gear[0] == 0 || gear[0] == gear[1] {
		t.Fatalf("gear table looks degenerate: %x %x", gear[0], gear[1])
	}
}

func TestParamsValidate(t *testing.T) {
	for _, p := range []Params{{0, 8, 16}, {4096, 3000, 8192}, {2048, 8192, 8192}} {
		if p.Validate() == nil {
			t.Errorf("Validate(%v) = nil, want an error", p)
		}
	}
}

func BenchmarkChunker(b *testing.B) {
	c, _ := NewChunker(DefaultParams)
	data := randBytes(4, 16<<20)
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		d := data
		for len(d) > 0 {
			d = d[c.Cut(d):]
		}
	}
}

// TestChunkerZeroShortcut: a run of zeros is cut where hashing it would
// cut, so the shortcut changes no chunk boundary (they are the store
// format): zero runs of many lengths, between random data, with several
// parameter sets.
func TestChunkerZeroShortcut(t *testing.T) {
	for _, p := range []Params{DefaultParams, {Min: 4096, Avg: 12288, Max: 49152}, {Min: 64, Avg: 256, Max: 1024}} {
		c, err := NewChunker(p)
		require.NoError(t, err)
		hashing := *c
		hashing.zeroCut = 0 // Cut hashes every byte
		for i, zeros := range []int{p.Max - 1, p.Max, p.Max + 1, 3*p.Max + 17, 1 << 20} {
			var data []byte
			data = append(data, randBytes(uint64(i), 50_000)...)
			data = append(data, make([]byte, zeros)...)
			data = append(data, randBytes(uint64(i+100), 50_000)...)
			got, want := cutAll(c, data), cutAll(&hashing, data)
			require.Equal(t, want, got, "%+v, %d zeros: the shortcut's cuts (actual) against hashing's (expected)", p, zeros)
		}
	}
}
