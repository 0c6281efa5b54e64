package intercept

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"mcpintercept/intercept/dns"
	"mcpintercept/intercept/upstream"
	"mcpintercept/origin"
	"mcpintercept/tlsmitm"
)

// dnsMechanism is the dns mechanism: its DNS server answers the configured names with VIPs, and
// the VIP pools (plus any intercept.destinations) are steered into the transparent listener with
// the same nftables TPROXY table and policy routing as nftables-tproxy. A flow to a VIP carries
// the name behind it (Origin.Host); the dialer resolves that name upstream when it dials.
type dnsMechanism struct {
	o       DNSOptions
	nft     *nftablesTProxy
	log     *slog.Logger
	table   *dns.VIPTable
	cache   *dns.Cache
	res     *dns.Resolver
	server  *dns.Server
	metrics *dns.Metrics
	stop    chan struct{}
	swept   chan struct{}
}

func newDNS(o Options) (Mechanism, error) {
	return &dnsMechanism{o: o.DNS, nft: newNftables(steered(o))}, nil
}

// steered is o as the TPROXY installer must see it: the VIP pools added to the steered
// destinations, every port when no port is listed (anything sent to a VIP belongs to the
// appliance; nothing else answers there).
func steered(o Options) Options {
	c := o
	c.Destinations = nil
	for _, p := range []netip.Prefix{o.DNS.V4, o.DNS.V6} {
		if p.IsValid() {
			c.Destinations = append(c.Destinations, p.Masked())
		}
	}
	c.Destinations = append(c.Destinations, o.Destinations...)
	if len(c.Ports) == 0 {
		c.Ports = []PortRange{{From: 1, To: 65535}}
	}
	return c
}

func (d *dnsMechanism) Name() origin.Mechanism { return origin.DNS }

// Open loads the VIP table from the state directory and binds the DNS server's sockets (UDP and
// TCP on dns.listen), before anything is installed.
func (d *dnsMechanism) Open(ctx context.Context, reg prometheus.Registerer, log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	d.log = log
	dc := d.o
	t, err := dns.OpenVIPTable(dns.VIPOptions{V4: dc.V4, V6: dc.V6, Hold: dc.Hold,
		Quarantine: dc.Quarantine, MaxNames: dc.MaxNames, ClientQuota: dc.ClientQuota,
		PatternQuota: dc.PatternQuota, Patterns: len(dc.Names), StateDir: dc.StateDir,
		Assignment: dc.VIPAssignment, Log: log})
	if err != nil {
		return err
	}
	d.table = t
	d.metrics = dns.NewMetrics(t.Len)
	d.metrics.Watch(t)
	cq, pq := t.Quotas()
	log.Info("dns: VIP quotas", "client_quota", cq, "pattern_quota", pq)
	if reg != nil {
		if err := d.metrics.Register(reg); err != nil {
			t.Close()
			return fmt.Errorf("dns metrics: %w", err)
		}
	}
	fwd := &dns.Forwarder{Servers: dc.Upstream, Timeout: dc.Timeout,
		Dialer: upstream.BypassDialer(d.bypassMark(), dc.Timeout)}
	d.cache = &dns.Cache{Upstream: fwd, Size: dc.CacheSize, OnHit: d.metrics.CacheHits.Inc, OnMiss: d.metrics.CacheMisses.Inc}
	d.res = &dns.Resolver{Cache: d.cache}
	d.server = dns.NewServer(dns.ServerOptions{Names: dc.Names, Table: t, Upstream: d.cache, Clients: dc.Clients,
		TTL: dc.TTL, ClientRate: dc.ClientRate, ClientBurst: dc.ClientBurst,
		Timeout: 2 * dc.Timeout * time.Duration(max(1, len(dc.Upstream))), Metrics: d.metrics, Log: log})
	if err := d.server.Listen(dc.Listen); err != nil {
		t.Close()
		return err
	}
	return nil
}

// Install steers the pools, then answers queries (a VIP is never handed out before packets to
// it reach the listener).
func (d *dnsMechanism) Install(ctx context.Context) error {
	if d.server == nil {
		return fmt.Errorf("dns: Install before Open")
	}
	if err := d.nft.Install(ctx); err != nil {
		return err
	}
	d.server.Serve()
	d.stop, d.swept = make(chan struct{}), make(chan struct{})
	go d.sweep(d.stop, d.swept)
	d.log.Info("dns server answering", "listen", fmt.Sprint(d.server.Addrs()), "names", len(d.o.Names))
	return nil
}

// sweep frees and forgets VIPs as hold and quarantine expire, and compacts the journal.
func (d *dnsMechanism) sweep(stop, done chan struct{}) {
	defer close(done)
	tk := time.NewTicker(time.Minute)
	defer tk.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tk.C:
			if err := d.table.Sweep(); err != nil {
				d.log.Warn("dns state", "err", err)
			}
		}
	}
}

