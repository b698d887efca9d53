package api

import (
	"bufio"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// latencyBuckets are the upper bounds (seconds) of the request latency
// histogram: from a fast GET on the socket to a long exec.
var latencyBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300}

type routeCode struct {
	route string
	code  int
}

type histogram struct {
	counts []uint64 // per bucket, not cumulative; the last is +Inf
	sum    float64
	n      uint64
}

// metrics counts requests by route and status and their latencies.
type metrics struct {
	mu       sync.Mutex
	requests map[routeCode]uint64
	latency  map[string]*histogram
}

func newMetrics() *metrics {
	return &metrics{requests: map[routeCode]uint64{}, latency: map[string]*histogram{}}
}

func (m *metrics) observe(route string, code int, d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.requests[routeCode{route, code}]++
	h := m.latency[route]
	if h == nil {
		h = &histogram{counts: make([]uint64, len(latencyBuckets)+1)}
		m.latency[route] = h
	}
	sec := d.Seconds()
	i, _ := slices.BinarySearch(latencyBuckets, sec)
	h.counts[i]++
	h.sum += sec
	h.n++
}

func (m *metrics) write(w io.Writer, inFlight, execs int) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	bw := bufio.NewWriter(w)
	fmt.Fprintln(bw, "# HELP layerfs_api_requests_total API requests by route and status.")
	fmt.Fprintln(bw, "# TYPE layerfs_api_requests_total counter")
	keys := make([]routeCode, 0, len(m.requests))
	for k := range m.requests {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b routeCode) int {
		if c := strings.Compare(a.route, b.route); c != 0 {
			return c
		}
		return a.code - b.code
	})
	for _, k := range keys {
		fmt.Fprintf(bw, "layerfs_api_requests_total{route=%s,code=\"%d\"} %d\n", quoteLabel(k.route), k.code, m.requests[k])
	}
	fmt.Fprintln(bw, "# HELP layerfs_api_request_duration_seconds API request latency by route.")
	fmt.Fprintln(bw, "# TYPE layerfs_api_request_duration_seconds histogram")
	routes := make([]string, 0, len(m.latency))
	for r := range m.latency {
		routes = append(routes, r)
	}
	slices.Sort(routes)
	for _, r := range routes {
		h := m.latency[r]
		q := quoteLabel(r)
		var cum uint64
		for i, le := range latencyBuckets {
			cum += h.counts[i]
			fmt.Fprintf(bw, "layerfs_api_request_duration_seconds_bucket{route=%s,le=\"%s\"} %d\n", q, strconv.FormatFloat(le, 'g', -1, 64), cum)
		}
		cum += h.counts[len(latencyBuckets)]
		fmt.Fprintf(bw, "layerfs_api_request_duration_seconds_bucket{route=%s,le=\"+Inf\"} %d\n", q, cum)
		fmt.Fprintf(bw, "layerfs_api_request_duration_seconds_sum{route=%s} %s\n", q, strconv.FormatFloat(h.sum, 'g', -1, 64))
		fmt.Fprintf(bw, "layerfs_api_request_duration_seconds_count{route=%s} %d\n", q, h.n)
	}
	fmt.Fprintln(bw, "# HELP layerfs_api_requests_in_flight API requests being served.")
	fmt.Fprintln(bw, "# TYPE layerfs_api_requests_in_flight gauge")
	fmt.Fprintf(bw, "layerfs_api_requests_in_flight %d\n", inFlight)
	fmt.Fprintln(bw, "# HELP layerfs_api_execs_running Execs running.")
	fmt.Fprintln(bw, "# TYPE layerfs_api_execs_running gauge")
	fmt.Fprintf(bw, "layerfs_api_execs_running %d\n", execs)
	return bw.Flush()
}

// quoteLabel quotes a Prometheus label value (backslash, quote and newline escaped).
func quoteLabel(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)
	return `"` + r.Replace(s) + `"`
}

// recorder remembers the status and size of a response. It forwards Flush
// (through Unwrap, for http.ResponseController) so that streams still stream.
type recorder struct {
	http.ResponseWriter
	status int
	bytes  int64
}

func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(p []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	n, err := r.ResponseWriter.Write(p)
	r.bytes += int64(n)
	return n, err
}

func (r *recorder) Flush() {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	http.NewResponseController(r.ResponseWriter).Flush()
}

// whole tells whether the handler wrote all of an answer of known length
// (writeJSON's), which a flush then sends as it would at the handler's end.
func (r *recorder) whole() bool {
	n, err := strconv.ParseInt(r.Header().Get("Content-Length"), 10, 64)
	return err == nil && r.status != 0 && n == r.bytes
}

func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// instrument counts, times and logs every request.
func (s *Server) instrument(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := s.opts.Now()
		id := strconv.FormatUint(s.reqID.Add(1), 10)
		w.Header().Set("X-Request-Id", id)
		s.mu.Lock()
		s.inFlight++
		s.mu.Unlock()
		rec := &recorder{ResponseWriter: w}
		returned := false
		defer func() {
			end := s.opts.Now()
			s.mu.Lock()
			s.inFlight--
			s.lastActive = end
			s.mu.Unlock()
			status := rec.status
			if status == 0 {
				status = http.StatusOK
			}
			route := r.Pattern
			if route == "" {
				route = "unmatched"
			}
			d := end.Sub(start)
			s.metrics.observe(route, status, d)
			if returned && rec.whole() {
				// The answer goes out now, not after its log line: an
				// exec's client waited for the write to the log.
				rec.Flush()
			}
			level := slog.LevelInfo
			if r.Method == http.MethodGet && status < 400 {
				level = slog.LevelDebug
			}
			s.log.LogAttrs(r.Context(), level, "request",
				slog.String("id", id), slog.String("method", r.Method), slog.String("path", r.URL.Path),
				slog.String("route", route), slog.Int("status", status),
				slog.Duration("duration", d), slog.Int64("bytes", rec.bytes))
		}()
		next.ServeHTTP(rec, r)
		returned = true
	})
}

func (s *Server) getMetrics(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	s.mu.Lock()
	inFlight, execs := s.inFlight, s.execs
	s.mu.Unlock()
	if err := s.metrics.write(w, inFlight, execs); err != nil {
		s.log.Warn("write api metrics", "err", err)
		return
	}
	if err := s.engineMetrics.WriteMetrics(w); err != nil {
		s.log.Warn("write engine metrics", "err", err)
	}
}
