package local_test

import (
	"bytes"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"layerfs.dev/layerfs/internal/egress"
	"layerfs.dev/layerfs/internal/egress/egresstest"
	"layerfs.dev/layerfs/internal/platforms"
	"layerfs.dev/layerfs/internal/platforms/local"
	"layerfs.dev/layerfs/wire"
)

// TestEgressFigures measures egress against the host's network, side by
// side in one run, and logs medians and ratios (docs/benchmarks.md). It
// asserts nothing and runs only with LAYERFS_NET_FIGURES=1:
//
//	LAYERFS_NET_FIGURES=1 go test -run TestEgressFigures -v ./internal/platforms/local/
func TestEgressFigures(t *testing.T) {
	if os.Getenv("LAYERFS_NET_FIGURES") != "1" {
		t.Skip("figures only with LAYERFS_NET_FIGURES=1")
	}
	egresstest.Require(t)
	w := egresstest.New(t)
	p := local.New(local.Options{Egress: egress.Config{Upstream: w.Upstream}})
	ctx := t.Context()
	if err := p.Up(ctx); err != nil {
		t.Fatal(err)
	}
	defer p.Down(ctx)
	web := w.Web.String()
	rules := []wire.NetworkRule{{Domain: "web.test"}, {CIDR: web}}
	attach := func(egressOn, host bool) (platforms.Sandbox, time.Duration) {
		pw := platforms.Workspace{ID: fmt.Sprintf("fig-%d", time.Now().UnixNano()), HostPath: t.TempDir(), EgressOn: egressOn, Network: host}
		if egressOn {
			pw.Egress = rules
		}
		t0 := time.Now()
		sb, err := p.Attach(ctx, pw)
		if err != nil {
			t.Fatal(err)
		}
		return sb, time.Since(t0)
	}
	var openNone, openEgress []float64
	for range 5 {
		sb, d := attach(false, false)
		openNone = append(openNone, ms(d))
		sb.Close(ctx)
		sb, d = attach(true, false)
		openEgress = append(openEgress, ms(d))
		sb.Close(ctx)
	}
	eg, _ := attach(true, false)
	defer eg.Close(ctx)
	hs, _ := attach(false, true)
	defer hs.Close(ctx)
	none, _ := attach(false, false)
	defer none.Close(ctx)
	run := func(sb platforms.Sandbox, body string) (string, platforms.ExecResult) {
		var out, errb bytes.Buffer
		res, err := sb.Exec(ctx, platforms.ExecSpec{Argv: platforms.ShellArgv(body), Timeout: 5 * time.Minute}, &out, &errb)
		if err != nil {
			t.Fatal(err)
		}
		return out.String(), res
	}
	// Execs of `true`, the first (the link's making) apart.
	execs := func(sb platforms.Sandbox) (first float64, rest []float64) {
		for i := range 11 {
			_, res := run(sb, "true")
			if i == 0 {
				first = ms(res.Wall)
			} else {
				rest = append(rest, ms(res.Wall))
			}
		}
		return first, rest
	}
	curlTimes := func(sb platforms.Sandbox, url, field string, n int) []float64 {
		out, _ := run(sb, fmt.Sprintf(`for i in $(seq %d); do curl -s -o /dev/null -w '%%{%s}\n' %s; done`, n, field, url))
		var v []float64
		for _, f := range strings.Fields(out) {
			x, _ := strconv.ParseFloat(f, 64)
			v = append(v, x*1000)
		}
		return v
	}
	nf, nr := execs(none)
	ef, er := execs(eg)
	url := "http://" + web + "/"
	ttfbE, ttfbH := curlTimes(eg, url, "time_starttransfer", 30), curlTimes(hs, url, "time_starttransfer", 30)
	dnsE := curlTimes(eg, "http://web.test/", "time_namelookup", 30)
	big := fmt.Sprintf("http://%s/bytes?n=%d", web, 64<<20)
	speedE, speedH := curlTimes(eg, big, "speed_download", 5), curlTimes(hs, big, "speed_download", 5)
	denied := curlTimes(eg, "http://"+w.Other.String()+"/", "time_total", 30)
	la, _ := os.ReadFile("/proc/loadavg")
	t.Logf("load average %s", strings.Join(strings.Fields(string(la))[:3], " "))
	t.Logf("workspace open (Attach): none %.2f ms, egress %.2f ms (+%.2f ms)", med(openNone), med(openEgress), med(openEgress)-med(openNone))
	t.Logf("exec true: none first %.1f ms then %.2f ms; egress first %.1f ms (the link) then %.2f ms", nf, med(nr), ef, med(er))
	t.Logf("HTTP first byte (connect + request), by address: egress %.3f ms, host %.3f ms, ratio %.2f", med(ttfbE), med(ttfbH), med(ttfbE)/med(ttfbH))
	t.Logf("name lookup through the egress resolver: %.3f ms", med(dnsE))
	t.Logf("64 MiB download: egress %.0f MB/s, host %.0f MB/s, ratio %.2f", med(speedE)/1e6/1000, med(speedH)/1e6/1000, med(speedE)/med(speedH))
	t.Logf("denied connection refused in %.3f ms (curl's total)", med(denied))
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func med(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}
