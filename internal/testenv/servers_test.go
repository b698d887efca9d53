package testenv

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// TestPostgres: the private cluster answers on its socket, each call gets
// a database of its own, and a database is dropped when its test ends.
func TestPostgres(t *testing.T) {
	var first string
	t.Run("a", func(t *testing.T) {
		first = Postgres(t)
		second := Postgres(t)
		if first == second || !strings.HasPrefix(first, "postgres://layerfs@/t_") {
			t.Fatalf("urls %q and %q", first, second)
		}
		name := strings.TrimPrefix(strings.Split(first, "?")[0], "postgres://layerfs@/")
		require.NoError(t, pgSrv.psql("SELECT 1 FROM pg_database WHERE datname = '"+name+"'"))
	})
	if t.Failed() {
		return
	}
	name := strings.TrimPrefix(strings.Split(first, "?")[0], "postgres://layerfs@/")
	out, err := pgSrv.query("SELECT count(*) FROM pg_database WHERE datname = '" + name + "'")
	if err != nil || out != "0" {
		t.Fatalf("database %s after its test: count %q, %v", name, out, err)
	}
}

// TestS3: the private S3 server answers on loopback.
func TestS3(t *testing.T) {
	s, _, prefix := S3(t)
	_, _, p2 := S3(t)
	if prefix == p2 {
		t.Fatalf("two calls gave prefix %q", prefix)
	}
	c, err := net.Dial("tcp", s.Endpoint)
	require.NoError(t, err)
	c.Close()
	if !strings.HasPrefix(s.Endpoint, "127.0.0.1:") {
		t.Fatalf("endpoint %s is not on loopback", s.Endpoint)
	}
}

// TestWaitS3Build: while scripts/ensure-s3server holds its directory's
// lock (a build in the background), the wait goes on, and gives up with the
// build log's path when its context ends; once the lock is free it returns.
func TestWaitS3Build(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("LAYERFS_S3SERVER", filepath.Join(dir, "bin", "weed"))
	lock, err := os.Create(filepath.Join(dir, ".lock"))
	require.NoError(t, err)
	defer lock.Close()
	require.NoError(t, unix.Flock(int(lock.Fd()), unix.LOCK_EX))
	ctx, cancel := context.WithTimeout(t.Context(), 1500*time.Millisecond)
	defer cancel()
	err = waitS3Build(ctx)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), filepath.Join(dir, "ensure-s3server.log")) {
		t.Fatalf("while the lock is held: got %v, want the deadline and the log's path", err)
	}
	done := make(chan error, 1)
	go func() { done <- waitS3Build(t.Context()) }()
	require.NoError(t, unix.Flock(int(lock.Fd()), unix.LOCK_UN))
	if err := <-done; err != nil {
		t.Fatalf("after the lock is freed: %v", err)
	}
}

// TestStoppableS3: a test's own S3 server stops (its port refuses) and
// starts again on the same address.
func TestStoppableS3(t *testing.T) {
	s := NewStoppableS3(t)
	dial := func() error {
		c, err := net.Dial("tcp", s.Endpoint)
		if err == nil {
			c.Close()
		}
		return err
	}
	require.NoError(t, dial())
	s.Stop()
	if err := dial(); err == nil {
		t.Fatal("the stopped server still accepts connections")
	}
	s.Start(t)
	if err := dial(); err != nil {
		t.Fatalf("after Start: %v", err)
	}
}

// deadlineTB is a testing.TB whose test binary ends at end.
type deadlineTB struct {
	testing.TB
	end time.Time
}

func (d deadlineTB) Deadline() (time.Time, bool) { return d.end, true }

// TestS3BuildWaitLeavesTimeForTheTests: the wait for a build is
// S3BuildWait, cut short to leave the tests s3TestMargin before the test
// binary's deadline.
func TestS3BuildWaitLeavesTimeForTheTests(t *testing.T) {
	if got := s3BuildWait(deadlineTB{t, time.Now().Add(2 * time.Hour)}); got != S3BuildWait {
		t.Errorf("2 h before the deadline: wait %v, want %v", got, S3BuildWait)
	}
	got := s3BuildWait(deadlineTB{t, time.Now().Add(20 * time.Minute)})
	if want := 20*time.Minute - s3TestMargin; got > want || got < want-time.Minute {
		t.Errorf("20 min before the deadline: wait %v, want about %v", got, want)
	}
}
