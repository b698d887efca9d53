package testenv

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The servers a shared Store's tests need: PostgreSQL (Debian's, installed
// by scripts/ensure-postgres) and an S3 server (SeaweedFS's weed, built by
// scripts/ensure-s3server). Each test binary starts at most one of each,
// private to it: in a temporary directory, PostgreSQL on a unix socket
// only, weed on loopback ports of its own. They are stopped, and their
// directories removed, when the test binary exits however it exits: each
// runs under a shell that waits for its standard input (a pipe this process
// holds) to close, then stops the server and removes the directory.

var (
	pgOnce sync.Once
	pgSrv  *pgServer
	pgErr  error

	s3Once sync.Once
	s3Srv  *S3Server
	s3Err  error

	// The write ends of the supervisors' stdin pipes: held (and so kept
	// open) until this process exits, or a stop closes one.
	held   []*os.File
	heldMu sync.Mutex
)

type pgServer struct {
	bin, sock string
}

// Postgres returns the URL of a new, empty PostgreSQL database for t,
// dropped when t ends, in this test binary's private cluster (started on
// first use). It skips (fails under LAYERFS_TEST_STRICT) when PostgreSQL's
// server is not installed.
func Postgres(t testing.TB) string {
	t.Helper()
	pgOnce.Do(func() { pgSrv, pgErr = startPostgres() })
	if pgErr != nil {
		Skip(t, "needs a PostgreSQL server (scripts/ensure-postgres installs it): "+pgErr.Error())
	}
	name := "t_" + randomHex(6)
	if err := pgSrv.psql("CREATE DATABASE " + name); err != nil {
		t.Fatalf("create database: %v", err)
	}
	t.Cleanup(func() {
		if err := pgSrv.psql("DROP DATABASE " + name + " WITH (FORCE)"); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})
	return fmt.Sprintf("postgres://layerfs@/%s?host=%s", name, pgSrv.sock)
}

func (s *pgServer) psql(sql string) error {
	_, err := s.query(sql)
	return err
}

// query runs one statement with psql and returns its unaligned output.
func (s *pgServer) query(sql string) (string, error) {
	out, err := exec.Command(filepath.Join(s.bin, "psql"), "-h", s.sock, "-U", "layerfs", "-d", "postgres",
		"-v", "ON_ERROR_STOP=1", "-Atqc", sql).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("psql %q: %w: %s", sql, err, bytes.TrimSpace(out))
	}
	return string(bytes.TrimSpace(out)), nil
}

// pgBinDir finds the newest installed PostgreSQL server's binaries.
func pgBinDir() (string, error) {
	if d := os.Getenv("LAYERFS_TEST_PG_BIN"); d != "" {
		return d, nil
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return pgMajor(dirs[i]) > pgMajor(dirs[j]) })
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "postgres")); err == nil {
			if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
				return d, nil
			}
		}
	}
	return "", fmt.Errorf("no /usr/lib/postgresql/*/bin/postgres")
}

func pgMajor(dir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(dir)))
	return n
}

