package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/url"
	"os/exec"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"layerfs.dev/layerfs/internal/testenv"
)

// A test network of hosts, each in a network namespace of its own with its
// own address, made by the test with ip(8) and removed by it:
//
//	root ns (the test: clients, the S3 relay)  10.A.B.1 ─┐
//	host 0 (its daemon)                        10.A.B.10 ─┤ bridge in a
//	host 1                                     10.A.B.11 ─┤ namespace of
//	...                                                   ┘ its own
//
// Each link is a veth pair whose other end is a port of the bridge. The
// bridge lives in a namespace of its own so that this host's firewall
// (which Docker writes) never sees the hosts' traffic to each other.
// PostgreSQL answers on a unix socket, which a process in another network
// namespace reaches as any file; the S3 server listens on this host's
// loopback, which the hosts cannot reach, so the test relays a port of
// 10.A.B.1 to it.
type testNet struct {
	prefix string   // "10.A.B."
	tag    string   // in every name the test gives
	hosts  []string // the hosts' namespaces
}

// newTestNet makes a network of n hosts, removed when t ends.
func newTestNet(t *testing.T, n int) *testNet {
	t.Helper()
	testenv.RequireRoot(t)
	for _, tool := range []string{"ip", "nsenter"} {
		if _, err := exec.LookPath(tool); err != nil {
			testenv.Skip(t, "the fleet test makes network namespaces with "+tool+" (iproute2, util-linux): "+err.Error())
		}
	}
	var r [3]byte
	rand.Read(r[:])
	tn := &testNet{tag: hex.EncodeToString(r[:])}
	tn.prefix = tn.freeSubnet(t)
	sw := "lf-" + tn.tag + "-sw"
	t.Cleanup(func() { tn.remove(t, n) })
	tn.ip(t, "netns", "add", sw)
	tn.ip(t, "-n", sw, "link", "add", "br0", "type", "bridge")
	tn.ip(t, "-n", sw, "link", "set", "br0", "up")
	// The root namespace's link: lf<tag>r here, its peer a bridge port.
	tn.link(t, sw, "lf"+tn.tag+"r", "", "p-root")
	tn.ip(t, "addr", "add", tn.prefix+"1/24", "dev", "lf"+tn.tag+"r")
	tn.ip(t, "link", "set", "lf"+tn.tag+"r", "up")
	for i := range n {
		ns := fmt.Sprintf("lf-%s-h%d", tn.tag, i)
		tn.ip(t, "netns", "add", ns)
		tn.hosts = append(tn.hosts, ns)
		tn.link(t, sw, fmt.Sprintf("lf%sh%d", tn.tag, i), ns, fmt.Sprintf("p-h%d", i))
		tn.ip(t, "-n", ns, "addr", "add", tn.hostIP(i)+"/24", "dev", "eth0")
		tn.ip(t, "-n", ns, "link", "set", "eth0", "up")
		tn.ip(t, "-n", ns, "link", "set", "lo", "up")
	}
	return tn
}

// link makes a veth pair: name in namespace ns ("" the root one; renamed
// eth0 there), its peer port a port of the bridge in sw.
func (tn *testNet) link(t *testing.T, sw, name, ns, port string) {
	tn.ip(t, "link", "add", name, "type", "veth", "peer", "name", name+"p")
	tn.ip(t, "link", "set", name+"p", "netns", sw)
	tn.ip(t, "-n", sw, "link", "set", name+"p", "name", port)
	tn.ip(t, "-n", sw, "link", "set", port, "master", "br0")
	tn.ip(t, "-n", sw, "link", "set", port, "up")
	if ns != "" {
		tn.ip(t, "link", "set", name, "netns", ns)
		tn.ip(t, "-n", ns, "link", "set", name, "name", "eth0")
	}
}

// freeSubnet picks a 10.A.B.0/24 that no address or route of this host
// uses.
func (tn *testNet) freeSubnet(t *testing.T) string {
	used := tn.out(t, "-4", "-o", "addr") + tn.out(t, "-4", "route")
	var r [2]byte
	for range 20 {
		rand.Read(r[:])
		p := fmt.Sprintf("10.%d.%d.", 100+int(r[0])%100, r[1])
		if !strings.Contains(used, p) {
			return p
		}
	}
	t.Fatal("no free 10.x.y.0/24 for the test network")
	return ""
}

