package egress

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/internal/netpolicy"
	"layerfs.dev/layerfs/wire"
)

// The netlink log (nfnetlink_log) messages and attributes read here.
const (
	nfnlSubsysULOG     = 4
	nfulnlMsgPacket    = 0
	nfulnlMsgConfig    = 1
	nfulaCfgCmd        = 1
	nfulaCfgMode       = 2
	nfulaCfgQthresh    = 4
	nfulnlCfgCmdBind   = 1
	nfulnlCfgCmdUnbind = 2
	nfulnlCopyPacket   = 2
	nfulaIfindexIndev  = 4
	nfulaPayload       = 9
	nflogCopyRange     = 64 // an IPv4 header with options and the ports
)

// nflogReader reads the packets the table logged to one netlink log
// group: the new connections it refused.
type nflogReader struct {
	fd      int
	group   uint16
	closed  atomic.Bool
	reading atomic.Bool // read owns the descriptor, and closes it
}

// openNflog binds the netlink log group, copying each packet's first
// bytes. A group another process holds fails.
func openNflog(group uint16) (*nflogReader, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_NETFILTER)
	if err != nil {
		return nil, err
	}
	r := &nflogReader{fd: fd, group: group}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		unix.Close(fd)
		return nil, err
	}
	tv := unix.Timeval{Usec: 200_000}
	_ = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	if err := r.config(nfulaCfgCmd, []byte{nfulnlCfgCmdBind}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("bind: %w", err)
	}
	mode := make([]byte, 6)
	binary.BigEndian.PutUint32(mode, nflogCopyRange)
	mode[4] = nfulnlCopyPacket
	if err := r.config(nfulaCfgMode, mode); err != nil {
		r.close()
		return nil, fmt.Errorf("copy mode: %w", err)
	}
	// One packet a message, sent at once: the kernel otherwise holds
	// them for up to a second.
	if err := r.config(nfulaCfgQthresh, []byte{0, 0, 0, 1}); err != nil {
		r.close()
		return nil, fmt.Errorf("queue threshold: %w", err)
	}
	return r, nil
}

// config sends one configuration attribute for the group and waits for
// its acknowledgement.
func (r *nflogReader) config(attr uint16, val []byte) error {
	alen := 4 + len(val)
	msg := make([]byte, unix.NLMSG_HDRLEN+4+nlaAlign(alen))
	binary.NativeEndian.PutUint32(msg[0:], uint32(len(msg)))
	binary.NativeEndian.PutUint16(msg[4:], nfnlSubsysULOG<<8|nfulnlMsgConfig)
	binary.NativeEndian.PutUint16(msg[6:], unix.NLM_F_REQUEST|unix.NLM_F_ACK)
	binary.NativeEndian.PutUint32(msg[8:], 1)
	g := msg[unix.NLMSG_HDRLEN:]
	g[0], g[1] = unix.AF_UNSPEC, 0 // nfgenmsg: family, version
	binary.BigEndian.PutUint16(g[2:], r.group)
	a := g[4:]
	binary.NativeEndian.PutUint16(a[0:], uint16(alen))
	binary.NativeEndian.PutUint16(a[2:], attr)
	copy(a[4:], val)
	if err := unix.Sendto(r.fd, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return err
	}
	buf := make([]byte, 4096)
	for range 16 {
		n, _, err := unix.Recvfrom(r.fd, buf, 0)
		if err != nil {
			return err
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			return err
		}
		for _, m := range msgs {
			if m.Header.Type == unix.NLMSG_ERROR && len(m.Data) >= 4 {
				if e := int32(binary.NativeEndian.Uint32(m.Data)); e != 0 {
					return syscall.Errno(-e)
				}
				return nil
			}
		}
	}
	return fmt.Errorf("no acknowledgement")
}

func nlaAlign(n int) int { return (n + 3) &^ 3 }

// read hands each logged packet's input interface, protocol and
// destination to fn until close.
// start marks that read will run: it owns the socket from now on.
func (r *nflogReader) start() { r.reading.Store(true) }

func (r *nflogReader) read(fn func(ifindex int, proto string, dst netip.AddrPort)) {
	defer unix.Close(r.fd)
	buf := make([]byte, 1<<16)
	for !r.closed.Load() {
		n, _, err := unix.Recvfrom(r.fd, buf, 0)
		if err != nil {
			continue // the timeout, to look at closed; ENOBUFS: packets lost
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			continue
		}
		for _, m := range msgs {
			if m.Header.Type != nfnlSubsysULOG<<8|nfulnlMsgPacket || len(m.Data) < 4 {
				continue
			}
			ifindex, payload := -1, []byte(nil)
			for a := m.Data[4:]; len(a) >= 4; {
				l := int(binary.NativeEndian.Uint16(a[0:]))
				t := binary.NativeEndian.Uint16(a[2:]) & 0x3fff
				if l < 4 || l > len(a) {
					break
				}
				switch t {
				case nfulaIfindexIndev:
					if l >= 8 {
						ifindex = int(binary.BigEndian.Uint32(a[4:8]))
					}
				case nfulaPayload:
					payload = a[4:l]
				}
				a = a[min(nlaAlign(l), len(a)):]
			}
			if proto, dst, ok := parseIPv4(payload); ok && ifindex > 0 {
				fn(ifindex, proto, dst)
			}
		}
	}
}

// parseIPv4 reads an IPv4 packet's protocol and destination (the port
// for TCP and UDP).
func parseIPv4(p []byte) (string, netip.AddrPort, bool) {
	if len(p) < 20 || p[0]>>4 != 4 {
		return "", netip.AddrPort{}, false
	}
	ihl := int(p[0]&0xf) * 4
	dst := netip.AddrFrom4([4]byte(p[16:20]))
	proto := map[byte]string{1: "icmp", 6: "tcp", 17: "udp"}[p[9]]
	if proto == "" {
		proto = fmt.Sprintf("ip proto %d", p[9])
	}
	port := uint16(0)
	if (p[9] == 6 || p[9] == 17) && len(p) >= ihl+4 {
		port = binary.BigEndian.Uint16(p[ihl+2:])
	}
	return proto, netip.AddrPortFrom(dst, port), true
}

func (r *nflogReader) close() {
	if r.closed.Swap(true) {
		return
	}
	// A reader leaves within its receive timeout and closes the socket
	// (which unbinds the group); without one it is closed here.
	if !r.reading.Load() {
		unix.Close(r.fd)
	}
}

// denied is a packet the table refused: an event of its link's Net.
func (m *Manager) denied(ifindex int, proto string, dst netip.AddrPort) {
	m.mu.Lock()
	l := m.byIndex[ifindex]
	m.mu.Unlock()
	if l == nil {
		return
	}
	why := "no rule"
	if w := netpolicy.Never(dst.Addr(), m.own); w != "" {
		why = "never (" + w + ")"
	}
	m.event(l.net, l, wire.NetEvent{Proto: proto, Address: dst.Addr().String(), Port: int(dst.Port()), Verdict: wire.VerdictDenied, Reason: why})
}
