package main

import (
	"bufio"
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"layerfs.dev/layerfs/client"
	"layerfs.dev/layerfs/internal/stats"
	"layerfs.dev/layerfs/wire"
	"layerfs.dev/layerfs/wire/errclass"
)

// benchPortServer is the server both arms run: a Python HTTP/1.1 server
// (keep-alive) answering / with a short body and /bytes/N with N bytes.
const benchPortServer = `import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    def log_message(self, *a): pass
    def do_GET(self):
        n = int(self.path[len("/bytes/"):]) if self.path.startswith("/bytes/") else 2
        self.send_response(200)
        self.send_header("Content-Length", str(n))
        self.end_headers()
        block = b"x" * 262144
        while n > 0:
            k = min(n, len(block))
            self.wfile.write(block[:k])
            n -= k
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
`

// portBench is one run's figures: per arm ("direct", "forward"), the
// request latencies on a kept connection and on a new one per request,
// and the download throughputs.
type portBench struct {
	Requests int                       `json:"requests"`
	Size     int64                     `json:"download_bytes"`
	Arms     map[string]*portBenchArm  `json:"arms"`
	Ratios   map[string]float64        `json:"ratios"` // forward / direct
	Targets  map[string]portBenchCheck `json:"targets"`
}

type portBenchArm struct {
	KeptP50Ms  float64 `json:"kept_p50_ms"`
	KeptP90Ms  float64 `json:"kept_p90_ms"`
	NewP50Ms   float64 `json:"new_conn_p50_ms"`
	DownMBps   float64 `json:"download_mb_per_s"` // median
	kept, newc []time.Duration
	down       []float64
}

type portBenchCheck struct {
	Target string `json:"target"`
	Met    bool   `json:"met"`
}

func benchPortsCmd(a *app) *cobra.Command {
	var requests, downloads int
	var size int64
	cmd := &cobra.Command{
		Use:   "ports",
		Short: "A request and a download through a port forward against a direct connection to a plain process",
		Long: `Start the same Python HTTP server twice: as a plain process on this host
(direct) and in a new workspace's sandbox, reached through ws port's forward (a
local listener, the daemon, the sandbox's network namespace). Then, the arms
interleaved in random order: --requests GETs on a kept connection and as many
on a new connection each (p50, p90), and --downloads downloads of --size bytes
(median MB/s). Targets: the forward's kept-connection p50 <= 1.5x direct, its
download throughput >= 0.8x direct.`,
		Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.withDaemon(cmd, func(c *client.Client) error {
				rep, err := runPortBench(cmd.Context(), c, requests, downloads, size, a.stderr)
				if err != nil {
					return err
				}
				return a.emit(rep, func(w io.Writer) { rep.table(w) })
			})
		},
	}
	cmd.Flags().IntVar(&requests, "requests", 300, "requests per arm and kind")
	cmd.Flags().IntVar(&downloads, "downloads", 7, "downloads per arm")
	cmd.Flags().Int64Var(&size, "size", 16<<20, "bytes per download")
	return cmd
}

// runPortBench sets both arms up, measures them interleaved and tears
// them down.
func runPortBench(ctx context.Context, c *client.Client, requests, downloads int, size int64, log io.Writer) (*portBench, error) {
	var tag [4]byte
	_, _ = crand.Read(tag[:])
	proj := "bench-ports-" + hex.EncodeToString(tag[:])
	if _, err := c.CreateProject(ctx, wire.CreateProject{Name: proj}); err != nil {
		return nil, err
	}
	ws, err := c.CreateWorkspace(ctx, client.WorkspaceSpec{Project: proj, Branch: "main"})
	if err != nil {
		return nil, err
	}
	defer ws.End(context.WithoutCancel(ctx), client.EndOptions{Discard: true})
	if err := ws.WriteFile(ctx, "server.py", []byte(benchPortServer), 0o644); err != nil {
		return nil, err
	}
	srvCtx, stop := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() {
		_, err := ws.Exec(srvCtx, "exec python3 server.py 8000", client.ExecOptions{Timeout: time.Hour})
		served <- err
	}()
	defer func() { stop(); <-served }()
	if err := awaitPort(ctx, ws, 8000); err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	fwdCtx, endFwd := context.WithCancel(ctx)
	defer endFwd()
	go ws.ForwardPort(fwdCtx, l, 8000, func(err error) { fmt.Fprintln(log, "forward:", err) })

	direct, endDirect, err := startDirect(ctx)
	if err != nil {
		return nil, err
	}
	defer endDirect()

	rep := &portBench{Requests: requests, Size: size, Arms: map[string]*portBenchArm{"direct": {}, "forward": {}}}
	addrs := map[string]string{"direct": direct, "forward": l.Addr().String()}
	fmt.Fprintf(log, "bench ports: direct %s, forward %s -> %s:8000\n", direct, addrs["forward"], ws.ID())
	if err := rep.measure(ctx, addrs, downloads); err != nil {
		return nil, err
	}
	rep.summarize()
	return rep, nil
}

// awaitPort waits until the server in the workspace answers.
func awaitPort(ctx context.Context, ws *client.Workspace, port int) error {
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		conn, err := ws.DialPort(ctx, port)
		if err == nil {
			return conn.Close()
		}
		if !errors.Is(err, errclass.Unreachable) || time.Now().After(deadline) {
			return fmt.Errorf("the server in the workspace: %w", err)
		}
	}
}

