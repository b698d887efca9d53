package escapetest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"layerfs.dev/layerfs/internal/egress"
	"layerfs.dev/layerfs/internal/egress/egresstest"
	"layerfs.dev/layerfs/internal/platforms"
	"layerfs.dev/layerfs/wire"
	"layerfs.dev/layerfs/wire/errclass"
)

// Egress is the suite's part on network egress, for a platform with
// Features.Egress. newPlatform makes the platform with cfg as its egress
// configuration (its upstream resolver is the test's own, in a small
// internet of network namespaces the test builds: egresstest). A
// workspace whose rules allow web.test on port 80 runs probes that try
// every way around the rules, each of which must be refused; control
// cases (the allowed name, resolved and fetched) must work. A change of
// rules while a download runs must cut it. Then newPlatform with an nft
// command that does not exist must refuse the mode, saying why.
func Egress(t *testing.T, newPlatform func(cfg egress.Config) platforms.Platform) {
	w := egresstest.New(t)
	p := newPlatform(egress.Config{Upstream: w.Upstream})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := p.Up(ctx); err != nil {
		t.Fatalf("Up: %v", err)
	}
	t.Cleanup(func() {
		if err := p.Down(context.Background()); err != nil {
			t.Errorf("Down: %v", err)
		}
	})
	if !p.Features().Egress {
		t.Fatalf("%s has no egress here", p.Name())
	}
	ws := t.TempDir()
	if err := os.Chmod(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	copyFile(t, buildProbe(t), filepath.Join(ws, ".probe"), 0o755)
	if err := os.WriteFile(filepath.Join(ws, ".ca.pem"), w.CA, 0o644); err != nil {
		t.Fatal(err)
	}
	var events eventLog
	rules := []wire.NetworkRule{{Domain: "web.test", Ports: []string{"80", "443"}}, {Domain: "meta.test"}, {Domain: "private.test"}}
	sb, err := p.(platforms.SandboxHost).Attach(ctx, platforms.Workspace{ID: "egress-" + randomHex(), HostPath: ws,
		EgressOn: true, Egress: rules, NetEvents: events.add})
	if err != nil {
		t.Fatalf("Attach: %v", err)
	}
	defer sb.Close(context.Background())

	host := hostListener(t)
	web, other := w.Web.String(), w.Other.String()
	// The host's own resolver's address, which the sandbox's resolv.conf
	// names: the egress answers in its place.
	var report strings.Builder
	for _, c := range []Case{
		{Name: "control: the allowed name, resolved and fetched", Probe: []string{"connect-data", "web.test:80"}, Control: true},
		{Name: "control: the allowed name through any resolver", Probe: []string{"dns", "web.test", other + ":53"}, Control: true},
		{Name: "control: HTTPS to the allowed name (its CA trusted)", Probe: []string{"tls", "web.test:443", "web.test", "/workspace/.ca.pem"}, Control: true},
		{Name: "the host's loopback (127.0.0.1)", Probe: []string{"connect-data", "127.0.0.1:" + host.port}, Mechanism: "network namespace: its own lo"},
		{Name: "the host's own address", Probe: []string{"connect-data", host.addr}, Mechanism: "egress: never the host's addresses"},
		{Name: "the egress gateway's other ports", Probe: []string{"connect-data", egress.DefaultGateway.String() + ":22"}, Mechanism: "egress: nft input chain"},
		{Name: "the metadata address 169.254.169.254", Probe: []string{"connect-data", "169.254.169.254:80"}, Mechanism: "egress: no rule; never link-local"},
		{Name: "a private address", Probe: []string{"connect-data", "10.99.0.5:80"}, Mechanism: "egress: no rule; never private"},
		{Name: "a denied name by its literal IP", Probe: []string{"connect-data", other + ":80"}, Mechanism: "egress: no rule admits the address"},
		{Name: "the allowed host on another port", Probe: []string{"connect-data", web + ":8080"}, Mechanism: "egress: the rule's ports"},
		{Name: "a denied name", Probe: []string{"dns", "other.test", other + ":53"}, Mechanism: "egress resolver: NXDOMAIN"},
		{Name: "an allowed name's neighbour", Probe: []string{"dns", "www.web.test", other + ":53"}, Mechanism: "egress resolver: exact names"},
		{Name: "an allowed name answering link-local", Probe: []string{"dns", "meta.test", other + ":53"}, Mechanism: "egress resolver: never link-local"},
		{Name: "an allowed name answering a private address", Probe: []string{"dns", "private.test", other + ":53"}, Mechanism: "egress resolver: never private"},
		{Name: "IPv6 around the IPv4 rule", Probe: []string{"connect-data", "[64:ff9b::" + nat64(w.Web) + "]:80"}, Mechanism: "egress: no IPv6 route; IPv6 dropped"},
		{Name: "a raw socket's SYN to a denied address", Probe: []string{"raw-syn", other, "80"}, Mechanism: "egress: nft prerouting refuses it"},
	} {
		t.Run(c.Name, func(t *testing.T) {
			got := runCase(t, ctx, sb, ws, c)
			fmt.Fprintf(&report, "  %-50s %-28s %s\n", c.Name, got, c.Mechanism)
		})
	}
	if q := w.OtherDNSQueries.Load(); q != 0 {
		t.Errorf("ESCAPE: the neighbour's DNS server got %d questions", q)
	}
	t.Logf("egress cases on %s:\n%s", p.Name(), report.String())
	if !events.has(wire.VerdictAllowed, "tcp") || !events.has(wire.VerdictDenied, "tcp") || !events.has(wire.VerdictDenied, "dns") {
		t.Errorf("decisions seen: %v; want allowed and denied connections and denied names", events.list())
	}

	t.Run("receipt", func(t *testing.T) {
		// Decisions are counted as their events arrive: one of the cases
		// above (a refused raw SYN) may still land in the first exec's
		// window, so a later exec's receipt is the one that must be exact.
		for try := 1; ; try++ {
			res, err := sb.Exec(ctx, platforms.ExecSpec{Argv: []string{"/workspace/.probe", "connect-data", "web.test:80"}, Timeout: time.Minute}, new(bytes.Buffer), new(bytes.Buffer))
			ok := err == nil && res.Network != nil && res.Network.Mode == wire.NetworkEgress && res.Network.ConnectionsAllowed == 1 &&
				res.Network.ConnectionsDenied == 0 && res.Network.BytesIn > 0
			if ok {
				break
			}
			if try == 3 {
				t.Errorf("exec: %v, network %+v: want one connection allowed and its bytes", err, res.Network)
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
	})
	t.Run("a change of rules cuts a download", func(t *testing.T) { cutDownload(t, ctx, sb) })
	t.Run("no nft: the mode is refused", func(t *testing.T) {
		q := newPlatform(egress.Config{Upstream: w.Upstream, NFT: "/nonexistent/nft"})
		if err := q.Up(ctx); err != nil {
			t.Fatalf("Up without nft: %v (the platform comes up without egress)", err)
		}
		defer q.Down(context.Background())
		if q.Features().Egress {
			t.Error("Features.Egress without nft")
		}
		_, err := q.(platforms.SandboxHost).Attach(ctx, platforms.Workspace{ID: "egress-" + randomHex(), HostPath: ws, EgressOn: true, Egress: rules})
		if !errors.Is(err, errclass.Unavailable) || !strings.Contains(err.Error(), "nft") {
			t.Errorf("Attach with egress and no nft: %v, want unavailable naming nft", err)
		}
	})
}

// cutDownload changes the rules while a download runs: it must end at
// once, refused.
func cutDownload(t *testing.T, ctx context.Context, sb platforms.Sandbox) {
	nc, ok := sb.(platforms.NetworkChanger)
	if !ok {
		t.Fatal("the sandbox cannot change its network")
	}
	type result struct {
		res platforms.ExecResult
		err error
		at  time.Time
	}
	done := make(chan result, 1)
	var out bytes.Buffer
	go func() {
		res, err := sb.Exec(ctx, platforms.ExecSpec{Argv: []string{"/workspace/.probe", "stream", "web.test:80", "/stream"}, Timeout: time.Minute}, &out, &out)
		done <- result{res, err, time.Now()}
	}()
	time.Sleep(time.Second) // the download is under way
	t0 := time.Now()
	if err := nc.SetNetwork(ctx, wire.NetworkEgress, []wire.NetworkRule{{Domain: "other.test"}}); err != nil {
		t.Fatal(err)
	}
	applied := time.Since(t0)
	r := <-done
	t.Logf("rules changed in %v; the download ended %v after the change: exit %d, %s", applied, r.at.Sub(t0), r.res.ExitCode, strings.TrimSpace(out.String()))
	if r.err != nil || r.res.ExitCode != 0 || !strings.HasPrefix(out.String(), "refused") || r.at.Sub(t0) > 3*time.Second {
		t.Errorf("download after the change: %v, exit %d %q after %v; want cut at once", r.err, r.res.ExitCode, out.String(), r.at.Sub(t0))
	}
	if err := nc.SetNetwork(ctx, wire.NetworkEgress, []wire.NetworkRule{{Domain: "web.test", Ports: []string{"80"}}}); err != nil {
		t.Fatal(err)
	}
}

// nat64 is a's NAT64 suffix (64:ff9b::/96).
func nat64(a netip.Addr) string {
	b := a.As4()
	return fmt.Sprintf("%x:%x", uint16(b[0])<<8|uint16(b[1]), uint16(b[2])<<8|uint16(b[3]))
}

type hostL struct{ addr, port string }

// hostListener listens on every address of the host and returns one of
// its own non-loopback addresses with the port.
func hostListener(t *testing.T) hostL {
	ln, err := net.Listen("tcp4", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("HTTP/1.0 200 OK\r\n\r\nhost\n"))
			c.Close()
		}
	}()
	port := fmt.Sprint(ln.Addr().(*net.TCPAddr).Port)
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if pfx, err := netip.ParsePrefix(a.String()); err == nil && pfx.Addr().Is4() && !pfx.Addr().IsLoopback() && pfx.Addr() != egress.DefaultGateway {
			return hostL{addr: net.JoinHostPort(pfx.Addr().String(), port), port: port}
		}
	}
	t.Skip("the host has no IPv4 address but loopback")
	return hostL{}
}

func randomHex() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// eventLog keeps a workspace's egress decisions.
type eventLog struct {
	mu  sync.Mutex
	evs []wire.NetEvent
}

func (e *eventLog) add(ev wire.NetEvent) { e.mu.Lock(); e.evs = append(e.evs, ev); e.mu.Unlock() }

func (e *eventLog) has(verdict, proto string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, ev := range e.evs {
		if ev.Verdict == verdict && ev.Proto == proto {
			return true
		}
	}
	return false
}

func (e *eventLog) list() []wire.NetEvent {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]wire.NetEvent(nil), e.evs...)
}
