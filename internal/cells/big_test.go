package cells

import (
	"bytes"
	"io"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestBigHash(t *testing.T) {
	h, n, err := HashOf(NewBigReader())
	require.NoError(t, err)
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
	_, err := io.ReadFull(NewBigReader(), a)
	require.NoError(t, err)
	b := make([]byte, 0, len(a))
	r := NewBigReader()
	buf := make([]byte, 4093) // odd size: crosses ChaCha8 block boundaries
	for len(b) < len(a) {
		n, err := r.Read(buf[:min(len(buf), len(a)-len(b))])
		require.NoError(t, err)
		b = append(b, buf[:n]...)
	}
	if !bytes.Equal(a, b) {
		t.Fatal("stream differs with read size")
	}
	if i := bytes.IndexByte(a, 0); i >= 0 {
		t.Fatalf("byte %d is zero; the base must have none", i)
	}
}
