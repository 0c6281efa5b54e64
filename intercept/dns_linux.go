package intercept

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"mcpintercept/config"
	"mcpintercept/origin"
)

// dnsMechanism is the dns mechanism: its DNS server answers the configured names with VIPs, and
// the VIP pools (plus any intercept.destinations) are steered into the transparent listener with
// the same nftables TPROXY table and policy routing as nftables-tproxy. A flow to a VIP carries
// the name behind it (Origin.Host); the dialer resolves that name upstream when it dials.
type dnsMechanism struct {
	cfg     *config.Config
	nft     *nftablesTProxy
	log     *slog.Logger
	table   *VIPTable
	cache   *Cache
	res     *Resolver
	server  *DNSServer
	metrics *DNSMetrics
	stop    chan struct{}
	swept   chan struct{}
}

func newDNSFromConfig(cfg *config.Config) (Mechanism, error) {
	return &dnsMechanism{cfg: cfg, nft: newNftables(steeredConfig(cfg))}, nil
}

// steeredConfig is cfg as the TPROXY installer must see it: the VIP pools added to the steered
// destinations, every port when intercept.ports is empty (anything sent to a VIP belongs to the
// appliance; nothing else answers there).
func steeredConfig(cfg *config.Config) *config.Config {
	c := *cfg
	c.Intercept.Destinations = nil
	for _, p := range []netip.Prefix{cfg.DNS.Pools.V4, cfg.DNS.Pools.V6} {
		if p.IsValid() {
			c.Intercept.Destinations = append(c.Intercept.Destinations, p.Masked())
		}
	}
	c.Intercept.Destinations = append(c.Intercept.Destinations, cfg.Intercept.Destinations...)
	if len(c.Intercept.Ports) == 0 {
		c.Intercept.Ports = []config.PortRange{{From: 1, To: 65535}}
	}
	return &c
}

func (d *dnsMechanism) Name() config.Mechanism { return config.DNS }

// Open loads the VIP table from the state directory and binds the DNS server's sockets (UDP and
// TCP on dns.listen), before anything is installed.
func (d *dnsMechanism) Open(ctx context.Context, reg prometheus.Registerer, log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	d.log = log
	dc := d.cfg.DNS
	t, err := OpenVIPTable(VIPOptions{V4: dc.Pools.V4, V6: dc.Pools.V6, Hold: dc.Hold.Duration,
		Quarantine: dc.Quarantine.Duration, MaxNames: dc.MaxNames, ClientQuota: dc.ClientQuota,
		PatternQuota: dc.PatternQuota, Patterns: len(dc.Names), StateDir: dc.StateDir, Log: log})
	if err != nil {
		return err
	}
	d.table = t
	d.metrics = NewDNSMetrics(t.Len)
	d.metrics.Watch(t)
	cq, pq := t.Quotas()
	log.Info("dns: VIP quotas", "client_quota", cq, "pattern_quota", pq)
	if reg != nil {
		if err := d.metrics.Register(reg); err != nil {
			t.Close()
			return fmt.Errorf("dns metrics: %w", err)
		}
	}
	fwd := &Forwarder{Servers: dc.Upstream, Timeout: dc.Timeout.Duration,
		Dialer: BypassDialer(d.cfg.Steering.BypassMark, dc.Timeout.Duration)}
	d.cache = &Cache{Upstream: fwd, Size: dc.CacheSize, OnHit: d.metrics.CacheHits.Inc, OnMiss: d.metrics.CacheMisses.Inc}
	d.res = &Resolver{Cache: d.cache}
	d.server = NewDNSServer(DNSServerOptions{Names: dc.Names, Table: t, Upstream: d.cache, Clients: dc.Clients,
		TTL: dc.TTL.Duration, ClientRate: dc.ClientRate, ClientBurst: dc.ClientBurst,
		Timeout: 2 * dc.Timeout.Duration * time.Duration(max(1, len(dc.Upstream))), Metrics: d.metrics, Log: log})
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
	d.log.Info("dns server answering", "listen", fmt.Sprint(d.server.Addrs()), "names", len(d.cfg.DNS.Names))
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
	o := origin.Origin{Dst: dst, Mechanism: string(config.DNS)}
	if d.table == nil || !d.table.InPool(dst.Addr()) {
		return o, nil
	}
	name, ok := d.table.Name(dst.Addr())
	if !ok {
		return origin.Origin{}, &UnboundVIPError{VIP: dst.Addr()}
	}
	o.Host = name
	// The flow keeps the name live until the engine closes c: its VIP is never recycled under it.
	d.table.Track(dst.Addr(), c)
	if err := checkSNI(c, dst.Addr().String(), name, d.cfg.TLS.PeekTimeout.Duration, d.cfg.TLS.MaxClientHello); err != nil {
		return origin.Origin{}, err
	}
	return o, nil
}

// ResolveVIP implements NameResolver: the name behind vip and its addresses upstream now.
func (d *dnsMechanism) ResolveVIP(ctx context.Context, vip netip.Addr) (string, []netip.Addr, bool, error) {
	if d.table == nil || !d.table.InPool(vip) {
		return "", nil, false, nil
	}
	name, ok := d.table.Name(vip)
	if !ok {
		return "", nil, true, &UnboundVIPError{VIP: vip.Unmap()}
	}
	addrs, err := d.res.Lookup(ctx, name)
	return name, addrs, true, err
}

func (d *dnsMechanism) dnsMetrics() *DNSMetrics { return d.metrics }

// Table is the VIP table (tests).
func (d *dnsMechanism) Table() *VIPTable { return d.table }
