package dns

import (
	"mcpintercept/intercept/dns/dnstest"

	"context"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	mdns "github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestForwarderKeepsQuery: the upstream sees the client's question exactly (0x20 case, EDNS0
// options, DO bit), under a fresh id; the client gets its own id back.
func TestForwarderKeepsQuery(t *testing.T) {
	up := dnstest.StartUpstream(t)
	c := &Cache{Upstream: &Forwarder{Servers: []netip.AddrPort{up.Addr}, Timeout: time.Second}}
	q := new(mdns.Msg)
	q.SetQuestion("PlAiN.TeSt.", mdns.TypeA)
	q.Id = 4242
	q.SetEdns0(1232, true)
	q.IsEdns0().Option = append(q.IsEdns0().Option, &mdns.EDNS0_COOKIE{Code: mdns.EDNS0COOKIE, Cookie: "0102030405060708"})
	r, err := c.Exchange(context.Background(), q)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := up.Last()
	if got.Question[0].Name != "PlAiN.TeSt." {
		t.Errorf("upstream saw %q, want the client's case", got.Question[0].Name)
	}
	if o := got.IsEdns0(); o == nil || o.UDPSize() != 1232 || !o.Do() || len(o.Option) != 1 {
		t.Errorf("upstream EDNS0 = %v, want the client's (1232, DO, cookie)", o)
	}
	if r.Id != 4242 || r.Question[0].Name != "PlAiN.TeSt." || r.IsEdns0() == nil {
		t.Errorf("answer id %d question %q edns %v", r.Id, r.Question[0].Name, r.IsEdns0())
	}
	if len(r.Answer) != 1 || r.Answer[0].(*mdns.A).A.String() != "10.1.2.3" {
		t.Errorf("answer %v", r.Answer)
	}
	// A second client spelling the name otherwise hits the cache and gets its own spelling.
	q2 := new(mdns.Msg)
	q2.SetQuestion("plain.TEST.", mdns.TypeA)
	q2.SetEdns0(1232, true)
	r2, err := c.Exchange(context.Background(), q2)
	if err != nil || r2.Id != q2.Id || r2.Question[0].Name != "plain.TEST." || up.N.Load() != 1 {
		t.Errorf("cached answer id %d/%d question %v upstream queries %d err %v", r2.Id, q2.Id, r2.Question, up.N.Load(), err)
	}
}

// TestForwarderTruncationTCP: a truncated UDP answer is fetched again over TCP, whole.
func TestForwarderTruncationTCP(t *testing.T) {
	up := dnstest.StartUpstream(t)
	f := &Forwarder{Servers: []netip.AddrPort{up.Addr}, Timeout: time.Second}
	q := new(mdns.Msg)
	q.SetQuestion("big.test.", mdns.TypeTXT)
	r, err := f.Exchange(context.Background(), q)
	if err != nil {
		t.Fatal(err)
	}
	if r.Truncated || len(r.Answer) != 40 {
		t.Fatalf("answer truncated %v with %d records, want 40 over TCP", r.Truncated, len(r.Answer))
	}
	if _, network := up.Last(); network != "tcp" || up.N.Load() != 2 {
		t.Fatalf("last query over %s after %d queries, want udp then tcp", network, up.N.Load())
	}
}

// TestCacheTTL: answers are served from the cache until their TTL runs out, with the TTL aged;
// then the upstream is asked again. Negative answers live as long as their SOA says.
func TestCacheTTL(t *testing.T) {
	up := dnstest.StartUpstream(t)
	clk := newClock()
	c := &Cache{Upstream: &Forwarder{Servers: []netip.AddrPort{up.Addr}, Timeout: time.Second}, Now: clk.now}
	ask := func(name string) *mdns.Msg {
		q := new(mdns.Msg)
		q.SetQuestion(name, mdns.TypeA)
		r, err := c.Exchange(context.Background(), q)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	ask("ttl.test.")
	clk.add(20 * time.Second)
	if r := ask("ttl.test."); r.Answer[0].Header().Ttl != 40 || up.N.Load() != 1 {
		t.Fatalf("hit after 20s: ttl %d, upstream queries %d", r.Answer[0].Header().Ttl, up.N.Load())
	}
	clk.add(41 * time.Second)
	if r := ask("ttl.test."); r.Answer[0].Header().Ttl != 60 || up.N.Load() != 2 {
		t.Fatalf("after expiry: ttl %d, upstream queries %d", r.Answer[0].Header().Ttl, up.N.Load())
	}
	if r := ask("nx.test."); r.Rcode != mdns.RcodeNameError {
		t.Fatalf("nx rcode %d", r.Rcode)
	}
	clk.add(29 * time.Second)
	ask("nx.test.")
	if up.N.Load() != 3 {
		t.Fatalf("NXDOMAIN not cached for the SOA minimum: %d queries", up.N.Load())
	}
	clk.add(2 * time.Second)
	ask("nx.test.")
	if up.N.Load() != 4 {
		t.Fatalf("NXDOMAIN cached past the SOA minimum: %d queries", up.N.Load())
	}
}

// testServer is a Server intercepting mcp.test and *.mcp.test over a real upstream.
func testServer(t testing.TB, v6 bool) (*Server, *dnstest.Upstream, *Metrics) {
	t.Helper()
	up := dnstest.StartUpstream(t)
	opt := VIPOptions{V4: pfx("198.18.0.0/24"), Hold: time.Hour, Quarantine: time.Hour}
	if v6 {
		opt.V6 = pfx("fd00:5649::/64")
	}
	tb, err := OpenVIPTable(opt)
	if err != nil {
		t.Fatal(err)
	}
	m := NewMetrics(tb.Len)
	s := NewServer(ServerOptions{
		Names: []string{"mcp.test", "*.mcp.test", "rebind.test"}, Table: tb,
		Upstream: &Cache{Upstream: &Forwarder{Servers: []netip.AddrPort{up.Addr}, Timeout: time.Second}},
		Clients:  []netip.Prefix{pfx("127.0.0.0/8"), pfx("10.0.0.0/8")}, TTL: 30 * time.Second,
		ClientRate: 1000, ClientBurst: 1000, Metrics: m,
	})
	return s, up, m
}

var client = netip.MustParseAddrPort("10.0.0.7:5353")

func query(name string, t uint16) *mdns.Msg {
	q := new(mdns.Msg)
	q.SetQuestion(name, t)
	return q
}

func TestDNSAnswers(t *testing.T) {
	s, up, m := testServer(t, false)
	ctx := context.Background()
	tests := []struct {
		name   string
		q      *mdns.Msg
		from   netip.AddrPort
		rcode  int
		answer string // the answer's type, "" for none
		soa    bool   // NODATA carries a SOA
	}{
		{name: "A intercepted", q: query("mcp.test.", mdns.TypeA), rcode: mdns.RcodeSuccess, answer: "A"},
		{name: "A wildcard", q: query("x.y.mcp.test.", mdns.TypeA), rcode: mdns.RcodeSuccess, answer: "A"},
		{name: "AAAA without v6 pool is NODATA, never NXDOMAIN", q: query("mcp.test.", mdns.TypeAAAA), rcode: mdns.RcodeSuccess, soa: true},
		{name: "HTTPS is NODATA", q: query("mcp.test.", mdns.TypeHTTPS), rcode: mdns.RcodeSuccess, soa: true},
		{name: "SVCB is NODATA", q: query("_8443._https.mcp.test.", mdns.TypeSVCB), rcode: mdns.RcodeSuccess, soa: true},
		{name: "not intercepted: forwarded", q: query("plain.test.", mdns.TypeA), rcode: mdns.RcodeSuccess, answer: "A"},
		{name: "the suffix itself is not matched by the wildcard alone", q: query("notmcp.test.", mdns.TypeA), rcode: mdns.RcodeSuccess, answer: "A"},
		{name: "NXDOMAIN forwarded", q: query("nx.test.", mdns.TypeA), rcode: mdns.RcodeNameError},
		{name: "client outside prefixes refused", q: query("mcp.test.", mdns.TypeA), from: netip.MustParseAddrPort("192.0.2.1:53"), rcode: mdns.RcodeRefused},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			from := tt.from
			if !from.IsValid() {
				from = client
			}
			tt.q.Id = 777
			r := s.Answer(ctx, from, tt.q)
			if r == nil {
				t.Fatal("dropped")
			}
			if r.Id != 777 || r.Question[0] != tt.q.Question[0] || r.Rcode != tt.rcode {
				t.Fatalf("id %d question %v rcode %s", r.Id, r.Question, mdns.RcodeToString[r.Rcode])
			}
			switch {
			case tt.answer == "" && len(r.Answer) != 0:
				t.Fatalf("answer %v, want none", r.Answer)
			case tt.answer != "" && (len(r.Answer) == 0 || mdns.TypeToString[r.Answer[0].Header().Rrtype] != tt.answer):
				t.Fatalf("answer %v, want %s", r.Answer, tt.answer)
			}
			if tt.soa && (len(r.Ns) != 1 || r.Ns[0].Header().Rrtype != mdns.TypeSOA) {
				t.Fatalf("NODATA without SOA: %v", r.Ns)
			}
		})
	}
	// The intercepted A is a VIP, stable, with the configured TTL, and never reached upstream.
	a1 := s.Answer(ctx, client, query("mcp.test.", mdns.TypeA)).Answer[0].(*mdns.A)
	a2 := s.Answer(ctx, client, query("MCP.test.", mdns.TypeA)).Answer[0].(*mdns.A)
	if !a1.A.Equal(a2.A) || !pfx("198.18.0.0/24").Contains(netip.MustParseAddr(a1.A.String())) || a1.Hdr.Ttl != 30 {
		t.Fatalf("VIP answers %v %v", a1, a2)
	}
	if a2.Hdr.Name != "MCP.test." {
		t.Fatalf("answer owner %q, want the client's spelling", a2.Hdr.Name)
	}
	for _, q := range up.Queries() {
		if n := CanonicalName(q.Question[0].Name); n == "mcp.test" || strings.HasSuffix(n, ".mcp.test") {
			t.Errorf("intercepted name %s reached the upstream", n)
		}
	}
	if v := testutil.ToFloat64(m.Queries.WithLabelValues("HTTPS", "nodata")); v != 1 {
		t.Errorf("HTTPS nodata counted %v", v)
	}
	if v := testutil.ToFloat64(m.Queries.WithLabelValues("A", "refused")); v != 1 {
		t.Errorf("refused counted %v", v)
	}

	// With a v6 pool, AAAA gets a v6 VIP; EDNS0 in the query gets an OPT in the answer.
	s6, _, _ := testServer(t, true)
	q := query("mcp.test.", mdns.TypeAAAA)
	q.SetEdns0(1232, true)
	r := s6.Answer(ctx, client, q)
	if len(r.Answer) != 1 || r.Answer[0].Header().Rrtype != mdns.TypeAAAA || r.IsEdns0() == nil || !r.IsEdns0().Do() {
		t.Fatalf("AAAA with a v6 pool: %v", r)
	}
}

