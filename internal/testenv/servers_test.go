package testenv

import (
	"net"
	"strings"
	"testing"
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
		if err := pgSrv.psql("SELECT 1 FROM pg_database WHERE datname = '" + name + "'"); err != nil {
			t.Fatal(err)
		}
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
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	if !strings.HasPrefix(s.Endpoint, "127.0.0.1:") {
		t.Fatalf("endpoint %s is not on loopback", s.Endpoint)
	}
}
