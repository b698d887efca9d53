package cells

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
)

// BigSize is the size of the base file big of C09-C11: 64 MiB.
const BigSize = 64 << 20

// BigName is the base file's name in the workspace.
const BigName = "big"

// bigSeed seeds the ChaCha8 stream behind big. ChaCha8Rand is a specified
// algorithm, so the stream (and BigHash) does not change with Go releases.
var bigSeed = [32]byte{'l', 'a', 'y', 'e', 'r', 'f', 's', ' ', 'c', 'e', 'l', 'l', 's', ' ', 'b', 'i', 'g'}

// BigHash is the BLAKE3-256 of big's 64 MiB, so a verifier needs no stored
// copy; TestBigHash recomputes it from the generator.
var BigHash = mustHash("0a37c5c1629499526773a93d92f86117e911c137547437e685e77d0cab20354e")

// bigReader streams big: a seeded ChaCha8 stream in which every zero byte
// is replaced by 0xff, so that no byte of the base is zero. Zeros would let
// deduplication hide the cost of storing the base and would make C11's
// overwrite with zeros unverifiable; with no zero byte at all, any zero in
// C11's result is the overwrite's.
type bigReader struct {
	src  *rand.ChaCha8
	left int64
}

// NewBigReader returns a reader of big's BigSize bytes, generated on demand.
func NewBigReader() io.Reader {
	return &bigReader{src: rand.NewChaCha8(bigSeed), left: BigSize}
}

func (r *bigReader) Read(p []byte) (int, error) {
	if r.left == 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > r.left {
		p = p[:r.left]
	}
	// The stream must not depend on the caller's buffer sizes: ChaCha8.Read
	// is a pure byte stream (it buffers partial blocks), so it does not.
	n, _ := r.src.Read(p)
	for i, b := range p[:n] {
		if b == 0 {
			p[i] = 0xff
		}
	}
	r.left -= int64(n)
	return n, nil
}

// WriteBig writes big into dir, streaming in 1 MiB pieces.
func WriteBig(ctx context.Context, dir string) (err error) {
	f, err := os.OpenFile(filepath.Join(dir, BigName), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("close %s: %w", BigName, cerr)
		}
	}()
	buf := make([]byte, 1<<20)
	r := NewBigReader()
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		n, rerr := r.Read(buf)
		if n > 0 {
			if _, err := f.Write(buf[:n]); err != nil {
				return fmt.Errorf("write %s: %w", BigName, err)
			}
		}
		if rerr == io.EOF {
			return nil
		}
	}
}

// bigBase is the base of C09-C11.
func bigBase() Base { return Base{Name: BigName, Write: WriteBig} }

// bigContent is the base's content as an expectation.
func bigContent() Content { return Hashed(BigSize, BigHash, "the base big") }

func mustHash(s string) Hash {
	var h Hash
	if len(s) != 64 {
		panic("cells: bad hash literal " + s)
	}
	for i := range h {
		hi, lo := unhex(s[2*i]), unhex(s[2*i+1])
		h[i] = hi<<4 | lo
	}
	return h
}

func unhex(c byte) byte {
	switch {
	case '0' <= c && c <= '9':
		return c - '0'
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10
	}
	panic("cells: bad hex digit")
}
