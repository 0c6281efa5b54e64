package dns

import (
	"sync/atomic"

	mdns "github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"

	"mcpintercept/intercept/upstream"
)

// Metrics are the DNS server's counters. Register them on the appliance's registry.
type Metrics struct {
	Queries     *prometheus.CounterVec // type, outcome
	VIPs        prometheus.GaugeFunc
	VIPsBound   prometheus.Counter
	CacheHits   prometheus.Counter
	CacheMisses prometheus.Counter
	// UpstreamDeny is the upstream dialer's refusal counter, registered with the DNS counters
	// so the dialer of the dns mechanism counts into the same series.
	UpstreamDeny upstream.DenyCounter
	// QuotaRefused counts queries refused because their client or pattern was at its quota
	// (scope: client, pattern); the log line names which client and pattern.
	QuotaRefused *prometheus.CounterVec
	// Recycled counts idle VIPs taken back for another name (reason: pool, max_names,
	// client_quota, pattern_quota).
	Recycled *prometheus.CounterVec
	// PoolNearFull counts a pool crossing NearFull (family: v4, v6); PoolUse is the bound share
	// of each pool now.
	PoolNearFull *prometheus.CounterVec
	PoolUse      []prometheus.GaugeFunc
	// Collisions counts names bound away from their first hash slot (dns.vip_assignment: hash;
	// family: v4, v6): the names on which replicas may disagree.
	Collisions *prometheus.CounterVec

	table atomic.Pointer[VIPTable]
}

// NewMetrics builds the counters; vips reports the VIP table's size (nil: 0).
func NewMetrics(vips func() int) *Metrics {
	if vips == nil {
		vips = func() int { return 0 }
	}
	m := &Metrics{
		Queries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mcpintercept_dns_queries_total",
			Help: "DNS queries by type (A, AAAA, HTTPS, SVCB, other) and outcome (vip, nodata, forwarded, servfail, refused, exhausted, quota, malformed, flood)."},
			[]string{"type", "outcome"}),
		VIPs: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "mcpintercept_dns_vips", Help: "Names bound to a VIP (live or quarantined)."},
			func() float64 { return float64(vips()) }),
		VIPsBound: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mcpintercept_dns_vips_allocated_total", Help: "VIPs bound to a name for the first time."}),
		CacheHits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mcpintercept_dns_cache_hits_total", Help: "Upstream answers served from the cache."}),
		CacheMisses: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mcpintercept_dns_cache_misses_total", Help: "Queries sent to the upstream resolvers."}),
		UpstreamDeny: upstream.NewDenyCounter(),
		QuotaRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mcpintercept_dns_quota_refused_total",
			Help: "Queries for a new intercepted name refused (REFUSED) because the client or the name pattern holds its VIP quota (dns.client_quota, dns.pattern_quota)."},
			[]string{"scope"}),
		Recycled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mcpintercept_dns_vips_recycled_total",
			Help: "Idle VIPs (no open flow, unused for longer than dns.quarantine) taken back for another name, by what needed the room (pool, max_names, client_quota, pattern_quota)."},
			[]string{"reason"}),
		PoolNearFull: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mcpintercept_dns_pool_near_full_total",
			Help: "Times a VIP pool crossed 90% bound (family v4, v6)."},
			[]string{"family"}),
		Collisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mcpintercept_dns_vip_collisions_total",
			Help: "Names given a VIP other than their first hash slot, because another name held or quarantined it (dns.vip_assignment: hash; family v4, v6); replicas agree on such a name only when they bound the contested names in the same order."},
			[]string{"family"}),
	}
	for _, fam := range []string{"v4", "v6"} {
		v6 := fam == "v6"
		m.PoolUse = append(m.PoolUse, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "mcpintercept_dns_pool_used_ratio", ConstLabels: prometheus.Labels{"family": fam},
			Help: "Share of the VIP pool's usable addresses (at most dns.max_names) bound to a name, live or quarantined; 0 without a pool."},
			func() float64 { return m.poolShare(v6) }))
	}
	return m
}

// Watch makes the pool gauges read t and the table report recycling and near-full crossings
// to m.
func (m *Metrics) Watch(t *VIPTable) {
	m.table.Store(t)
	t.SetObserver(m)
}

func (m *Metrics) poolShare(v6 bool) float64 {
	t := m.table.Load()
	if t == nil {
		return 0
	}
	n, c := t.PoolUse(v6)
	if c == 0 {
		return 0
	}
	return float64(n) / float64(c)
}

func (m *Metrics) recycled(reason string) { m.Recycled.WithLabelValues(reason).Inc() }

func (m *Metrics) nearFull(v6 bool) { m.PoolNearFull.WithLabelValues(family(v6)).Inc() }

func (m *Metrics) collided(v6 bool) { m.Collisions.WithLabelValues(family(v6)).Inc() }

func family(v6 bool) string {
	if v6 {
		return "v6"
	}
	return "v4"
}

// Register adds the counters to reg.
func (m *Metrics) Register(reg prometheus.Registerer) error {
	cs := []prometheus.Collector{m.Queries, m.VIPs, m.VIPsBound, m.CacheHits, m.CacheMisses, m.UpstreamDeny,
		m.QuotaRefused, m.Recycled, m.PoolNearFull, m.Collisions}
	for _, g := range m.PoolUse {
		cs = append(cs, g)
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

func (m *Metrics) query(qtype uint16, outcome string) {
	if m == nil {
		return
	}
	t := "other"
	switch qtype {
	case mdns.TypeA, mdns.TypeAAAA, mdns.TypeHTTPS, mdns.TypeSVCB:
		t = mdns.TypeToString[qtype]
	}
	m.Queries.WithLabelValues(t, outcome).Inc()
}
