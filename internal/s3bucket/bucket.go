package s3bucket

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"syscall"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// ErrNotFound is returned (wrapped) for a key the bucket does not hold.
var ErrNotFound = errors.New("no such object")

// Config says where a bucket is and how to reach it.
type Config struct {
	Endpoint  string // host[:port]
	Bucket    string
	Prefix    string // prepended to every key ("" or ending in "/")
	TLS       bool
	Region    string // "" means us-east-1
	AccessKey string
	SecretKey string
	// PartSize is the size above which Put uploads in parts of this size;
	// 0 means DefaultPartSize. S3 wants at least 5 MiB.
	PartSize int64
	// Attempts bounds how often a request is tried; 0 means
	// DefaultAttempts. Backoff starts at FirstBackoff (0: DefaultBackoff)
	// and doubles, with jitter, up to MaxBackoff.
	Attempts     int
	FirstBackoff time.Duration
}

// Defaults for Config fields left zero.
const (
	DefaultPartSize = 16 << 20
	DefaultAttempts = 6
	DefaultBackoff  = 100 * time.Millisecond
	MaxBackoff      = 5 * time.Second
)

// Bucket is an open bucket. It is safe for concurrent use.
type Bucket struct {
	cfg Config
	c   *minio.Client
}

// Open makes a client for the bucket; it sends no request.
func Open(cfg Config) (*Bucket, error) {
	if cfg.Endpoint == "" || cfg.Bucket == "" {
		return nil, fmt.Errorf("s3 bucket: endpoint and bucket are required")
	}
	if cfg.Region == "" {
		cfg.Region = "us-east-1"
	}
	if cfg.PartSize <= 0 {
		cfg.PartSize = DefaultPartSize
	}
	if cfg.Attempts <= 0 {
		cfg.Attempts = DefaultAttempts
	}
	if cfg.FirstBackoff <= 0 {
		cfg.FirstBackoff = DefaultBackoff
	}
	c, err := minio.New(cfg.Endpoint, &minio.Options{
		Creds:        credentials.NewStaticV4(cfg.AccessKey, cfg.SecretKey, ""),
		Secure:       cfg.TLS,
		Region:       cfg.Region,
		BucketLookup: minio.BucketLookupPath,
		// One try per call: the retries are this package's, so that
		// their bound and backoff are known and apply to every request.
		MaxRetries: 1,
	})
	if err != nil {
		return nil, fmt.Errorf("s3 bucket %s: %w", cfg.Endpoint, err)
	}
	return &Bucket{cfg: cfg, c: c}, nil
}

// String names the bucket for errors: endpoint/bucket/prefix.
func (b *Bucket) String() string {
	return b.cfg.Endpoint + "/" + b.cfg.Bucket + "/" + b.cfg.Prefix
}

// Create makes the bucket if it does not exist.
func (b *Bucket) Create(ctx context.Context) error {
	return b.retry(ctx, "create bucket", func(ctx context.Context) error {
		ok, err := b.c.BucketExists(ctx, b.cfg.Bucket)
		if err != nil || ok {
			return err
		}
		err = b.c.MakeBucket(ctx, b.cfg.Bucket, minio.MakeBucketOptions{Region: b.cfg.Region})
		if code := minio.ToErrorResponse(err).Code; code == "BucketAlreadyOwnedByYou" || code == "BucketAlreadyExists" {
			return nil
		}
		return err
	})
}

// Put stores size bytes of r under key, in parts above the part size.
// Objects are immutable: callers name them by content, so putting a key
// twice puts the same bytes.
func (b *Bucket) Put(ctx context.Context, key string, r io.ReaderAt, size int64) error {
	return b.retry(ctx, "put "+key, func(ctx context.Context) error {
		_, err := b.c.PutObject(ctx, b.cfg.Bucket, b.cfg.Prefix+key, io.NewSectionReader(r, 0, size), size,
			minio.PutObjectOptions{PartSize: uint64(b.cfg.PartSize), ContentType: "application/octet-stream", DisableContentSha256: true})
		return err
	})
}

