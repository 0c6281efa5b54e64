//go:build linux

package intercept

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"mcpintercept/intercept/dns/dnstest"
	"mcpintercept/origin"
)

// TestDNSMetricsRegistered: the dns mechanism's metrics, opened the way the appliance opens them
// (Opener.Open, then NewUpstreamDialer, both on the appliance's registry), are all on that
// registry and count what the issue asks for: queries by type and outcome, VIPs allocated, cache
// hits (and misses), rebinding refusals (mcpintercept_upstream_denied_total{source="dns"}).
func TestDNSMetricsRegistered(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the upstream dialer sets SO_MARK (needs CAP_NET_ADMIN)")
	}
	up := dnstest.StartUpstream(t)
	o := Options{Mechanism: origin.DNS, Listen: []netip.Addr{netip.MustParseAddr("127.0.0.1")}, Port: 15001,
		Mark: 0x1, BypassMark: 0x2, RouteTable: 100, RulePriority: 100,
		DNS: DNSOptions{
			Listen:   []netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:0")},
			Names:    []string{"mcp.test", "*.mcp.test", "rebind.test"},
			V4:       pfx("198.18.0.0/24"),
			Upstream: []netip.AddrPort{up.Addr},
			Clients:  []netip.Prefix{pfx("10.0.0.0/8")},
			StateDir: t.TempDir(),
			TTL:      30 * time.Second, Hold: 24 * time.Hour, Quarantine: time.Hour,
			MaxNames: 65536, CacheSize: 10000, ClientRate: 200, ClientBurst: 400, Timeout: 2 * time.Second,
		}}
	mech, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	d := mech.(*dnsMechanism)
	reg := prometheus.NewRegistry()
	ctx := context.Background()
	if err := d.Open(ctx, reg, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	base := &recordDialer{}
	dialer, err := NewUpstreamDialer(mech, []netip.Prefix{pfx("127.0.0.0/8"), pfx("169.254.0.0/16")}, base, reg, nil)
	if err != nil {
		t.Fatalf("upstream dialer on the same registry: %v", err)
	}

	ask := func(from netip.AddrPort, name string, qt uint16) *dns.Msg {
		t.Helper()
		r := d.server.Answer(ctx, from, query(name, qt))
		if r == nil {
			t.Fatalf("%s %s dropped", name, dns.TypeToString[qt])
		}
		return r
	}
	ask(client, "mcp.test.", dns.TypeA)
	ask(client, "MCP.test.", dns.TypeA) // the same VIP: not allocated again
	ask(client, "x.mcp.test.", dns.TypeA)
	ask(client, "mcp.test.", dns.TypeAAAA) // no v6 pool: NODATA
	ask(client, "mcp.test.", dns.TypeHTTPS)
	ask(client, "plain.test.", dns.TypeA) // forwarded: a cache miss
	ask(client, "plain.test.", dns.TypeA) // a cache hit
	ask(client, "plain.test.", dns.TypeMX)
	ask(netip.MustParseAddrPort("192.0.2.1:53"), "mcp.test.", dns.TypeA) // refused
	rebindVIP := ask(client, "rebind.test.", dns.TypeA).Answer[0].(*dns.A).A.String()

	got := gather(t, reg)
	for series, want := range map[string]float64{
		`mcpintercept_dns_queries_total{outcome="vip",type="A"}`:           4,
		`mcpintercept_dns_queries_total{outcome="nodata",type="AAAA"}`:     1,
		`mcpintercept_dns_queries_total{outcome="nodata",type="HTTPS"}`:    1,
		`mcpintercept_dns_queries_total{outcome="forwarded",type="A"}`:     2,
		`mcpintercept_dns_queries_total{outcome="forwarded",type="other"}`: 1,
		`mcpintercept_dns_queries_total{outcome="refused",type="A"}`:       1,
		`mcpintercept_dns_vips`:                 3,
		`mcpintercept_dns_vips_allocated_total`: 3,
		`mcpintercept_dns_cache_hits_total`:     1,
		`mcpintercept_dns_cache_misses_total`:   2,
	} {
		if v, ok := got[series]; !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v\n%s", series, v, ok, want, dump(got))
		}
	}

	// Rebinding: rebind.test's VIP resolves upstream to 127.0.0.1 at dial time and is refused;
	// a denied plain destination counts as source address.
	for i := 0; i < 2; i++ {
		if _, err := dialer.DialContext(ctx, "tcp", rebindVIP+":8443"); err == nil || !strings.Contains(err.Error(), "rebind.test resolved into it") {
			t.Fatalf("dial rebind.test's VIP: %v", err)
		}
	}
	if _, err := dialer.DialContext(ctx, "tcp", "169.254.169.254:80"); err == nil {
		t.Fatal("dial of the metadata address was not refused")
	}
	if len(base.got) != 0 {
		t.Fatalf("refused dials reached the base dialer: %v", base.got)
	}
	got = gather(t, reg)
	for series, want := range map[string]float64{
		`mcpintercept_upstream_denied_total{source="dns"}`:     2,
		`mcpintercept_upstream_denied_total{source="address"}`: 1,
	} {
		if v := got[series]; v != want {
			t.Errorf("%s = %v, want %v\n%s", series, v, want, dump(got))
		}
	}
	// The second rebind.test dial resolved from the cache.
	if v := got[`mcpintercept_dns_cache_hits_total`]; v < 2 {
		t.Errorf("cache hits %v after a repeated dial-time resolution, want >= 2", v)
	}
}

// gather flattens reg into "name{label="value",...}" -> value (labels sorted by name).
func gather(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			key := mf.GetName()
			if lp := m.GetLabel(); len(lp) > 0 {
				var ls []string
				for _, l := range lp {
					ls = append(ls, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
				}
				sort.Strings(ls)
				key += "{" + strings.Join(ls, ",") + "}"
			}
			out[key] = value(m)
		}
	}
	return out
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Untyped != nil:
		return m.Untyped.GetValue()
	}
	return 0
}

func dump(m map[string]float64) string {
	var ls []string
	for k, v := range m {
		ls = append(ls, fmt.Sprintf("%s %v", k, v))
	}
	sort.Strings(ls)
	return strings.Join(ls, "\n")
}

var client = netip.MustParseAddrPort("10.0.0.7:5353")

func pfx(s string) netip.Prefix { return netip.MustParsePrefix(s) }

func query(name string, t uint16) *dns.Msg {
	m := new(dns.Msg)
	m.SetQuestion(name, t)
	return m
}

// recordDialer records the addresses it is asked to dial and dials none.
type recordDialer struct{ got []string }

func (r *recordDialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	r.got = append(r.got, address)
	return nil, errors.New("recorded")
}
