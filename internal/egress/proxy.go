package egress

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/wire"
)

// copyChunk is how many bytes a direction copies (by splice) between two
// updates of its count.
const copyChunk = 256 << 10

// proxied is one connection the proxy carries: the sandbox's end (in)
// and the one it made to dst (out).
type proxied struct {
	n       *Net
	l       *Link
	dst     netip.AddrPort
	in, out *net.TCPConn
	once    sync.Once
}

// cut resets both ends.
func (c *proxied) cut() {
	c.once.Do(func() {
		_ = c.in.SetLinger(0)
		_ = c.in.Close()
		if c.out != nil {
			_ = c.out.SetLinger(0)
			_ = c.out.Close()
		}
	})
}

func (m *Manager) serveProxy() {
	for {
		c, err := m.proxy.AcceptTCP()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		go m.carry(c)
	}
}

// carry decides the connection in and, allowed, carries it to its
// original destination.
func (m *Manager) carry(in *net.TCPConn) {
	reset := func() { _ = in.SetLinger(0); _ = in.Close() }
	src, err := netip.ParseAddrPort(in.RemoteAddr().String())
	if err != nil {
		reset()
		return
	}
	l, n := m.linkByAddr(src.Addr())
	if n == nil {
		reset()
		return
	}
	dst, err := originalDst(in)
	if err != nil {
		m.log.Warn("egress: original destination", "err", err)
		reset()
		return
	}
	ok, why, name := n.decide(dst)
	ev := wire.NetEvent{Proto: "tcp", Name: name, Address: dst.Addr().String(), Port: int(dst.Port()), Reason: why}
	if !ok {
		ev.Verdict = wire.VerdictDenied
		m.event(n, l, ev)
		reset()
		return
	}
	ev.Verdict = wire.VerdictAllowed
	m.event(n, l, ev)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	oc, err := m.cfg.Dial(ctx, "tcp4", dst.String())
	cancel()
	if err != nil {
		m.log.Debug("egress: connect", "dst", dst, "err", err)
		reset()
		return
	}
	out, isTCP := oc.(*net.TCPConn)
	if !isTCP {
		oc.Close()
		reset()
		return
	}
	c := &proxied{n: n, l: l, dst: dst, in: in, out: out}
	if !n.track(c) {
		c.cut()
		return
	}
	defer n.untrack(c)
	l.open.Add(1)
	defer l.open.Add(-1)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); m.pipe(out, in, &l.bytesOut, true) }()
	go func() { defer wg.Done(); m.pipe(in, out, &l.bytesIn, false) }()
	wg.Wait()
	_ = in.Close()
	_ = out.Close()
}

// counter is a byte count the proxy adds to.
type counter interface{ Add(int64) int64 }

// pipe copies src to dst by splice, counting into cnt (and the Manager's
// total), then closes dst's write side.
func (m *Manager) pipe(dst, src *net.TCPConn, cnt counter, outward bool) {
	total := &m.stats.bytesIn
	if outward {
		total = &m.stats.bytesOut
	}
	for {
		k, err := io.CopyN(dst, src, copyChunk)
		cnt.Add(k)
		total.Add(k)
		if err != nil {
			break
		}
	}
	_ = dst.CloseWrite()
}

// track registers c with its Net, unless the Net's policy, decided again
// now, denies it (a change of policy came between) or the Net is closed.
func (n *Net) track(c *proxied) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return false
	}
	if ok, _ := n.pol.Decide(c.dst.Addr(), int(c.dst.Port()), n.namesLocked(c.dst.Addr(), time.Now()), n.m.own); !ok {
		return false
	}
	n.conns[c] = struct{}{}
	return true
}

func (n *Net) untrack(c *proxied) {
	n.mu.Lock()
	delete(n.conns, c)
	n.mu.Unlock()
}

// originalDst is the destination a DNAT'd connection was made to.
func originalDst(c *net.TCPConn) (netip.AddrPort, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return netip.AddrPort{}, err
	}
	var out netip.AddrPort
	var serr error
	err = rc.Control(func(fd uintptr) {
		// SO_ORIGINAL_DST answers a sockaddr_in, which IPv6Mreq's 20
		// bytes hold: family, port (big-endian), address.
		mr, err := unix.GetsockoptIPv6Mreq(int(fd), unix.SOL_IP, unix.SO_ORIGINAL_DST)
		if err != nil {
			serr = err
			return
		}
		b := mr.Multiaddr
		out = netip.AddrPortFrom(netip.AddrFrom4([4]byte{b[4], b[5], b[6], b[7]}), uint16(b[2])<<8|uint16(b[3]))
	})
	if err != nil {
		return out, err
	}
	if serr != nil {
		return out, fmt.Errorf("SO_ORIGINAL_DST: %w", serr)
	}
	return out, nil
}
