package writeruns

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRuns writes pieces and holes through a small Writer and checks the
// runs it made: contiguous data gathered up to the size, holes skipped.
func TestRuns(t *testing.T) {
	type run struct {
		off  int64
		data string
	}
	var got []run
	w := New(4, func(b []byte, off int64) error {
		got = append(got, run{off, string(b)})
		return nil
	})
	require.NoError(t, w.Write([]byte("ab")))
	require.NoError(t, w.Write([]byte("cdefg"))) // fills a run, starts the next
	require.NoError(t, w.Skip(3))
	require.NoError(t, w.Write([]byte("h")))
	require.NoError(t, w.Skip(0))
	require.NoError(t, w.Write([]byte("ij")))
	require.NoError(t, w.Flush())
	require.NoError(t, w.Flush()) // nothing left: no empty write
	assert.Equal(t, []run{{0, "abcd"}, {4, "efg"}, {10, "h"}, {11, "ij"}}, got)
}

// TestWriteError passes the write function's error on.
func TestWriteError(t *testing.T) {
	fail := bytes.ErrTooLarge
	w := New(2, func([]byte, int64) error { return fail })
	assert.ErrorIs(t, w.Write([]byte("abc")), fail)
}