// TestDNSServerWire runs the server on real sockets: UDP and TCP answer, malformed queries are
// dropped unanswered and counted, a flood is bounded, a big forwarded answer is truncated for a
// UDP client (which then retries over TCP and gets it whole).
func TestDNSServerWire(t *testing.T) {
	s, _, m := testServer(t, false)
	s.limiter = newClientLimiter(5, 20, time.Now)
	if err := s.Listen([]netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:0")}); err != nil {
		t.Fatal(err)
	}
	s.Serve()
	defer s.Close()
	addr := s.Addrs()[0].String()
	for _, network := range []string{"udp", "tcp"} {
		c := &mdns.Client{Net: network, Timeout: time.Second}
		r, _, err := c.Exchange(query("mcp.test.", mdns.TypeA), addr)
		if err != nil || len(r.Answer) != 1 {
			t.Fatalf("%s: %v %v", network, r, err)
		}
	}
	c := &mdns.Client{Net: "udp", Timeout: time.Second}
	r, _, err := c.Exchange(query("big.test.", mdns.TypeTXT), addr)
	if err != nil || !r.Truncated {
		t.Fatalf("big answer over UDP: truncated %v, err %v", r != nil && r.Truncated, err)
	}
	r, _, err = (&mdns.Client{Net: "tcp", Timeout: time.Second}).Exchange(query("big.test.", mdns.TypeTXT), addr)
	if err != nil || len(r.Answer) != 40 {
		t.Fatalf("big answer over TCP: %v", err)
	}

	// Malformed: a response, two questions, garbage. None is answered.
	conn, err := net.Dial("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	resp := query("mcp.test.", mdns.TypeA)
	resp.Response = true
	two := query("mcp.test.", mdns.TypeA)
	two.Question = append(two.Question, two.Question[0])
	for _, m := range []*mdns.Msg{resp, two} {
		b, _ := m.Pack()
		conn.Write(b)
	}
	conn.Write([]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13})
	conn.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if n, err := conn.Read(make([]byte, 512)); err == nil {
		t.Fatalf("a malformed query was answered (%d bytes)", n)
	}
	if v := testutil.ToFloat64(m.Queries.WithLabelValues("other", "malformed")); v != 3 {
		t.Fatalf("malformed counted %v, want 3", v)
	}

	// Flood: the bucket holds 20; the rest of a burst of 100 is dropped.
	b, _ := query("plain.test.", mdns.TypeA).Pack()
	for i := 0; i < 100; i++ {
		conn.Write(b)
	}
	answered := 0
	buf := make([]byte, 512)
	for {
		conn.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		if _, err := conn.Read(buf); err != nil {
			break
		}
		answered++
	}
	if answered > 25 || answered < 10 {
		t.Fatalf("%d of 100 flood queries answered, want about the burst (20)", answered)
	}
	if v := testutil.ToFloat64(m.Queries.WithLabelValues("A", "flood")); v < 70 {
		t.Fatalf("flood drops counted %v", v)
	}
}
