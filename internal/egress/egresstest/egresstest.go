// Package egresstest builds a small internet on this host for the egress
// tests: a network namespace of the test's own, reached from the host's
// through a veth pair, with two hosts (a web server that the tests allow,
// and a neighbour that must stay unreachable, which also runs a DNS
// server of its own), and a resolver on the host's loopback that only the
// daemon's egress asks (its Upstream). No packet of it leaves the machine:
// its addresses are in 198.18.0.0/15 (RFC 2544's benchmarking range),
// routed to the namespace.
package egresstest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/vishvananda/netns"

	"layerfs.dev/layerfs/internal/testenv"
)

// World is one test's internet.
type World struct {
	NS       string            // the namespace's name (ip netns)
	Web      netip.Addr        // the allowed host: HTTP on port 80 and 8080
	Other    netip.Addr        // the neighbour: HTTP on 80, DNS on 53
	Upstream string            // the resolver the daemon's egress asks, host:port
	Names    map[string]string // name -> address that Upstream answers
	// CA is the PEM certificate of the authority that signed Web's HTTPS
	// certificate (port 443, for web.test), which a sandbox must trust.
	CA []byte
	// OtherDNSQueries counts the questions the neighbour's DNS server got
	// (a sandbox must never reach it).
	OtherDNSQueries atomic.Int64
}

// Require skips t unless this host can build a World and run egress
// (root, ip, nft).
func Require(t testing.TB) {
	t.Helper()
	testenv.RequireRoot(t)
	for _, tool := range []string{"ip", "nft"} {
		if _, err := exec.LookPath(tool); err != nil {
			testenv.Skip(t, tool+" is missing (scripts/test-setup installs it)")
		}
	}
}

// New builds a World, removed at the end of t. Its names: web.test and
// www.web.test (Web), other.test (Other), private.test (10.99.0.5),
// meta.test (169.254.169.254), loop.test (127.0.0.1).
func New(t testing.TB) *World {
	t.Helper()
	Require(t)
	var w *World
	var err error
	// Another test's world may hold the subnet drawn: draw again.
	for range 8 {
		if w, err = newWorld(t); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(rw http.ResponseWriter, r *http.Request) { fmt.Fprintf(rw, "hello from %s\n", r.Host) })
	mux.HandleFunc("/stream", func(rw http.ResponseWriter, r *http.Request) {
		buf := make([]byte, 32<<10)
		for end := time.Now().Add(20 * time.Second); time.Now().Before(end); {
			if _, err := rw.Write(buf); err != nil {
				return
			}
			rw.(http.Flusher).Flush()
			time.Sleep(2 * time.Millisecond)
		}
	})
	mux.HandleFunc("/bytes", func(rw http.ResponseWriter, r *http.Request) {
		n := int64(64 << 20)
		fmt.Sscan(r.URL.Query().Get("n"), &n)
		rw.Header().Set("Content-Length", fmt.Sprint(n))
		_, _ = io.CopyN(rw, zeros{}, n)
	})
	for _, addr := range []string{w.Web.String() + ":80", w.Web.String() + ":8080", w.Other.String() + ":80"} {
		ln := w.Listen(t, "tcp4", addr)
		srv := &http.Server{Handler: mux}
		go srv.Serve(ln.(net.Listener))
		t.Cleanup(func() { srv.Close() })
	}
	ca, cert, err := selfSigned("web.test", w.Web)
	if err != nil {
		t.Fatal(err)
	}
	w.CA = ca
	tlsLn := tls.NewListener(w.Listen(t, "tcp4", w.Web.String()+":443").(net.Listener), &tls.Config{Certificates: []tls.Certificate{cert}})
	tlsSrv := &http.Server{Handler: mux}
	go tlsSrv.Serve(tlsLn)
	t.Cleanup(func() { tlsSrv.Close() })
	// The neighbour's DNS server answers everything: a sandbox that
	// reached it would resolve what the egress denies.
	pc := w.Listen(t, "udp4", w.Other.String()+":53").(net.PacketConn)
	other := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(rw dns.ResponseWriter, r *dns.Msg) {
		w.OtherDNSQueries.Add(1)
		m := new(dns.Msg)
		m.SetReply(r)
		m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: r.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60}, A: net.IP(w.Other.AsSlice())})
		_ = rw.WriteMsg(m)
	})}
	go other.ActivateAndServe()
	t.Cleanup(func() { other.Shutdown() })

	w.Names = map[string]string{"web.test": w.Web.String(), "www.web.test": w.Web.String(), "other.test": w.Other.String(),
		"private.test": "10.99.0.5", "meta.test": "169.254.169.254", "loop.test": "127.0.0.1"}
	up, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	w.Upstream = up.LocalAddr().String()
	upstream := &dns.Server{PacketConn: up, Handler: dns.HandlerFunc(w.answer)}
	go upstream.ActivateAndServe()
	t.Cleanup(func() { upstream.Shutdown() })
	return w
}

