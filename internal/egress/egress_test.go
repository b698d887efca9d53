package egress_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"layerfs.dev/layerfs/internal/egress"
	"layerfs.dev/layerfs/internal/egress/egresstest"
	"layerfs.dev/layerfs/internal/netpolicy"
	"layerfs.dev/layerfs/wire"
	"layerfs.dev/layerfs/wire/errclass"
)

// events collects a Net's decisions.
type events struct {
	mu  sync.Mutex
	evs []wire.NetEvent
}

func (e *events) add(ev wire.NetEvent) { e.mu.Lock(); e.evs = append(e.evs, ev); e.mu.Unlock() }

func (e *events) find(verdict, proto, what string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, ev := range e.evs {
		if ev.Verdict == verdict && ev.Proto == proto && (ev.Name == what || ev.Address == what || strings.HasPrefix(what, ev.Address+":") && fmt.Sprintf("%s:%d", ev.Address, ev.Port) == what) {
			return true
		}
	}
	return false
}

func (e *events) await(t *testing.T, verdict, proto, what string) {
	t.Helper()
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if e.find(verdict, proto, what) {
			return
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	t.Errorf("no %s %s event for %s; events: %+v", verdict, proto, what, e.evs)
}

func policy(t *testing.T, rules ...wire.NetworkRule) *netpolicy.Policy {
	t.Helper()
	p, err := netpolicy.Parse(rules)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func start(t *testing.T, w *egresstest.World) *egress.Manager {
	t.Helper()
	m, err := egress.New(egress.Config{Upstream: w.Upstream})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Close(context.Background()); err != nil {
			t.Errorf("close: %v", err)
		}
		if out, _ := exec.Command("nft", "list", "table", "inet", m.Table()).CombinedOutput(); !strings.Contains(string(out), "No such file") {
			t.Errorf("table %s left after Close: %s", m.Table(), out)
		}
	})
	return m
}

// TestEgress drives one sandbox through a policy: names, connections,
// the never-reached ranges, a change that cuts a stream, and the counts.
func TestEgress(t *testing.T) {
	w := egresstest.New(t)
	m := start(t, w)
	var evs events
	n, err := m.NewNet(policy(t, wire.NetworkRule{Domain: "web.test", Ports: []string{"80"}},
		wire.NetworkRule{Domain: "private.test"}, wire.NetworkRule{Domain: "meta.test"}), evs.add)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	pid := egresstest.Sandbox(t)
	t0 := time.Now()
	l, err := n.Attach(pid)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	t.Logf("attach: %v", time.Since(t0))
	dnsAt := egress.DefaultGateway.String() + ":53"
	ctx := context.Background()

	// A name the policy allows resolves through the daemon's resolver
	// (whatever server the sandbox asks), and its address may be reached
	// on the allowed port only.
	r, err := egresstest.Resolve(pid, w.Other.String()+":53", "web.test")
	if err != nil || r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 || !strings.Contains(r.Answer[0].String(), w.Web.String()) {
		t.Fatalf("resolve web.test: %v %v", r, err)
	}
	if q := w.OtherDNSQueries.Load(); q != 0 {
		t.Errorf("the neighbour's DNS server got %d questions: a sandbox reached another resolver", q)
	}
	evs.await(t, wire.VerdictAllowed, "dns", "web.test")
	body, err := egresstest.Get(ctx, pid, w.Web.String()+":80", "web.test", "/")
	if err != nil || !strings.Contains(body, "hello") {
		t.Fatalf("GET web.test: %q %v", body, err)
	}
	evs.await(t, wire.VerdictAllowed, "tcp", w.Web.String()+":80")

	// Refused at once, never a timeout: another port of the allowed
	// host, the neighbour, and the ranges a name never admits.
	for _, addr := range []string{w.Web.String() + ":8080", w.Other.String() + ":80", "10.99.0.5:80", "169.254.169.254:80",
		hostAddr(t) + ":22", egress.DefaultGateway.String() + ":22"} {
		t0 := time.Now()
		c, err := egresstest.Dial(pid, addr, 2*time.Second)
		if err == nil {
			_ = c.SetReadDeadline(time.Now().Add(time.Second))
			_, err = c.Read(make([]byte, 1))
			c.Close()
		}
		if ne, ok := err.(net.Error); err == nil || ok && ne.Timeout() || time.Since(t0) > 500*time.Millisecond {
			t.Errorf("connect %s: %v after %v, want refused at once", addr, err, time.Since(t0))
		}
	}
	evs.await(t, wire.VerdictDenied, "tcp", w.Other.String()+":80")
	for _, name := range []string{"other.test", "webxtest", "x.web.test"} {
		if r, err := egresstest.Resolve(pid, dnsAt, name); err != nil || r.Rcode != dns.RcodeNameError {
			t.Errorf("resolve %s: %v %v, want NXDOMAIN", name, r, err)
		}
	}
	evs.await(t, wire.VerdictDenied, "dns", "other.test")
	// A name the policy allows that answers a private or link-local
	// address gives none (DNS rebinding).
	for _, name := range []string{"private.test", "meta.test"} {
		if r, err := egresstest.Resolve(pid, dnsAt, name); err != nil || len(r.Answer) != 0 {
			t.Errorf("resolve %s: %v %v, want no address", name, r, err)
		}
	}

	// A change of policy cuts a stream it denies, at once.
	c, err := egresstest.Dial(pid, w.Web.String()+":80", 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET /stream HTTP/1.0\r\nHost: web.test\r\n\r\n")
	if _, err := io.ReadFull(c, make([]byte, 64<<10)); err != nil {
		t.Fatalf("stream: %v", err)
	}
	cut := make(chan time.Time, 1)
	go func() {
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, _ = io.Copy(io.Discard, c)
		cut <- time.Now()
	}()
	t0 = time.Now()
	if err := n.SetPolicy(policy(t, wire.NetworkRule{Domain: "other.test"})); err != nil {
		t.Fatal(err)
	}
	applied := time.Since(t0)
	ended := <-cut
	t.Logf("policy change: applied in %v, stream cut %v after the call", applied, ended.Sub(t0))
	if ended.Sub(t0) > time.Second {
		t.Errorf("stream cut %v after the policy change, want at once", ended.Sub(t0))
	}
	if _, err := egresstest.Dial(pid, w.Web.String()+":80", time.Second); err == nil {
		t.Error("web.test:80 still reachable after the policy denied it")
	}
	// The new policy's name works.
	if r, err := egresstest.Resolve(pid, dnsAt, "other.test"); err != nil || len(r.Answer) != 1 {
		t.Fatalf("resolve other.test: %v %v", r, err)
	}
	if body, err := egresstest.Get(ctx, pid, w.Other.String()+":80", "other.test", "/"); err != nil || !strings.Contains(body, "hello") {
		t.Errorf("GET other.test after the change: %q %v", body, err)
	}

	u := l.Usage()
	if u.ConnectionsAllowed < 3 || u.ConnectionsDenied < 6 || u.NamesAllowed < 2 || u.NamesDenied < 3 || u.BytesIn < 64<<10 || u.BytesOut == 0 {
		t.Errorf("usage %+v: counts too low", u)
	}
	if s := m.Stats(); s.ConnectionsAllowed != u.ConnectionsAllowed || s.Links != 1 {
		t.Errorf("stats %+v, usage %+v", s, u)
	}
}

// hostAddr is one of the host's own addresses, not loopback.
func hostAddr(t *testing.T) string {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if pfx, err := netip.ParsePrefix(a.String()); err == nil && pfx.Addr().Is4() && !pfx.Addr().IsLoopback() {
			return pfx.Addr().String()
		}
	}
	t.Skip("the host has no IPv4 address but loopback")
	return ""
}

