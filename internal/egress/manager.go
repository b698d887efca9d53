package egress

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/miekg/dns"
	"golang.org/x/sys/unix"

	"layerfs.dev/layerfs/internal/netpolicy"
	"layerfs.dev/layerfs/wire"
	"layerfs.dev/layerfs/wire/errclass"
)

// ErrUnavailable: this host cannot give egress (no nft, no table, no
// listener); the mode is refused, never run open.
var ErrUnavailable = errclass.New(errclass.Unavailable, "egress unavailable")

// Defaults of Config.
var (
	DefaultGateway = netip.MustParseAddr("100.127.255.254")
	DefaultSubnet  = netip.MustParsePrefix("100.96.0.0/12")
)

// Config configures a Manager. The zero Config is usable.
type Config struct {
	// Tag names the Manager's table (layerfs_TAG) and prefixes its links'
	// names (lfTAG...): 1 to 6 of a-z and 0-9. A Manager removes a table of
	// its tag left by one before it (a crashed daemon). Default: random.
	Tag string
	// Upstream is the resolver that answers allowed names, "host:port".
	// Default: the first nameserver of /etc/resolv.conf, port 53.
	Upstream string
	// NFT is the nft command; default "nft" on PATH.
	NFT string
	// Gateway is the address of the host's end of every link, where the
	// DNS server and the proxy listen; Subnet holds the sandboxes' own
	// addresses. Defaults: DefaultGateway, DefaultSubnet.
	Gateway netip.Addr
	Subnet  netip.Prefix
	// LogGroup is the netlink log group of denied packets; 0: one derived
	// from Tag.
	LogGroup uint16
	// Dial makes the proxy's connections; default a net.Dialer with a 10 s
	// timeout, from the host's network.
	Dial   func(ctx context.Context, network, addr string) (net.Conn, error)
	Logger *slog.Logger
}

// Stats are a Manager's decisions since Start, for /metrics.
type Stats struct {
	ConnectionsAllowed, ConnectionsDenied int64
	NamesAllowed, NamesDenied             int64
	BytesOut, BytesIn                     int64
	Links                                 int64 // links up now
}

// Manager is one daemon's egress: its nftables table, DNS server and
// proxy, and the workspaces' Nets and sandboxes' Links on them. Start it
// once; Close removes all it made.
type Manager struct {
	cfg    Config
	log    *slog.Logger
	nft    string
	table  string
	prefix string
	group  uint16

	udp, tcp   *dns.Server
	dnsPort    int
	proxy      *net.TCPListener
	proxyPort  int
	nflog      *nflogReader
	ownAddrs   atomic.Pointer[map[netip.Addr]bool]
	stopOwn    chan struct{}
	nftMu      sync.Mutex // one nft at a time: a change is one transaction
	background sync.WaitGroup

	mu       sync.Mutex
	nets     map[int]*Net
	links    map[netip.Addr]*Link
	byIndex  map[int]*Link
	nextNet  int
	nextLink int
	nextAddr uint32
	closed   bool
	lost     error // the table went; no link is made again

	stats struct {
		connsAllowed, connsDenied, namesAllowed, namesDenied, bytesOut, bytesIn atomic.Int64
	}
}