// newWorld makes the namespace and its link on a subnet drawn at random,
// removed at the end of t.
func newWorld(t testing.TB) (*World, error) {
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	tag := fmt.Sprintf("%x", b)
	second, third := 18+int(b[1]&1), int(b[0])
	w := &World{NS: "lfenet-" + tag,
		Web:   netip.AddrFrom4([4]byte{198, byte(second), byte(third), 2}),
		Other: netip.AddrFrom4([4]byte{198, byte(second), byte(third), 3})}
	host := "lfeu" + tag
	pfx := fmt.Sprintf("198.%d.%d", second, third)
	cleanup := func() {
		_ = exec.Command("ip", "netns", "del", w.NS).Run()
		_ = exec.Command("ip", "link", "del", host).Run()
	}
	if out, err := exec.Command("ip", "-4", "route", "show", pfx+".0/24").CombinedOutput(); err != nil || len(out) > 0 {
		return nil, fmt.Errorf("subnet %s.0/24 taken: %s %v", pfx, out, err)
	}
	t.Cleanup(cleanup)
	for _, args := range [][]string{
		{"netns", "add", w.NS},
		{"link", "add", host, "type", "veth", "peer", "name", "eth0", "netns", w.NS},
		{"addr", "add", pfx + ".1/24", "dev", host},
		{"link", "set", host, "up"},
		{"-n", w.NS, "addr", "add", w.Web.String() + "/24", "dev", "eth0"},
		{"-n", w.NS, "addr", "add", w.Other.String() + "/24", "dev", "eth0"},
		{"-n", w.NS, "link", "set", "eth0", "up"},
		{"-n", w.NS, "link", "set", "lo", "up"},
		{"-n", w.NS, "route", "add", "default", "via", pfx + ".1"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			cleanup()
			return nil, fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	return w, nil
}

// answer is the upstream resolver: the World's names, each with a TTL of
// 60 s; NXDOMAIN for others.
func (w *World) answer(rw dns.ResponseWriter, r *dns.Msg) {
	m := new(dns.Msg)
	m.SetReply(r)
	q := r.Question[0]
	a, ok := w.Names[strings.TrimSuffix(strings.ToLower(q.Name), ".")]
	switch {
	case !ok:
		m.Rcode = dns.RcodeNameError
	case q.Qtype == dns.TypeA:
		m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60}, A: net.ParseIP(a).To4()})
	case q.Qtype == dns.TypeAAAA:
		m.Answer = append(m.Answer, &dns.AAAA{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeAAAA, Class: dns.ClassINET, Ttl: 60}, AAAA: net.ParseIP("2001:db8::1")})
	}
	_ = rw.WriteMsg(m)
}

// Listen listens on addr inside the World's namespace.
func (w *World) Listen(t testing.TB, network, addr string) any {
	t.Helper()
	var ln any
	err := InNS(netnsPath(w.NS), func() error {
		var err error
		if strings.HasPrefix(network, "udp") {
			ln, err = net.ListenPacket(network, addr)
		} else {
			ln, err = net.Listen(network, addr)
		}
		return err
	})
	if err != nil {
		t.Fatalf("listen %s in %s: %v", addr, w.NS, err)
	}
	t.Cleanup(func() { ln.(io.Closer).Close() })
	return ln
}

func netnsPath(name string) string { return "/run/netns/" + name }

// InNS runs fn on a thread in the network namespace at path (a file of
// /run/netns or /proc/PID/ns/net): the sockets fn makes belong to it.
func InNS(path string, fn func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		return err
	}
	defer orig.Close()
	target, err := netns.GetFromPath(path)
	if err != nil {
		return err
	}
	defer target.Close()
	if err := netns.Set(target); err != nil {
		return err
	}
	defer func() {
		if err := netns.Set(orig); err != nil {
			panic("egresstest: cannot return to the original network namespace: " + err.Error())
		}
	}()
	return fn()
}

// Sandbox starts a process in a network namespace of its own (with only
// lo, down), ended with t, and returns its pid.
func Sandbox(t testing.TB) int {
	t.Helper()
	cmd := exec.Command("unshare", "--net", "sleep", "600")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	// unshare execs sleep once the namespace is made.
	for i := 0; i < 200; i++ {
		if a, b := readLink(fmt.Sprintf("/proc/%d/ns/net", cmd.Process.Pid)), readLink("/proc/self/ns/net"); a != "" && a != b {
			if exe := readLink(fmt.Sprintf("/proc/%d/exe", cmd.Process.Pid)); strings.HasSuffix(exe, "sleep") {
				return cmd.Process.Pid
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatal("unshare --net did not start")
	return 0
}

// Dial connects to addr from the namespace of process pid, within d.
func Dial(pid int, addr string, d time.Duration) (net.Conn, error) {
	var c net.Conn
	err := InNS(fmt.Sprintf("/proc/%d/ns/net", pid), func() error {
		var err error
		c, err = net.DialTimeout("tcp4", addr, d)
		return err
	})
	return c, err
}

// Resolve asks server (host:port) for name's A records from the namespace
// of process pid.
func Resolve(pid int, server, name string) (*dns.Msg, error) {
	var r *dns.Msg
	err := InNS(fmt.Sprintf("/proc/%d/ns/net", pid), func() error {
		c := &dns.Client{Net: "udp", Timeout: 2 * time.Second}
		m := new(dns.Msg)
		m.SetQuestion(dns.Fqdn(name), dns.TypeA)
		var err error
		r, _, err = c.Exchange(m, server)
		return err
	})
	return r, err
}

// Get fetches http://addr/path from the namespace of process pid with
// Host host, and returns the body.
func Get(ctx context.Context, pid int, addr, host, path string) (string, error) {
	c, err := Dial(pid, addr, 2*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	fmt.Fprintf(c, "GET %s HTTP/1.0\r\nHost: %s\r\n\r\n", path, host)
	b, err := io.ReadAll(c)
	if err != nil {
		return string(b), err
	}
	_, body, _ := strings.Cut(string(b), "\r\n\r\n")
	return body, nil
}

// selfSigned makes a certificate authority and a certificate it signed
// for name and addr; it returns the authority's PEM and the certificate.
func selfSigned(name string, addr netip.Addr) ([]byte, tls.Certificate, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, tls.Certificate{}, err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "egresstest CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, tls.Certificate{}, err
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, tls.Certificate{}, err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: name}, DNSNames: []string{name},
		IPAddresses: []net.IP{net.IP(addr.AsSlice())}, NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, tls.Certificate{}, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

func readLink(p string) string {
	s, _ := os.Readlink(p)
	return s
}