func startPostgres() (*pgServer, error) {
	bin, err := pgBinDir()
	if err != nil {
		return nil, err
	}
	// PostgreSQL refuses to run as root: as root, run it as the
	// unprivileged user Debian's package made.
	var cred *syscall.Credential
	runAs := []string{}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("running as root and no postgres user to run the server as: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		runAs = []string{"setpriv", "--reuid=" + u.Uid, "--regid=" + u.Gid, "--clear-groups", "--"}
	}
	dir, err := os.MkdirTemp("", "layerfs-test-pg-")
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*pgServer, error) {
		os.RemoveAll(dir)
		return nil, err
	}
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return fail(err)
		}
	}
	data := filepath.Join(dir, "data")
	initdb := exec.Command(filepath.Join(bin, "initdb"), "-D", data, "-U", "layerfs", "-A", "trust", "-E", "UTF8", "--no-sync")
	initdb.Dir = dir
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		return fail(fmt.Errorf("initdb: %w: %s", err, lastLines(out)))
	}
	// No TCP at all: the socket in the private directory is the only way
	// in. fsync off: a test cluster need not survive a power cut.
	server := append(runAs, filepath.Join(bin, "postgres"), "-D", data, "-k", dir,
		"-c", "listen_addresses=", "-c", "fsync=off", "-c", "synchronous_commit=off",
		"-c", "full_page_writes=off", "-c", "max_connections=200", "-c", "shared_buffers=32MB")
	if _, err := supervise(server, dir, "INT", filepath.Join(dir, "postgres.log")); err != nil {
		return fail(err)
	}
	s := &pgServer{bin: bin, sock: dir}
	deadline := time.Now().Add(90 * time.Second)
	for {
		err := s.psql("SELECT 1")
		if err == nil {
			return s, nil
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(dir, "postgres.log"))
			return nil, fmt.Errorf("postgres did not answer in 90 s: %w; log: %s", err, lastLines(log))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// StoreURL returns a shared Store's URL (docs/fleet.md) on a fresh
// database and bucket of this test binary's private servers.
func StoreURL(t testing.TB) string {
	t.Helper()
	s3, _, _ := S3(t)
	return StoreURLWith(t, s3)
}

// StoreURLWith is StoreURL with its content on the S3 server srv (a
// StoppableS3's, say).
func StoreURLWith(t testing.TB, srv S3Server) string {
	t.Helper()
	pg := Postgres(t)
	return fmt.Sprintf("%s&bucket=s3://%s:%s@%s/%s/t-%s&bucket_tls=0", pg, srv.AccessKey, srv.SecretKey, srv.Endpoint, S3TestBucket, randomHex(6))
}

// S3Server is a running S3-compatible server.
type S3Server struct {
	Endpoint             string // host:port, plain HTTP
	AccessKey, SecretKey string
}

// S3 returns this test binary's private S3 server (started on first use),
// its bucket (S3TestBucket, which the caller creates if it needs it) and a
// key prefix no other test uses. Tests share the bucket because SeaweedFS
// gives each bucket volumes of its own, and a test server has room for a
// few buckets only. While scripts/ensure-s3server is still building the
// server in the background (scripts/test-setup starts it so), S3 waits for
// it, at most S3BuildWait. It skips (fails under LAYERFS_TEST_STRICT) when
// the server binary has not been built, naming the build's log.
func S3(t testing.TB) (srv S3Server, bucket, prefix string) {
	t.Helper()
	s3Once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), s3BuildWait(t))
		defer cancel()
		if s3Err = waitS3Build(ctx); s3Err == nil {
			s3Srv, s3Err = startS3()
		}
	})
	if s3Err != nil {
		Skip(t, "needs an S3 server (scripts/ensure-s3server builds SeaweedFS's weed): "+s3Err.Error())
	}
	return *s3Srv, S3TestBucket, "t-" + randomHex(6)
}

// S3TestBucket is the bucket the tests of one binary share.
const S3TestBucket = "layerfs-test"

// S3ServerBinary is where scripts/ensure-s3server puts weed:
// $LAYERFS_S3SERVER, else bin/weed in the script's directory
// ($LAYERFS_S3SERVER_DIR, else /var/cache/layerfs/s3server for root or
// ~/.cache/layerfs/s3server).
func S3ServerBinary() string {
	if p := os.Getenv("LAYERFS_S3SERVER"); p != "" {
		return p
	}
	if d := os.Getenv("LAYERFS_S3SERVER_DIR"); d != "" {
		return filepath.Join(d, "bin", "weed")
	}
	if os.Geteuid() == 0 {
		return "/var/cache/layerfs/s3server/bin/weed"
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".cache", "layerfs", "s3server", "bin", "weed")
}

// S3BuildWait bounds S3's wait for a build of scripts/ensure-s3server
// still at work: a cold build took 36 minutes on this 2-core machine under
// load, and the first test binaries to need the server start a few minutes
// after scripts/test-setup starts the build. The wait also leaves
// s3TestMargin of the test binary's -timeout (make test: 60m) for the
// tests themselves.
const S3BuildWait = 50 * time.Minute