// hostIP is host i's address.
func (tn *testNet) hostIP(i int) string { return fmt.Sprintf("%s%d", tn.prefix, 10+i) }

// rootIP is the root namespace's address on the network.
func (tn *testNet) rootIP() string { return tn.prefix + "1" }

// enter is the command line prefix that runs a command in host i's
// network namespace (and only there: the file system is this host's).
func (tn *testNet) enter(i int) []string {
	return []string{"nsenter", "--net=/run/netns/" + tn.hosts[i], "--"}
}

func (tn *testNet) ip(t *testing.T, args ...string) {
	t.Helper()
	out, err := exec.Command("ip", args...).CombinedOutput()
	require.NoError(t, err, "ip %s: %s", strings.Join(args, " "), out)
}

func (tn *testNet) out(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("ip", args...).CombinedOutput()
	require.NoError(t, err, "ip %s: %s", strings.Join(args, " "), out)
	return string(out)
}

// remove deletes the namespaces the test made (their links go with them)
// and checks that nothing of the test's is left.
func (tn *testNet) remove(t *testing.T, n int) {
	names := []string{"lf-" + tn.tag + "-sw"}
	for i := range n {
		names = append(names, fmt.Sprintf("lf-%s-h%d", tn.tag, i))
	}
	for _, ns := range names {
		exec.Command("ip", "netns", "delete", ns).Run() // absent when setup failed early
	}
	exec.Command("ip", "link", "delete", "lf"+tn.tag+"r").Run() // gone with its peer, unless that was never moved
	links, _ := exec.Command("ip", "-o", "link").CombinedOutput()
	nss, _ := exec.Command("ip", "netns", "list").CombinedOutput()
	assert.NotContains(t, string(links), "lf"+tn.tag, "links of the test left")
	assert.NotContains(t, string(nss), "lf-"+tn.tag, "namespaces of the test left")
}

// relay forwards connections to listen (an address of this host on the
// test network) to target until t ends.
func relay(t *testing.T, listen, target string) string {
	t.Helper()
	l, err := net.Listen("tcp", listen)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() {
		cancel()
		l.Close()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				var d net.Dialer
				up, err := d.DialContext(ctx, "tcp", target)
				if err != nil {
					return
				}
				defer up.Close()
				defer context.AfterFunc(ctx, func() { c.Close(); up.Close() })()
				done := make(chan struct{})
				go func() {
					io.Copy(up, c)
					up.(*net.TCPConn).CloseWrite()
					close(done)
				}()
				io.Copy(c, up)
				c.(*net.TCPConn).CloseWrite()
				<-done
			})
		}
	})
	return l.Addr().String()
}

// viaRelay is the Store URL with its bucket reached through a relay on
// this host's address of the test network.
func viaRelay(t *testing.T, storeURL string, tn *testNet) string {
	t.Helper()
	u, err := url.Parse(storeURL)
	require.NoError(t, err)
	q := u.Query()
	b, err := url.Parse(q.Get("bucket"))
	require.NoError(t, err)
	b.Host = relay(t, net.JoinHostPort(tn.rootIP(), "0"), b.Host)
	q.Set("bucket", b.String())
	u.RawQuery = q.Encode()
	return u.String()
}

// TestFleetNetns: three daemons as three hosts, each in a network
// namespace of its own with its own address, on one PostgreSQL and one
// bucket: what testFleet checks, with a third host that neither made
// anything nor was asked for it seeing all of it.
func TestFleetNetns(t *testing.T) {
	testenv.RequireFUSE(t)
	storeURL := testenv.StoreURL(t)
	tn := newTestNet(t, 3)
	url := viaRelay(t, storeURL, tn)
	hosts := make([]*fleetHost, 3)
	for i := range hosts {
		hosts[i] = startFleetHost(t, url, tn.enter(i), tn.hostIP(i), 7070)
	}
	testFleet(t, hosts...)
}
