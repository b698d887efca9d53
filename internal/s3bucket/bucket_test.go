package s3bucket

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/internal/testenv"
)

func open(t *testing.T, endpoint string, cfg Config) *Bucket {
	t.Helper()
	srv, bucket, prefix := testenv.S3(t)
	if endpoint == "" {
		endpoint = srv.Endpoint
	}
	cfg.Endpoint, cfg.Bucket, cfg.Prefix, cfg.AccessKey, cfg.SecretKey = endpoint, bucket, prefix+"/", srv.AccessKey, srv.SecretKey
	b, err := Open(cfg)
	require.NoError(t, err)
	require.NoError(t, b.Create(t.Context()))
	return b
}

func randomBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// TestMultipartAndRanges: a pack larger than the part size goes up in
// parts and reads back, in full and by ranges, byte for byte.
func TestMultipartAndRanges(t *testing.T) {
	ctx := t.Context()
	b := open(t, "", Config{PartSize: 5 << 20})
	data := randomBytes(1, 12<<20+12345)
	require.NoError(t, b.Put(ctx, "packs/big.pack", bytes.NewReader(data), int64(len(data))))
	if n, err := b.Size(ctx, "packs/big.pack"); err != nil || n != int64(len(data)) {
		t.Fatalf("size = %d, %v; want %d", n, err, len(data))
	}
	for _, r := range [][2]int64{{0, 1}, {0, int64(len(data))}, {5<<20 - 10, 20}, {int64(len(data)) - 7, 7}, {123456, 1 << 20}} {
		got, err := b.ReadRange(ctx, "packs/big.pack", r[0], r[1])
		if err != nil {
			t.Fatalf("range %v: %v", r, err)
		}
		if !bytes.Equal(got, data[r[0]:r[0]+r[1]]) {
			t.Fatalf("range %v: wrong bytes", r)
		}
	}
	if _, err := b.ReadRange(ctx, "packs/big.pack", int64(len(data))-3, 10); err == nil {
		t.Fatal("a range past the end read without error")
	}
	_, err := b.ReadRange(ctx, "packs/none.pack", 0, 10)
	if !errors.Is(err, ErrNotFound) {
		t.Fatalf("missing key: %v, want ErrNotFound", err)
	}
	require.NoError(t, b.Delete(ctx, "packs/big.pack"))
	if _, err := b.Size(ctx, "packs/big.pack"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("after delete: %v, want ErrNotFound", err)
	}
}

// TestList: a listing names every object under its prefix, without the
// bucket's own prefix, with its size, and nothing else.
func TestList(t *testing.T) {
	ctx := t.Context()
	b := open(t, "", Config{})
	want := map[string]int64{"packs/a.pack": 3, "packs/b.pack": 5, "other/c": 1}
	for k, n := range want {
		require.NoError(t, b.Put(ctx, k, bytes.NewReader(make([]byte, n)), n))
	}
	got, err := b.List(ctx, "packs/")
	require.NoError(t, err)
	if len(got) != 2 {
		t.Fatalf("list packs/: %+v, want the two packs", got)
	}
	for _, o := range got {
		if !strings.HasPrefix(o.Key, "packs/") || want[o.Key] != o.Size || o.Modified.IsZero() {
			t.Errorf("listed %+v; want key, size and time of one of %v", o, want)
		}
	}
}

// TestTransient: transport failures that can pass are retried, answers
// and cancellations are not; among them the two forms of a connection the
// server closed that failed TestRetriesThroughResets under load before
// they counted.
func TestTransient(t *testing.T) {
	closed := &url.Error{Op: "Put", URL: "http://127.0.0.1:1/b/k", Err: &net.OpError{Op: "readfrom", Net: "tcp",
		Err: &net.OpError{Op: "write", Net: "tcp", Err: net.ErrClosed}}}
	for _, c := range []struct {
		err  error
		want bool
	}{
		{closed, true},
		{errors.New("Connection closed by foreign host http://127.0.0.1:1/b/k. Retry again."), true},
		{&net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}, true},
		{io.ErrUnexpectedEOF, true},
		{context.Canceled, false},
		{errors.New("access denied"), false},
	} {
		if got := transient(c.err); got != c.want {
			t.Errorf("transient(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// TestRetriesThroughResets: the first connections to the server are reset
// (a proxy in front of it closes them at once); requests retry with
// backoff and succeed once the proxy lets connections through.
func TestRetriesThroughResets(t *testing.T) {
	srv, _, _ := testenv.S3(t)
	p := newFlakyProxy(t, srv.Endpoint)
	b := open(t, p.addr, Config{Attempts: 8, FirstBackoff: 5 * time.Millisecond})
	ctx := t.Context()
	p.dropAll()      // the client's kept-alive connection too
	p.reset.Store(3) // the next three connections fail
	data := []byte("pack bytes")
	if err := b.Put(ctx, "k", bytes.NewReader(data), int64(len(data))); err != nil {
		t.Fatalf("put through resets: %v", err)
	}
	p.reset.Store(2)
	p.dropAll()
	got, err := b.ReadRange(ctx, "k", 5, 5)
	if err != nil || string(got) != "bytes" {
		t.Fatalf("read through resets = %q, %v", got, err)
	}
	if p.resets.Load() != 5 {
		t.Fatalf("%d connections were reset, want 5", p.resets.Load())
	}
}

// TestRetriesAreBounded: with nothing listening, a request fails after
// its attempts, naming the endpoint and the attempt count.
func TestRetriesAreBounded(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	b, err := Open(Config{Endpoint: addr, Bucket: "bucket", Attempts: 3, FirstBackoff: time.Millisecond})
	require.NoError(t, err)
	_, err = b.ReadRange(t.Context(), "k", 0, 1)
	if err == nil || !strings.Contains(err.Error(), "attempt 3 of 3") || !strings.Contains(err.Error(), addr) {
		t.Fatalf("err = %v; want a failure after attempt 3 of 3 naming %s", err, addr)
	}
}

// flakyProxy forwards TCP connections to a server, closing the next
// `reset` of them at once (with a TCP reset) instead.
type flakyProxy struct {
	addr   string
	reset  atomic.Int64
	resets atomic.Int64

	mu    sync.Mutex
	conns map[net.Conn]bool
}

func newFlakyProxy(t *testing.T, target string) *flakyProxy {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &flakyProxy{addr: l.Addr().String(), conns: map[net.Conn]bool{}}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		l.Close()
		p.dropAll()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			if p.reset.Add(-1) >= 0 {
				p.resets.Add(1)
				c.(*net.TCPConn).SetLinger(0)
				c.Close()
				continue
			}
			p.reset.Store(0)
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.track(c, s)
			wg.Add(2)
			go func() { defer wg.Done(); io.Copy(s, c); s.Close() }()
			go func() { defer wg.Done(); io.Copy(c, s); c.Close() }()
		}
	}()
	return p
}

func (p *flakyProxy) track(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		p.conns[c] = true
	}
}

// dropAll closes every forwarded connection, so that the client's next
// request needs a new one.
func (p *flakyProxy) dropAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
		delete(p.conns, c)
	}
}