// ReadRange reads length bytes of key from off into a new slice.
func (b *Bucket) ReadRange(ctx context.Context, key string, off, length int64) ([]byte, error) {
	if length <= 0 {
		return nil, fmt.Errorf("s3 bucket %s: read %s: length %d", b, key, length)
	}
	buf := make([]byte, length)
	err := b.retry(ctx, fmt.Sprintf("read %s at %d+%d", key, off, length), func(ctx context.Context) error {
		opts := minio.GetObjectOptions{}
		if err := opts.SetRange(off, off+length-1); err != nil {
			return err
		}
		obj, err := b.c.GetObject(ctx, b.cfg.Bucket, b.cfg.Prefix+key, opts)
		if err != nil {
			return err
		}
		defer obj.Close()
		n, err := io.ReadFull(obj, buf)
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			return fmt.Errorf("object ends after %d of %d bytes: %w", off+int64(n), off+length, errShort)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return buf, nil
}

// errShort is a range past an object's end: the object is what it is, so
// trying again cannot help.
var errShort = errors.New("short object")

// Size returns the size of key, or an error wrapping ErrNotFound.
func (b *Bucket) Size(ctx context.Context, key string) (int64, error) {
	var size int64
	err := b.retry(ctx, "stat "+key, func(ctx context.Context) error {
		info, err := b.c.StatObject(ctx, b.cfg.Bucket, b.cfg.Prefix+key, minio.StatObjectOptions{})
		size = info.Size
		return err
	})
	return size, err
}

// Delete removes key; a missing key is not an error.
func (b *Bucket) Delete(ctx context.Context, key string) error {
	return b.retry(ctx, "delete "+key, func(ctx context.Context) error {
		return b.c.RemoveObject(ctx, b.cfg.Bucket, b.cfg.Prefix+key, minio.RemoveObjectOptions{})
	})
}

// Object is one key of a listing.
type Object struct {
	Key      string // without the bucket's prefix
	Size     int64
	Modified time.Time // on the server's clock
}

// List returns every object whose key (without the bucket's prefix) starts
// with prefix. A listing that fails part way is retried from the start.
func (b *Bucket) List(ctx context.Context, prefix string) ([]Object, error) {
	var out []Object
	err := b.retry(ctx, "list "+prefix, func(ctx context.Context) error {
		out = out[:0]
		for o := range b.c.ListObjects(ctx, b.cfg.Bucket, minio.ListObjectsOptions{Prefix: b.cfg.Prefix + prefix, Recursive: true}) {
			if o.Err != nil {
				return o.Err
			}
			out = append(out, Object{Key: strings.TrimPrefix(o.Key, b.cfg.Prefix), Size: o.Size, Modified: o.LastModified})
		}
		return nil
	})
	return out, err
}

// retry runs op until it succeeds, fails in a way that cannot pass, the
// attempts are used up or ctx ends, sleeping with exponential backoff and
// full jitter in between.
func (b *Bucket) retry(ctx context.Context, what string, op func(context.Context) error) error {
	delay := b.cfg.FirstBackoff
	attempt := 1
	for ; ; attempt++ {
		err := op(ctx)
		if err == nil {
			return nil
		}
		if !transient(err) || attempt >= b.cfg.Attempts || ctx.Err() != nil {
			if notFound(minio.ToErrorResponse(err)) {
				err = fmt.Errorf("%w: %w", ErrNotFound, err)
			}
			return fmt.Errorf("s3 bucket %s: %s (attempt %d of %d): %w", b, what, attempt, b.cfg.Attempts, err)
		}
		t := time.NewTimer(delay/2 + rand.N(delay/2+1))
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("s3 bucket %s: %s (attempt %d): %w (then %w)", b, what, attempt, err, ctx.Err())
		case <-t.C:
		}
		delay = min(2*delay, MaxBackoff)
	}
}

func notFound(r minio.ErrorResponse) bool {
	return r.Code == "NoSuchKey" || r.Code == "NoSuchBucket" || r.StatusCode == http.StatusNotFound
}

// transient reports whether err may pass if the request is tried again.
func transient(err error) bool {
	if errors.Is(err, errShort) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	r := minio.ToErrorResponse(err)
	switch {
	case r.StatusCode >= 500, r.StatusCode == http.StatusTooManyRequests, r.StatusCode == http.StatusRequestTimeout:
		return true
	case r.Code == "SlowDown" || r.Code == "RequestTimeout" || r.Code == "InternalError" || r.Code == "ServiceUnavailable":
		return true
	case r.StatusCode != 0:
		return false // the server answered, and not with a passing condition
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	// net.ErrClosed: the transport closed a connection the peer had reset
	// while a request body was still being written on it.
	if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) {
		return true
	}
	// minio-go reports some transport failures only as text, and rewrites
	// a connection closed before the answer (EOF) as "Connection closed by
	// foreign host URL. Retry again." (api.go), without the EOF.
	s := err.Error()
	return strings.Contains(s, "connection refused") || strings.Contains(s, "connection reset") || strings.Contains(s, "EOF") ||
		strings.Contains(s, "Connection closed by foreign host")
}