// startDirect runs the server as a plain process on this host, on a
// free port, and waits until it answers.
func startDirect(ctx context.Context) (string, func(), error) {
	dir, err := os.MkdirTemp("", "layerfs-bench-ports-")
	if err != nil {
		return "", nil, err
	}
	script := filepath.Join(dir, "server.py")
	if err := os.WriteFile(script, []byte(benchPortServer), 0o644); err != nil {
		return "", nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	cmd := exec.CommandContext(ctx, "python3", script, strconv.Itoa(port))
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	end := func() { cmd.Process.Kill(); cmd.Wait(); os.RemoveAll(dir) }
	addr := "127.0.0.1:" + strconv.Itoa(port)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return addr, end, nil
		}
		if time.Now().After(deadline) {
			end()
			return "", nil, errors.New("the direct server never answered")
		}
	}
}

// measure runs the requests and downloads, arm order random per round.
func (rep *portBench) measure(ctx context.Context, addrs map[string]string, downloads int) error {
	kept := map[string]*http.Client{}
	for arm := range addrs {
		kept[arm] = &http.Client{Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 1, DisableCompression: true}}
		if _, err := getOnce(ctx, kept[arm], addrs[arm], "/"); err != nil { // warm-up
			return fmt.Errorf("%s: %w", arm, err)
		}
	}
	order := []string{"direct", "forward"}
	for range rep.Requests {
		rand.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		for _, arm := range order {
			d, err := getOnce(ctx, kept[arm], addrs[arm], "/")
			if err != nil {
				return fmt.Errorf("%s: %w", arm, err)
			}
			rep.Arms[arm].kept = append(rep.Arms[arm].kept, d)
			fresh := &http.Client{Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}
			if d, err = getOnce(ctx, fresh, addrs[arm], "/"); err != nil {
				return fmt.Errorf("%s: %w", arm, err)
			}
			rep.Arms[arm].newc = append(rep.Arms[arm].newc, d)
		}
	}
	path := "/bytes/" + strconv.FormatInt(rep.Size, 10)
	for i := range downloads + 1 {
		rand.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		for _, arm := range order {
			d, err := getOnce(ctx, kept[arm], addrs[arm], path)
			if err != nil {
				return fmt.Errorf("%s: %w", arm, err)
			}
			if i > 0 { // the first is a warm-up
				rep.Arms[arm].down = append(rep.Arms[arm].down, float64(rep.Size)/1e6/d.Seconds())
			}
		}
	}
	return nil
}

// getOnce GETs path and reads the whole answer; it returns how long that
// took.
func getOnce(ctx context.Context, hc *http.Client, addr, path string) (time.Duration, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+path, nil)
	if err != nil {
		return 0, err
	}
	t0 := time.Now()
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err
	}
	_, err = io.Copy(io.Discard, bufio.NewReaderSize(resp.Body, 1<<20))
	resp.Body.Close()
	if err == nil && resp.StatusCode != 200 {
		err = fmt.Errorf("GET %s: %s", path, resp.Status)
	}
	return time.Since(t0), err
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// summarize computes the medians, ratios and targets.
func (rep *portBench) summarize() {
	for _, a := range rep.Arms {
		a.KeptP50Ms = ms(stats.PercentileDuration(a.kept, 50))
		a.KeptP90Ms = ms(stats.PercentileDuration(a.kept, 90))
		a.NewP50Ms = ms(stats.PercentileDuration(a.newc, 50))
		a.DownMBps = stats.Median(a.down)
	}
	d, f := rep.Arms["direct"], rep.Arms["forward"]
	rep.Ratios = map[string]float64{
		"kept_p50":      f.KeptP50Ms / d.KeptP50Ms,
		"new_conn_p50":  f.NewP50Ms / d.NewP50Ms,
		"download_mbps": f.DownMBps / d.DownMBps,
	}
	rep.Targets = map[string]portBenchCheck{
		"kept_p50":      {"<= 1.5x direct", rep.Ratios["kept_p50"] <= 1.5},
		"download_mbps": {">= 0.8x direct", rep.Ratios["download_mbps"] >= 0.8},
	}
}

func (rep *portBench) table(w io.Writer) {
	fmt.Fprintf(w, "layerfs bench ports: %d requests per arm and kind, downloads of %d bytes\n", rep.Requests, rep.Size)
	fmt.Fprintln(w, "ARM\tKEPT P50 ms\tKEPT P90 ms\tNEW CONN P50 ms\tDOWNLOAD MB/s (median)")
	for _, arm := range []string{"direct", "forward"} {
		a := rep.Arms[arm]
		fmt.Fprintf(w, "%s\t%.3f\t%.3f\t%.3f\t%.0f\n", arm, a.KeptP50Ms, a.KeptP90Ms, a.NewP50Ms, a.DownMBps)
	}
	fmt.Fprintf(w, "forward/direct\t%.2fx\t\t%.2fx\t%.2fx\n", rep.Ratios["kept_p50"], rep.Ratios["new_conn_p50"], rep.Ratios["download_mbps"])
	for _, k := range []string{"kept_p50", "download_mbps"} {
		t := rep.Targets[k]
		fmt.Fprintf(w, "target %s %s:\t%v\n", k, t.Target, map[bool]string{true: "met", false: "MISSED"}[t.Met])
	}
}