const s3TestMargin = 8 * time.Minute

// s3BuildWait is how long t may wait for the build: S3BuildWait, or less
// when the test binary's deadline is nearer.
func s3BuildWait(t testing.TB) time.Duration {
	wait := S3BuildWait
	if d, ok := t.(interface{ Deadline() (time.Time, bool) }); ok {
		if end, ok := d.Deadline(); ok {
			wait = min(wait, time.Until(end)-s3TestMargin)
		}
	}
	return max(wait, time.Second)
}

// s3BuildDir is scripts/ensure-s3server's directory, which holds its lock
// and its log: the binary's directory's parent.
func s3BuildDir() string { return filepath.Dir(filepath.Dir(S3ServerBinary())) }

// waitS3Build returns once no scripts/ensure-s3server holds the lock of
// its directory (a build in the background holds it until it is done),
// polling a shared lock each second, or fails when ctx ends first, naming
// the build's log. No lock file means no build ever ran here.
func waitS3Build(ctx context.Context) error {
	dir := s3BuildDir()
	f, err := os.Open(filepath.Join(dir, ".lock"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	} else if err != nil {
		return err
	}
	defer f.Close()
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB)
		if err == nil {
			return unix.Flock(int(f.Fd()), unix.LOCK_UN)
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			return fmt.Errorf("lock %s: %w", f.Name(), err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("scripts/ensure-s3server is still building (it holds %s; log: %s): %w",
				f.Name(), filepath.Join(dir, "ensure-s3server.log"), ctx.Err())
		case <-time.After(time.Second):
		}
	}
}

func startS3() (*S3Server, error) {
	if err := s3Binary(); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "layerfs-test-s3-")
	if err != nil {
		return nil, err
	}
	w, err := newWeed(dir)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if _, err := w.start(dir); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return &w.S3Server, nil
}

// s3Binary checks that the S3 server has been built.
func s3Binary() error {
	bin := S3ServerBinary()
	if _, err := os.Stat(bin); err != nil {
		if log := filepath.Join(s3BuildDir(), "ensure-s3server.log"); statOK(log) {
			return fmt.Errorf("%w (the log of scripts/ensure-s3server's last build: %s)", err, log)
		}
		return err
	}
	return nil
}

// weed is one S3 server's configuration: its data directory, credentials
// and loopback ports, which stay the same across a stop and a start.
type weed struct {
	S3Server
	data string
	argv []string
}

// newWeed configures a server keeping its data and configuration in dir.
func newWeed(dir string) (*weed, error) {
	w := &weed{S3Server: S3Server{AccessKey: "layerfs-test", SecretKey: randomHex(16)}, data: filepath.Join(dir, "data")}
	config := fmt.Sprintf(`{"identities":[{"name":"layerfs","credentials":[{"accessKey":%q,"secretKey":%q}],"actions":["Admin","Read","Write","List","Tagging"]}]}`,
		w.AccessKey, w.SecretKey)
	if err := os.WriteFile(filepath.Join(dir, "s3.json"), []byte(config), 0o600); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(w.data, 0o700); err != nil {
		return nil, err
	}
	ports, err := freePorts(8)
	if err != nil {
		return nil, err
	}
	p := func(i int) string { return strconv.Itoa(ports[i]) }
	w.Endpoint = "127.0.0.1:" + p(0)
	w.argv = []string{S3ServerBinary(), "server", "-dir=" + w.data, "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
		"-master.port=" + p(1), "-master.port.grpc=" + p(2), "-volume.port=" + p(3), "-volume.port.grpc=" + p(4),
		"-filer.port=" + p(5), "-filer.port.grpc=" + p(6), "-s3", "-s3.port=" + p(0), "-s3.port.grpc=" + p(7),
		"-s3.config=" + filepath.Join(dir, "s3.json"), "-master.volumeSizeLimitMB=64", "-volume.max=100",
		// Nothing leaves this machine (no usage report) and no fixed
		// port is taken (the catalog servers' defaults would collide
		// between test binaries running at once).
		"-master.telemetry=false", "-s3.port.iceberg=0", "-s3.port.lance=0"}
	return w, nil
}

