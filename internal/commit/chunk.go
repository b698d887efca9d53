package commit

import (
	"fmt"
	"math/bits"
)

// Params are the content-defined chunking sizes. Cuts never fall before Min
// bytes or after Max bytes into a chunk; between them the gear hash decides,
// aiming at Avg with a stricter mask before Avg and a looser one after it
// (normalized chunking), which narrows the spread of chunk sizes.
type Params struct {
	Min, Avg, Max int
}

// DefaultParams were tuned with `layerfs bench store`: small enough that
// sixteen scattered 10-byte edits of a 32 MiB file store under 0.25 MiB,
// large enough that a 64 MiB file stays a few thousand chunks.
var DefaultParams = Params{Min: 2 << 10, Avg: 8 << 10, Max: 32 << 10}

// Validate checks Min < Avg < Max and sane bounds.
func (p Params) Validate() error {
	if p.Min < 64 || p.Avg <= p.Min || p.Max <= p.Avg || p.Max > 64<<20 {
		return fmt.Errorf("chunk params %d/%d/%d: want 64 <= min < avg < max <= 64 MiB, avg", p.Min, p.Avg, p.Max)
	}
	return nil
}

// gear is the table of 256 pseudo-random 64-bit values that the rolling
// hash adds per byte. It is generated, not copied: splitmix64 from a fixed
// seed, so every build of LayerFS cuts the same bytes at the same places.
// Changing the seed changes every chunk boundary (and so dedup against
// existing stores), never correctness.
var gear = func() (t [256]uint64) {
	s := uint64(0x4c61796572465321) // "LayerFS!"
	for i := range t {
		s += 0x9e3779b97f4a7c15
		z := s
		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
		z = (z ^ (z >> 27)) * 0x94d049bb133111eb
		t[i] = z ^ (z >> 31)
	}
	return t
}()

// Chunker cuts byte streams into content-defined chunks. It holds only its
// masks, so one Chunker may be used by many goroutines.
type Chunker struct {
	p            Params
	maskS, maskL uint64
	// zeroCut is where Cut cuts Max zero bytes: the hash of a run of zeros
	// is the same at every offset, so a zero run always cuts there, and Cut
	// answers without hashing it (zeros are common: dd, preallocation).
	zeroCut int
}

// NewChunker returns a chunker for p.
func NewChunker(p Params) (*Chunker, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	b := bits.Len(uint(p.Avg)) - 1 // floor(log2(avg))
	// The masks test the hash's top bits: bit k of the gear hash depends on
	// the last k+1 bytes, so the top bits see a 64-byte window.
	c := &Chunker{
		p:     p,
		maskS: ^uint64(0) << (64 - (b + 2)),
		maskL: ^uint64(0) << (64 - (b - 2)),
	}
	c.zeroCut = c.Cut(make([]byte, p.Max))
	return c, nil
}

// Params returns the chunker's sizes.
func (c *Chunker) Params() Params { return c.p }

// Cut returns the length of the first chunk of data. When data is shorter
// than Max and more bytes follow in the stream, the caller must not trust
// a cut at len(data): it should call again with more data (Split does).
func (c *Chunker) Cut(data []byte) int {
	k, _ := c.cut(data)
	return k
}

// cut is Cut that also reports whether it found the chunk all zeros (it
// looks only where data holds Max bytes), so that its caller need not
// test the same bytes again.
func (c *Chunker) cut(data []byte) (k int, zero bool) {
	n := len(data)
	if n <= c.p.Min {
		return n, false
	}
	if n > c.p.Max {
		n = c.p.Max
	}
	if n == c.p.Max && c.zeroCut > 0 && allZero(data[:n]) {
		return c.zeroCut, true
	}
	normal := c.p.Avg
	if normal > n {
		normal = n
	}
	var fp uint64
	i := c.p.Min
	maskS, maskL := c.maskS, c.maskL
	// Two bytes per iteration on the hot path; the bounds hints let the
	// compiler drop the checks inside the loops.
	d := data[:n]
	for ; i+1 < normal; i += 2 {
		fp = (fp << 1) + gear[d[i]]
		if fp&maskS == 0 {
			return i + 1, false
		}
		fp = (fp << 1) + gear[d[i+1]]
		if fp&maskS == 0 {
			return i + 2, false
		}
	}
	for ; i < normal; i++ {
		fp = (fp << 1) + gear[d[i]]
		if fp&maskS == 0 {
			return i + 1, false
		}
	}
	for ; i+1 < n; i += 2 {
		fp = (fp << 1) + gear[d[i]]
		if fp&maskL == 0 {
			return i + 1, false
		}
		fp = (fp << 1) + gear[d[i+1]]
		if fp&maskL == 0 {
			return i + 2, false
		}
	}
	for ; i < n; i++ {
		fp = (fp << 1) + gear[d[i]]
		if fp&maskL == 0 {
			return i + 1, false
		}
	}
	return n, false
}
