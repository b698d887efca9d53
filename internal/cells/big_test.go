package cells

import (
	"bytes"
	"io"
	"testing"
)

func TestBigHash(t *testing.T) {
	h, n, err := HashOf(NewBigReader())
	if err != nil {
		t.Fatal(err)
	}
	if n != BigSize {
		t.Fatalf("generator gave %d bytes, want %d", n, BigSize)
	}
	if h != BigHash {
		t.Fatalf("generator hash %s, want BigHash %s", h, BigHash)
	}
}

// The stream must not depend on how it is read.
func TestBigReaderChunking(t *testing.T) {
	a := make([]byte, 3<<20)
	if _, err := io.ReadFull(NewBigReader(), a); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 0, len(a))
	r := NewBigReader()
	buf := make([]byte, 4093) // odd size: crosses ChaCha8 block boundaries
	for len(b) < len(a) {
		n, err := r.Read(buf[:min(len(buf), len(a)-len(b))])
		if err != nil {
			t.Fatal(err)
		}
		b = append(b, buf[:n]...)
	}
	if !bytes.Equal(a, b) {
		t.Fatal("stream differs with read size")
	}
	if i := bytes.IndexByte(a, 0); i >= 0 {
		t.Fatalf("byte %d is zero; the base must have none", i)
	}
}