// New checks cfg and returns a Manager that is not started.
func New(cfg Config) (*Manager, error) {
	if cfg.Tag == "" {
		b := make([]byte, 4)
		_, _ = rand.Read(b)
		cfg.Tag = fmt.Sprintf("%x", b)[:6]
	}
	if len(cfg.Tag) > 6 || strings.Trim(cfg.Tag, "abcdefghijklmnopqrstuvwxyz0123456789") != "" {
		return nil, fmt.Errorf("%w: egress tag %q: want 1 to 6 of a-z and 0-9", errclass.Invalid, cfg.Tag)
	}
	if !cfg.Gateway.IsValid() {
		cfg.Gateway = DefaultGateway
	}
	if !cfg.Subnet.IsValid() {
		cfg.Subnet = DefaultSubnet
	}
	if !cfg.Gateway.Is4() || !cfg.Subnet.Addr().Is4() || cfg.Subnet.Bits() > 24 || cfg.Subnet.Contains(cfg.Gateway) {
		return nil, fmt.Errorf("%w: egress gateway %s and subnet %s: want IPv4, a subnet of /24 or more without the gateway", errclass.Invalid, cfg.Gateway, cfg.Subnet)
	}
	if cfg.LogGroup == 0 {
		h := uint16(0)
		for _, c := range cfg.Tag {
			h = h*31 + uint16(c)
		}
		cfg.LogGroup = 1000 + h%30000
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.Dial == nil {
		d := &net.Dialer{Timeout: 10 * time.Second}
		cfg.Dial = d.DialContext
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return &Manager{cfg: cfg, log: log, table: "layerfs_" + cfg.Tag, prefix: "lf" + cfg.Tag, group: cfg.LogGroup,
		nets: map[int]*Net{}, links: map[netip.Addr]*Link{}, byIndex: map[int]*Link{},
		nextAddr: uint32(b[0])<<16 | uint32(b[1])<<8 | uint32(b[2]), stopOwn: make(chan struct{})}, nil
}

// Table is the name of the Manager's nftables table (family inet).
func (m *Manager) Table() string { return m.table }

// Describe says how the Manager gives egress, for a platform's Isolation.
func (m *Manager) Describe() string {
	return fmt.Sprintf("nftables table inet %s: default deny, names through the daemon's resolver (upstream %s), TCP through its proxy; IPv6 dropped", m.table, m.cfg.Upstream)
}

// Start finds nft, installs the table and starts the DNS server, the
// proxy and the log reader. Any failure is ErrUnavailable with its cause,
// and leaves nothing behind.
func (m *Manager) Start(ctx context.Context) (err error) {
	defer func() {
		if err != nil {
			m.Close(context.Background())
			err = fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
	}()
	if os.Geteuid() != 0 {
		return errors.New("needs root (links, nftables)")
	}
	nft := m.cfg.NFT
	if nft == "" {
		nft = "nft"
	}
	path, err := exec.LookPath(nft)
	if err != nil {
		return fmt.Errorf("nftables: %w (install Debian's nftables)", err)
	}
	m.nft = path
	if m.cfg.Upstream == "" {
		if m.cfg.Upstream, err = hostResolver("/etc/resolv.conf"); err != nil {
			return err
		}
	}
	m.refreshOwn()
	gw := m.cfg.Gateway.String()
	if m.udp, m.tcp, m.dnsPort, err = m.listenDNS(gw); err != nil {
		return fmt.Errorf("dns listener on %s: %w", gw, err)
	}
	ln, err := listenFreebind(ctx, "tcp4", gw+":0")
	if err != nil {
		return fmt.Errorf("proxy listener on %s: %w", gw, err)
	}
	m.proxy = ln.(*net.TCPListener)
	m.proxyPort = m.proxy.Addr().(*net.TCPAddr).Port
	if m.nflog, err = openNflog(m.group); err != nil {
		return fmt.Errorf("netlink log group %d: %w", m.group, err)
	}
	if err := m.run(m.tableScript()); err != nil {
		return err
	}
	m.nflog.start()
	m.background.Add(3)
	go func() { defer m.background.Done(); m.serveProxy() }()
	go func() { defer m.background.Done(); m.nflog.read(m.denied) }()
	go func() { defer m.background.Done(); m.watchOwn() }()
	m.log.Info("egress up", "table", m.table, "dns", m.dnsPort, "proxy", m.proxyPort, "upstream", m.cfg.Upstream)
	return nil
}

// tableScript is the Manager's table, made anew.
func (m *Manager) tableScript() string {
	p, gw, dnsPort, proxyPort := m.prefix+"*", m.cfg.Gateway, m.dnsPort, m.proxyPort
	return fmt.Sprintf(`table inet %[1]s
delete table inet %[1]s
table inet %[1]s {
	map links { type ifname : verdict; }
	set addrs { type ifname . ipv4_addr; }
	chain pre {
		type filter hook prerouting priority -150; policy accept;
		iifname != %[2]q accept
		meta nfproto ipv6 drop
		iifname . ip saddr != @addrs drop
		ct state established,related accept
		meta l4proto { tcp, udp } th dport 53 accept
		meta l4proto tcp iifname vmap @links
		log group %[6]d
		meta l4proto tcp reject with tcp reset
		reject with icmpx admin-prohibited
	}
	chain nat {
		type nat hook prerouting priority -100; policy accept;
		iifname != %[2]q accept
		meta l4proto { tcp, udp } th dport 53 dnat ip to %[3]s:%[4]d
		meta l4proto tcp dnat ip to %[3]s:%[5]d
	}
	chain in {
		type filter hook input priority -150; policy accept;
		iifname %[2]q ip daddr %[3]s meta l4proto { tcp, udp } th dport %[4]d accept
		iifname %[2]q ip daddr %[3]s tcp dport %[5]d accept
		iifname %[2]q drop
		ip daddr %[3]s meta l4proto { tcp, udp } th dport { %[4]d, %[5]d } drop
	}
}
`, m.table, p, gw, dnsPort, proxyPort, m.group)
}

// run applies an nft script as one transaction.
func (m *Manager) run(script string) error {
	m.nftMu.Lock()
	defer m.nftMu.Unlock()
	if m.nft == "" {
		return errors.New("nftables: not started")
	}
	cmd := exec.Command(m.nft, "-f", "-")
	cmd.Stdin = strings.NewReader(script)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("nft: %w: %s", err, strings.TrimSpace(out.String()))
	}
	return nil
}

// Stats are the Manager's counts since Start.
func (m *Manager) Stats() Stats {
	m.mu.Lock()
	links := int64(len(m.links))
	m.mu.Unlock()
	return Stats{ConnectionsAllowed: m.stats.connsAllowed.Load(), ConnectionsDenied: m.stats.connsDenied.Load(),
		NamesAllowed: m.stats.namesAllowed.Load(), NamesDenied: m.stats.namesDenied.Load(),
		BytesOut: m.stats.bytesOut.Load(), BytesIn: m.stats.bytesIn.Load(), Links: links}
}

// Close stops the listeners, closes every Net (their links and
// connections) and removes the table. It can be called more than once.
func (m *Manager) Close(ctx context.Context) error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	nets := make([]*Net, 0, len(m.nets))
	for _, n := range m.nets {
		nets = append(nets, n)
	}
	m.mu.Unlock()
	var errs []error
	for _, n := range nets {
		n.close()
	}
	if m.udp != nil {
		errs = append(errs, m.udp.Shutdown())
	}
	if m.tcp != nil {
		errs = append(errs, m.tcp.Shutdown())
	}
	if m.proxy != nil {
		errs = append(errs, m.proxy.Close())
	}
	if m.nflog != nil {
		m.nflog.close()
	}
	close(m.stopOwn)
	m.mu.Lock()
	lost := m.lost
	m.mu.Unlock()
	if m.nft != "" && lost == nil {
		errs = append(errs, m.run(fmt.Sprintf("table inet %[1]s\ndelete table inet %[1]s\n", m.table)))
	}
	done := make(chan struct{})
	go func() { m.background.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		errs = append(errs, ctx.Err())
	}
	return errors.Join(errs...)
}

// own reports the host's own addresses (refreshed every few seconds).
func (m *Manager) own(a netip.Addr) bool {
	if a == m.cfg.Gateway {
		return true
	}
	p := m.ownAddrs.Load()
	return p != nil && (*p)[a]
}

func (m *Manager) refreshOwn() {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return
	}
	own := map[netip.Addr]bool{}
	for _, a := range addrs {
		if pfx, err := netip.ParsePrefix(a.String()); err == nil {
			own[pfx.Addr().Unmap()] = true
		}
	}
	m.ownAddrs.Store(&own)
}