// TestCIDR: an address listed by CIDR is reached without a name, even in
// a private range; an explicit port range holds.
func TestCIDR(t *testing.T) {
	w := egresstest.New(t)
	m := start(t, w)
	n, err := m.NewNet(policy(t, wire.NetworkRule{CIDR: w.Web.String() + "/32", Ports: []string{"8000-8100"}}), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	pid := egresstest.Sandbox(t)
	if _, err := n.Attach(pid); err != nil {
		t.Fatal(err)
	}
	if body, err := egresstest.Get(context.Background(), pid, w.Web.String()+":8080", "x", "/"); err != nil || !strings.Contains(body, "hello") {
		t.Errorf("GET by CIDR: %q %v", body, err)
	}
	if _, err := egresstest.Dial(pid, w.Web.String()+":80", time.Second); err == nil {
		t.Error("port 80 reachable outside the rule's ports")
	}
}

// TestFailsClosed: without nft there is no Manager, and the error says
// why.
func TestFailsClosed(t *testing.T) {
	egresstest.Require(t)
	m, err := egress.New(egress.Config{NFT: "/nonexistent/nft", Upstream: "127.0.0.1:53"})
	if err != nil {
		t.Fatal(err)
	}
	err = m.Start(context.Background())
	if !errors.Is(err, errclass.Unavailable) || !strings.Contains(err.Error(), "nft") {
		t.Fatalf("Start without nft: %v, want unavailable naming nft", err)
	}
	if _, err := m.NewNet(nil, nil); !errors.Is(err, errclass.Unavailable) {
		t.Errorf("NewNet on a manager that did not start: %v", err)
	}
}

// TestTableLost: when the Manager's table is removed by hand, its links
// go (the sandbox has no interface left but lo) and no new one is made.
func TestTableLost(t *testing.T) {
	w := egresstest.New(t)
	m, err := egress.New(egress.Config{Upstream: w.Upstream})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := m.Close(context.Background()); err != nil {
			t.Errorf("close after the table went: %v", err)
		}
	}()
	n, err := m.NewNet(policy(t, wire.NetworkRule{CIDR: w.Web.String()}), nil)
	if err != nil {
		t.Fatal(err)
	}
	pid := egresstest.Sandbox(t)
	l, err := n.Attach(pid)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("nft", "delete", "table", "inet", m.Table()).CombinedOutput(); err != nil {
		t.Fatalf("nft delete table: %v %s", err, out)
	}
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if _, err := net.InterfaceByName(l.Name()); err != nil {
			break
		}
		if time.Now().After(end) {
			t.Fatal("the link outlived its table")
		}
	}
	if _, err := egresstest.Dial(pid, w.Web.String()+":80", time.Second); err == nil {
		t.Error("the sandbox still reaches the web server")
	}
	if _, err := n.Attach(egresstest.Sandbox(t)); !errors.Is(err, errclass.Unavailable) {
		t.Errorf("Attach after the table went: %v, want unavailable", err)
	}
	if err := n.Close(); err != nil {
		t.Errorf("close the net after the table went: %v", err)
	}
}