// Remove stops answering and removes the steering; it is idempotent.
func (d *dnsMechanism) Remove(ctx context.Context) error {
	if d.server != nil {
		d.server.Close()
	}
	if d.stop != nil {
		close(d.stop)
		<-d.swept
		d.stop = nil
	}
	return d.nft.Remove(ctx)
}

// Close writes the VIP table out and closes the DNS sockets.
func (d *dnsMechanism) Close() error {
	if d.server != nil {
		d.server.Close()
	}
	if d.table != nil {
		return d.table.Close()
	}
	return nil
}

// Origin implements Mechanism: TPROXY delivers the packet unmodified, so the local address is
// the VIP (or a configured destination); the VIP table gives the name. A TLS client must send
// that name as its SNI, which is checked here by peeking (MSG_PEEK) at its ClientHello.
func (d *dnsMechanism) Origin(c *net.TCPConn) (origin.Origin, error) {
	dst, err := localAddress(c)
	if err != nil {
		return origin.Origin{}, err
	}
	o := origin.Origin{Dst: dst, Mechanism: string(origin.DNS)}
	if d.table == nil || !d.table.InPool(dst.Addr()) {
		return o, nil
	}
	name, ok := d.table.Name(dst.Addr())
	if !ok {
		name, ok = d.adopt(c, dst.Addr())
	}
	if !ok {
		return origin.Origin{}, dns.UnboundVIP(dst.Addr())
	}
	o.Host = name
	// The flow keeps the name live until the engine closes c: its VIP is never recycled under it.
	d.table.Track(dst.Addr(), c)
	if err := checkSNI(c, dst.Addr().String(), name, d.o.PeekTimeout, d.o.MaxClientHello); err != nil {
		return origin.Origin{}, err
	}
	return o, nil
}

// adopt binds the name a TLS client sends as its SNI to vip, which this replica never gave out,
// when the hash assignment gives that name vip here too: another replica answered the query
// (dns.vip_assignment: hash). A client without SNI, or naming what dns.names does not
// intercept, or a VIP off the name's hash sequence, is refused as before (unbound_vip).
func (d *dnsMechanism) adopt(c *net.TCPConn, vip netip.Addr) (string, bool) {
	if d.o.VIPAssignment != dns.AssignHash {
		return "", false
	}
	sni := peekSNI(c, d.o.PeekTimeout, d.o.MaxClientHello)
	client, _ := netip.ParseAddrPort(c.RemoteAddr().String())
	claim, ok := dns.ClaimFor(dns.NewNamePatterns(d.o.Names), client.Addr(), sni)
	if !ok {
		return "", false
	}
	ok, err := d.table.Adopt(vip, sni, claim)
	if err != nil {
		d.log.Warn("dns: adopting a VIP another replica answered", "vip", vip, "name", dns.CanonicalName(sni), "err", err)
	}
	if !ok {
		return "", false
	}
	d.log.Debug("dns: adopted a VIP another replica answered", "vip", vip, "name", dns.CanonicalName(sni))
	return dns.CanonicalName(sni), true
}

// peekSNI is the SNI of the client's ClientHello, peeked without consuming it ("" when the
// client sends no TLS, or none in time).
func peekSNI(c *net.TCPConn, timeout time.Duration, maxHello int) string {
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	c.SetReadDeadline(time.Now().Add(timeout))
	defer c.SetReadDeadline(time.Time{})
	h, _, _ := tlsmitm.Peek(&peekReader{c: c}, maxHello)
	if h == nil {
		return ""
	}
	return h.SNI
}

// ResolveVIP implements upstream.NameResolver: the name behind vip and its addresses upstream now.
func (d *dnsMechanism) ResolveVIP(ctx context.Context, vip netip.Addr) (string, []netip.Addr, bool, error) {
	if d.table == nil || !d.table.InPool(vip) {
		return "", nil, false, nil
	}
	name, ok := d.table.Name(vip)
	if !ok {
		return "", nil, true, dns.UnboundVIP(vip.Unmap())
	}
	addrs, err := d.res.Lookup(ctx, name)
	return name, addrs, true, err
}

// bypassMark is the mark of the forwarder's queries, the one every upstream dial carries.
func (d *dnsMechanism) bypassMark() uint32 { return d.nft.o.BypassMark }

// shapeDialer implements dialShaper: a VIP is dialled as the name behind it, resolved now; the
// pools themselves are never dialled; refusals count in the DNS server's registry.
func (d *dnsMechanism) shapeDialer(u *upstream.Dialer) bool {
	u.Deny.Add("VIP pool", d.o.V4, d.o.V6)
	u.VIPs = d
	if d.metrics == nil {
		return false
	}
	u.Metrics = d.metrics.UpstreamDeny
	return true
}

// Table is the VIP table (tests).
func (d *dnsMechanism) Table() *dns.VIPTable { return d.table }