// start runs the server under a supervisor that stops it, and removes
// removeDir ("" for nothing), when stop is called or this process exits,
// and waits until its S3 port answers HTTP (weed starts it once the filer
// is up; buckets need the volume server too, which the client's retries
// cover).
func (w *weed) start(removeDir string) (stop func(), err error) {
	logPath := filepath.Join(filepath.Dir(w.data), "weed.log")
	stop, err = supervise(w.argv, removeDir, "TERM", logPath)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(120 * time.Second)
	c := http.Client{Timeout: 2 * time.Second}
	for {
		resp, err := c.Get("http://" + w.Endpoint + "/")
		if err == nil {
			resp.Body.Close()
			return stop, nil
		}
		if time.Now().After(deadline) {
			stop()
			log, _ := os.ReadFile(logPath)
			return nil, fmt.Errorf("weed's S3 did not answer in 120 s: %w; log: %s", err, lastLines(log))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// StoppableS3 is an S3 server of one test's own, which the test can stop
// and start again (the same data, address and credentials), to see what
// clients do while the object store is away.
type StoppableS3 struct {
	S3Server
	w    *weed
	stop func()
}

// NewStoppableS3 starts a private S3 server for t, stopped and removed when
// t ends. It skips (fails under LAYERFS_TEST_STRICT) as S3 does.
func NewStoppableS3(t testing.TB) *StoppableS3 {
	t.Helper()
	S3(t) // waits for a build in progress, and skips without the binary
	dir := t.TempDir()
	w, err := newWeed(dir)
	if err != nil {
		t.Fatal(err)
	}
	s := &StoppableS3{S3Server: w.S3Server, w: w}
	s.Start(t)
	t.Cleanup(s.Stop)
	return s
}

// Stop ends the server and waits until it has exited. Stopping a stopped
// server does nothing.
func (s *StoppableS3) Stop() {
	if s.stop != nil {
		s.stop()
		s.stop = nil
	}
}

// Start runs the server again and waits until it answers.
func (s *StoppableS3) Start(t testing.TB) {
	t.Helper()
	if s.stop != nil {
		return
	}
	stop, err := s.w.start("")
	if err != nil {
		t.Fatal(err)
	}
	s.stop = stop
}

// supervise starts argv under a shell that, once its stdin closes (stop,
// or this process's end), sends the server sig, waits for it and removes
// dir ("" removes nothing). stop closes that stdin and returns once the
// shell has exited. The shell is in a session of its own, so a ^C to the
// test's process group reaches it only through that.
func supervise(argv []string, dir, sig, logPath string) (stop func(), err error) {
	quoted := make([]string, len(argv))
	for i, a := range argv {
		quoted[i] = shellQuote(a)
	}
	remove := ""
	if dir != "" {
		remove = "; rm -rf " + shellQuote(dir)
	}
	script := fmt.Sprintf(`%s >>%s 2>&1 </dev/null & pid=$!
cat >/dev/null
kill -%s $pid 2>/dev/null; wait $pid%s`, strings.Join(quoted, " "), shellQuote(logPath), sig, remove)
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command("sh", "-c", script)
	cmd.Stdin = r
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		r.Close()
		w.Close()
		return nil, err
	}
	r.Close()
	heldMu.Lock()
	held = append(held, w)
	heldMu.Unlock()
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }() // reap it if it ends early
	var once sync.Once
	return func() {
		once.Do(func() {
			w.Close()
			<-exited
		})
	}, nil
}

func statOK(name string) bool {
	_, err := os.Stat(name)
	return err == nil
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// freePorts returns n loopback TCP ports free a moment ago.
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func lastLines(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 15 {
		lines = lines[len(lines)-15:]
	}
	return strings.Join(lines, "\n")
}
