package outputcap

import (
	"bytes"
	"errors"
	"strings"
	"sync"
	"testing"
)

func TestCap(t *testing.T) {
	for _, tc := range []struct {
		limit  int64
		writes []string
		want   string
		trunc  bool
	}{
		{10, []string{"hello", "world"}, "helloworld", false},
		{8, []string{"hello", "world"}, "hellowor", true},
		{5, []string{"hello", "", "x"}, "hello", true},
		{0, []string{"a"}, "", true},
		{3, nil, "", false},
	} {
		var dst bytes.Buffer
		c := New(&dst, tc.limit)
		for _, w := range tc.writes {
			if n, err := c.Write([]byte(w)); n != len(w) || err != nil {
				t.Fatalf("Write(%q) = %d, %v; want all of it, nil", w, n, err)
			}
		}
		if dst.String() != tc.want || c.Truncated() != tc.trunc {
			t.Errorf("limit %d, writes %q: got %q truncated %v; want %q truncated %v", tc.limit, tc.writes, dst.String(), c.Truncated(), tc.want, tc.trunc)
		}
	}
}

type failing struct{ n int }

func (f *failing) Write(p []byte) (int, error) {
	f.n++
	return 0, errors.New("broken")
}

func TestKeepsFirstErrorAndDrains(t *testing.T) {
	f := &failing{}
	c := New(f, 100)
	for range 3 {
		if n, err := c.Write([]byte("abc")); n != 3 || err != nil {
			t.Fatalf("Write = %d, %v; want 3, nil (the stream is drained)", n, err)
		}
	}
	if c.Err() == nil || f.n != 1 {
		t.Errorf("Err %v after %d writes to the destination; want its error after 1", c.Err(), f.n)
	}
}

// unsafeBuffer fails the test when two writes overlap.
type unsafeBuffer struct {
	busy sync.Mutex
	t    *testing.T
	buf  bytes.Buffer
}

func (u *unsafeBuffer) Write(p []byte) (int, error) {
	if !u.busy.TryLock() {
		u.t.Error("two writes at once to one destination")
		return len(p), nil
	}
	defer u.busy.Unlock()
	return u.buf.Write(p)
}

func TestPairSharesOneDestination(t *testing.T) {
	u := &unsafeBuffer{t: t}
	out, errw := Pair(u, u, 1<<20)
	var wg sync.WaitGroup
	for _, w := range []*Writer{out, errw} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 2000 {
				_, _ = w.Write([]byte("x"))
			}
		}()
	}
	wg.Wait()
	if u.buf.Len() != 4000 {
		t.Errorf("got %d bytes, want 4000", u.buf.Len())
	}
}

func TestBuffer(t *testing.T) {
	b := NewBuffer(4)
	_, _ = b.Write([]byte(strings.Repeat("z", 10)))
	if string(b.Bytes()) != "zzzz" || !b.Truncated() {
		t.Errorf("got %q truncated %v", b.Bytes(), b.Truncated())
	}
}