// watchInterval is how often the Manager refreshes the host's addresses
// and checks that its table is still there.
const watchInterval = 3 * time.Second

func (m *Manager) watchOwn() {
	t := time.NewTicker(watchInterval)
	defer t.Stop()
	for {
		select {
		case <-m.stopOwn:
			return
		case <-t.C:
			m.refreshOwn()
			m.checkTable()
		}
	}
}

// checkTable fails closed when the Manager's table is gone (removed by
// hand, a flush of the ruleset): every link is removed, so that no
// sandbox keeps an unfiltered interface, and no new one is made.
func (m *Manager) checkTable() {
	if m.run(fmt.Sprintf("list table inet %s\n", m.table)) == nil {
		return
	}
	m.mu.Lock()
	if m.closed || m.lost != nil {
		m.mu.Unlock()
		return
	}
	m.lost = fmt.Errorf("%w: the nftables table %s is gone: every sandbox link was removed", ErrUnavailable, m.table)
	links := make([]*Link, 0, len(m.links))
	for _, l := range m.links {
		links = append(links, l)
	}
	m.mu.Unlock()
	m.log.Error("egress: table lost; sandbox links removed", "table", m.table, "links", len(links))
	for _, l := range links {
		l.Close()
	}
}

// hostResolver is the first nameserver of a resolv.conf, as host:port.
func hostResolver(path string) (string, error) {
	cc, err := dns.ClientConfigFromFile(path)
	if err != nil {
		return "", fmt.Errorf("host resolver: %w", err)
	}
	if len(cc.Servers) == 0 {
		return "", fmt.Errorf("host resolver: %s names no nameserver", path)
	}
	return net.JoinHostPort(cc.Servers[0], cc.Port), nil
}

// listenFreebind listens on addr even before the address is on an
// interface (it comes with the first link).
func listenFreebind(ctx context.Context, network, addr string) (net.Listener, error) {
	lc := net.ListenConfig{Control: freebind}
	return lc.Listen(ctx, network, addr)
}

func freebind(_, _ string, c syscall.RawConn) error {
	var serr error
	err := c.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_IP, unix.IP_FREEBIND, 1)
	})
	if err != nil {
		return err
	}
	return serr
}

// event counts a decision and hands it to the Net's and the Link's
// observers.
func (m *Manager) event(n *Net, l *Link, ev wire.NetEvent) {
	if ev.Time.IsZero() {
		ev.Time = time.Now()
	}
	allowed := ev.Verdict == wire.VerdictAllowed
	dnsEv := ev.Proto == "dns"
	switch {
	case dnsEv && allowed:
		m.stats.namesAllowed.Add(1)
	case dnsEv:
		m.stats.namesDenied.Add(1)
	case allowed:
		m.stats.connsAllowed.Add(1)
	default:
		m.stats.connsDenied.Add(1)
	}
	if l != nil {
		l.count(dnsEv, allowed)
	}
	if n != nil && n.events != nil {
		n.events(ev)
	}
}

// linkByAddr is the link whose sandbox has address a, and its Net.
func (m *Manager) linkByAddr(a netip.Addr) (*Link, *Net) {
	m.mu.Lock()
	defer m.mu.Unlock()
	l := m.links[a.Unmap()]
	if l == nil {
		return nil, nil
	}
	return l, l.net
}

// policyOf is n's policy now.
func policyOf(n *Net) *netpolicy.Policy {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.pol
}
