package intercept

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// testUpstream is a real resolver on loopback (UDP and TCP): it serves a small zone, records
// what it received, and truncates big.test over UDP so that the client must retry over TCP.
type testUpstream struct {
	addr netip.AddrPort
	mu   sync.Mutex
	got  []*dns.Msg // queries as received
	net  []string
	n    atomic.Int64
	ttl  uint32
}

func startUpstream(t testing.TB) *testUpstream {
	t.Helper()
	u := &testUpstream{ttl: 60}
	pc, l, err := listenUDPTCP(netip.MustParseAddrPort("127.0.0.1:0"))
	if err != nil {
		t.Fatal(err)
	}
	u.addr = netip.MustParseAddrPort(pc.LocalAddr().String())
	for _, s := range []*dns.Server{{PacketConn: pc, Handler: u}, {Listener: l, Handler: u}} {
		started := make(chan struct{})
		s.NotifyStartedFunc = func() { close(started) }
		go s.ActivateAndServe()
		<-started
		t.Cleanup(func() { s.Shutdown() })
	}
	return u
}

func (u *testUpstream) ServeDNS(w dns.ResponseWriter, q *dns.Msg) {
	u.n.Add(1)
	network := "udp"
	if _, ok := w.RemoteAddr().(*net.TCPAddr); ok {
		network = "tcp"
	}
	u.mu.Lock()
	u.got = append(u.got, q.Copy())
	u.net = append(u.net, network)
	u.mu.Unlock()
	m := new(dns.Msg)
	m.SetReply(q)
	qq := q.Question[0]
	name := canonicalName(qq.Name)
	hdr := func(t uint16) dns.RR_Header {
		return dns.RR_Header{Name: qq.Name, Rrtype: t, Class: dns.ClassINET, Ttl: u.ttl}
	}
	switch {
	case name == "nx.test":
		m.Rcode = dns.RcodeNameError
		m.Ns = []dns.RR{&dns.SOA{Hdr: dns.RR_Header{Name: "test.", Rrtype: dns.TypeSOA, Class: dns.ClassINET, Ttl: 300}, Ns: "ns.test.", Mbox: "h.test.", Minttl: 30}}
	case name == "big.test" && qq.Qtype == dns.TypeTXT:
		for i := 0; i < 40; i++ {
			m.Answer = append(m.Answer, &dns.TXT{Hdr: hdr(dns.TypeTXT), Txt: []string{strings.Repeat(fmt.Sprint(i%10), 200)}})
		}
		if network == "udp" {
			m.Truncate(dns.MinMsgSize)
		}
	case qq.Qtype == dns.TypeA:
		ip := "10.1.2.3"
		switch name {
		case "rebind.test":
			ip = "127.0.0.1"
		case "meta.test":
			ip = "169.254.169.254"
		}
		m.Answer = []dns.RR{&dns.A{Hdr: hdr(dns.TypeA), A: net.ParseIP(ip).To4()}}
	case qq.Qtype == dns.TypeAAAA && name != "meta.test" && name != "rebind.test":
		m.Answer = []dns.RR{&dns.AAAA{Hdr: hdr(dns.TypeAAAA), AAAA: net.ParseIP("fd00:1::3")}}
	}
	if o := q.IsEdns0(); o != nil {
		m.SetEdns0(4096, o.Do())
	}
	w.WriteMsg(m)
}

func (u *testUpstream) last() (*dns.Msg, string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.got[len(u.got)-1], u.net[len(u.net)-1]
}

// TestForwarderKeepsQuery: the upstream sees the client's question exactly (0x20 case, EDNS0
// options, DO bit), under a fresh id; the client gets its own id back.
func TestForwarderKeepsQuery(t *testing.T) {
	up := startUpstream(t)
	c := &Cache{Upstream: &Forwarder{Servers: []netip.AddrPort{up.addr}, Timeout: time.Second}}
	q := new(dns.Msg)
	q.SetQuestion("PlAiN.TeSt.", dns.TypeA)
	q.Id = 4242
	q.SetEdns0(1232, true)
	q.IsEdns0().Option = append(q.IsEdns0().Option, &dns.EDNS0_COOKIE{Code: dns.EDNS0COOKIE, Cookie: "0102030405060708"})
	r, err := c.Exchange(context.Background(), q)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := up.last()
	if got.Question[0].Name != "PlAiN.TeSt." {
		t.Errorf("upstream saw %q, want the client's case", got.Question[0].Name)
	}
	if o := got.IsEdns0(); o == nil || o.UDPSize() != 1232 || !o.Do() || len(o.Option) != 1 {
		t.Errorf("upstream EDNS0 = %v, want the client's (1232, DO, cookie)", o)
	}
	if r.Id != 4242 || r.Question[0].Name != "PlAiN.TeSt." || r.IsEdns0() == nil {
		t.Errorf("answer id %d question %q edns %v", r.Id, r.Question[0].Name, r.IsEdns0())
	}
	if len(r.Answer) != 1 || r.Answer[0].(*dns.A).A.String() != "10.1.2.3" {
		t.Errorf("answer %v", r.Answer)
	}
	// A second client spelling the name otherwise hits the cache and gets its own spelling.
	q2 := new(dns.Msg)
	q2.SetQuestion("plain.TEST.", dns.TypeA)
	q2.SetEdns0(1232, true)
	r2, err := c.Exchange(context.Background(), q2)
	if err != nil || r2.Id != q2.Id || r2.Question[0].Name != "plain.TEST." || up.n.Load() != 1 {
		t.Errorf("cached answer id %d/%d question %v upstream queries %d err %v", r2.Id, q2.Id, r2.Question, up.n.Load(), err)
	}
}

// TestForwarderTruncationTCP: a truncated UDP answer is fetched again over TCP, whole.
func TestForwarderTruncationTCP(t *testing.T) {
	up := startUpstream(t)
	f := &Forwarder{Servers: []netip.AddrPort{up.addr}, Timeout: time.Second}
	q := new(dns.Msg)
	q.SetQuestion("big.test.", dns.TypeTXT)
	r, err := f.Exchange(context.Background(), q)
	if err != nil {
		t.Fatal(err)
	}
	if r.Truncated || len(r.Answer) != 40 {
		t.Fatalf("answer truncated %v with %d records, want 40 over TCP", r.Truncated, len(r.Answer))
	}
	if _, network := up.last(); network != "tcp" || up.n.Load() != 2 {
		t.Fatalf("last query over %s after %d queries, want udp then tcp", network, up.n.Load())
	}
}

// TestCacheTTL: answers are served from the cache until their TTL runs out, with the TTL aged;
// then the upstream is asked again. Negative answers live as long as their SOA says.
func TestCacheTTL(t *testing.T) {
	up := startUpstream(t)
	clk := newClock()
	c := &Cache{Upstream: &Forwarder{Servers: []netip.AddrPort{up.addr}, Timeout: time.Second}, Now: clk.now}
	ask := func(name string) *dns.Msg {
		q := new(dns.Msg)
		q.SetQuestion(name, dns.TypeA)
		r, err := c.Exchange(context.Background(), q)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	ask("ttl.test.")
	clk.add(20 * time.Second)
	if r := ask("ttl.test."); r.Answer[0].Header().Ttl != 40 || up.n.Load() != 1 {
		t.Fatalf("hit after 20s: ttl %d, upstream queries %d", r.Answer[0].Header().Ttl, up.n.Load())
	}
	clk.add(41 * time.Second)
	if r := ask("ttl.test."); r.Answer[0].Header().Ttl != 60 || up.n.Load() != 2 {
		t.Fatalf("after expiry: ttl %d, upstream queries %d", r.Answer[0].Header().Ttl, up.n.Load())
	}
	if r := ask("nx.test."); r.Rcode != dns.RcodeNameError {
		t.Fatalf("nx rcode %d", r.Rcode)
	}
	clk.add(29 * time.Second)
	ask("nx.test.")
	if up.n.Load() != 3 {
		t.Fatalf("NXDOMAIN not cached for the SOA minimum: %d queries", up.n.Load())
	}
	clk.add(2 * time.Second)
	ask("nx.test.")
	if up.n.Load() != 4 {
		t.Fatalf("NXDOMAIN cached past the SOA minimum: %d queries", up.n.Load())
	}
}

// testServer is a DNSServer intercepting mcp.test and *.mcp.test over a real upstream.
func testServer(t testing.TB, v6 bool) (*DNSServer, *testUpstream, *DNSMetrics) {
	t.Helper()
	up := startUpstream(t)
	opt := VIPOptions{V4: pfx("198.18.0.0/24"), Hold: time.Hour, Quarantine: time.Hour}
	if v6 {
		opt.V6 = pfx("fd00:5649::/64")
	}
	tb, err := OpenVIPTable(opt)
	if err != nil {
		t.Fatal(err)
	}
	m := NewDNSMetrics(tb.Len)
	s := NewDNSServer(DNSServerOptions{
		Names: []string{"mcp.test", "*.mcp.test", "rebind.test"}, Table: tb,
		Upstream: &Cache{Upstream: &Forwarder{Servers: []netip.AddrPort{up.addr}, Timeout: time.Second}},
		Clients:  []netip.Prefix{pfx("127.0.0.0/8"), pfx("10.0.0.0/8")}, TTL: 30 * time.Second,
		ClientRate: 1000, ClientBurst: 1000, Metrics: m,
	})
	return s, up, m
}

var client = netip.MustParseAddrPort("10.0.0.7:5353")

func query(name string, t uint16) *dns.Msg {
	q := new(dns.Msg)
	q.SetQuestion(name, t)
	return q
}

func TestDNSAnswers(t *testing.T) {
	s, up, m := testServer(t, false)
	ctx := context.Background()
	tests := []struct {
		name   string
		q      *dns.Msg
		from   netip.AddrPort
		rcode  int
		answer string // the answer's type, "" for none
		soa    bool   // NODATA carries a SOA
	}{
		{name: "A intercepted", q: query("mcp.test.", dns.TypeA), rcode: dns.RcodeSuccess, answer: "A"},
		{name: "A wildcard", q: query("x.y.mcp.test.", dns.TypeA), rcode: dns.RcodeSuccess, answer: "A"},
		{name: "AAAA without v6 pool is NODATA, never NXDOMAIN", q: query("mcp.test.", dns.TypeAAAA), rcode: dns.RcodeSuccess, soa: true},
		{name: "HTTPS is NODATA", q: query("mcp.test.", dns.TypeHTTPS), rcode: dns.RcodeSuccess, soa: true},
		{name: "SVCB is NODATA", q: query("_8443._https.mcp.test.", dns.TypeSVCB), rcode: dns.RcodeSuccess, soa: true},
		{name: "not intercepted: forwarded", q: query("plain.test.", dns.TypeA), rcode: dns.RcodeSuccess, answer: "A"},
		{name: "the suffix itself is not matched by the wildcard alone", q: query("notmcp.test.", dns.TypeA), rcode: dns.RcodeSuccess, answer: "A"},
		{name: "NXDOMAIN forwarded", q: query("nx.test.", dns.TypeA), rcode: dns.RcodeNameError},
		{name: "client outside prefixes refused", q: query("mcp.test.", dns.TypeA), from: netip.MustParseAddrPort("192.0.2.1:53"), rcode: dns.RcodeRefused},
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
				t.Fatalf("id %d question %v rcode %s", r.Id, r.Question, dns.RcodeToString[r.Rcode])
			}
			switch {
			case tt.answer == "" && len(r.Answer) != 0:
				t.Fatalf("answer %v, want none", r.Answer)
			case tt.answer != "" && (len(r.Answer) == 0 || dns.TypeToString[r.Answer[0].Header().Rrtype] != tt.answer):
				t.Fatalf("answer %v, want %s", r.Answer, tt.answer)
			}
			if tt.soa && (len(r.Ns) != 1 || r.Ns[0].Header().Rrtype != dns.TypeSOA) {
				t.Fatalf("NODATA without SOA: %v", r.Ns)
			}
		})
	}
	// The intercepted A is a VIP, stable, with the configured TTL, and never reached upstream.
	a1 := s.Answer(ctx, client, query("mcp.test.", dns.TypeA)).Answer[0].(*dns.A)
	a2 := s.Answer(ctx, client, query("MCP.test.", dns.TypeA)).Answer[0].(*dns.A)
	if !a1.A.Equal(a2.A) || !pfx("198.18.0.0/24").Contains(netip.MustParseAddr(a1.A.String())) || a1.Hdr.Ttl != 30 {
		t.Fatalf("VIP answers %v %v", a1, a2)
	}
	if a2.Hdr.Name != "MCP.test." {
		t.Fatalf("answer owner %q, want the client's spelling", a2.Hdr.Name)
	}
	up.mu.Lock()
	for _, q := range up.got {
		if n := canonicalName(q.Question[0].Name); n == "mcp.test" || strings.HasSuffix(n, ".mcp.test") {
			t.Errorf("intercepted name %s reached the upstream", n)
		}
	}
	up.mu.Unlock()
	if v := testutil.ToFloat64(m.Queries.WithLabelValues("HTTPS", "nodata")); v != 1 {
		t.Errorf("HTTPS nodata counted %v", v)
	}
	if v := testutil.ToFloat64(m.Queries.WithLabelValues("A", "refused")); v != 1 {
		t.Errorf("refused counted %v", v)
	}

	// With a v6 pool, AAAA gets a v6 VIP; EDNS0 in the query gets an OPT in the answer.
	s6, _, _ := testServer(t, true)
	q := query("mcp.test.", dns.TypeAAAA)
	q.SetEdns0(1232, true)
	r := s6.Answer(ctx, client, q)
	if len(r.Answer) != 1 || r.Answer[0].Header().Rrtype != dns.TypeAAAA || r.IsEdns0() == nil || !r.IsEdns0().Do() {
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
		c := &dns.Client{Net: network, Timeout: time.Second}
		r, _, err := c.Exchange(query("mcp.test.", dns.TypeA), addr)
		if err != nil || len(r.Answer) != 1 {
			t.Fatalf("%s: %v %v", network, r, err)
		}
	}
	c := &dns.Client{Net: "udp", Timeout: time.Second}
	r, _, err := c.Exchange(query("big.test.", dns.TypeTXT), addr)
	if err != nil || !r.Truncated {
		t.Fatalf("big answer over UDP: truncated %v, err %v", r != nil && r.Truncated, err)
	}
	r, _, err = (&dns.Client{Net: "tcp", Timeout: time.Second}).Exchange(query("big.test.", dns.TypeTXT), addr)
	if err != nil || len(r.Answer) != 40 {
		t.Fatalf("big answer over TCP: %v", err)
	}

	// Malformed: a response, two questions, garbage. None is answered.
	conn, err := net.Dial("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	resp := query("mcp.test.", dns.TypeA)
	resp.Response = true
	two := query("mcp.test.", dns.TypeA)
	two.Question = append(two.Question, two.Question[0])
	for _, m := range []*dns.Msg{resp, two} {
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
	b, _ := query("plain.test.", dns.TypeA).Pack()
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

// fakeResolver maps VIPs for the dialer tests.
type fakeResolver map[netip.Addr]struct {
	name  string
	addrs []netip.Addr
}

func (f fakeResolver) ResolveVIP(ctx context.Context, a netip.Addr) (string, []netip.Addr, bool, error) {
	e, ok := f[a]
	if !ok {
		if pfx("198.18.0.0/24").Contains(a) {
			return "", nil, true, &UnboundVIPError{VIP: a}
		}
		return "", nil, false, nil
	}
	return e.name, e.addrs, true, nil
}

type recordDialer struct{ got []string }

func (r *recordDialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	r.got = append(r.got, address)
	return nil, errors.New("recorded")
}

func TestDenyList(t *testing.T) {
	d := NewDenyList("upstream_deny", mustPrefixes("169.254.169.254/32", "fd00:ec2::254/128", "0.0.0.0/8", "127.0.0.0/8", "169.254.0.0/16", "::/128", "::1/128", "fe80::/10")...)
	d.Add("VIP pool", pfx("198.18.0.0/24"))
	for _, tt := range []struct {
		addr, prefix string
	}{
		{"127.0.0.1", "127.0.0.0/8"}, {"::ffff:127.0.0.1", "127.0.0.0/8"}, {"169.254.169.254", "169.254.169.254/32"},
		{"169.254.1.1", "169.254.0.0/16"}, {"fd00:ec2::254", "fd00:ec2::254/128"}, {"::1", "::1/128"},
		{"fe80::1%eth0", "fe80::/10"}, {"0.0.0.0", "0.0.0.0/8"}, {"::", "::/128"}, {"198.18.0.9", "198.18.0.0/24"},
		{"10.200.2.2", ""}, {"fd00:200:2::2", ""}, {"8.8.8.8", ""},
	} {
		err := d.Check(netip.MustParseAddr(tt.addr))
		var de *DeniedError
		switch {
		case tt.prefix == "" && err != nil:
			t.Errorf("%s denied: %v", tt.addr, err)
		case tt.prefix != "" && (!errors.As(err, &de) || de.Prefix.String() != tt.prefix):
			t.Errorf("%s: %v, want denied by %s", tt.addr, err, tt.prefix)
		}
	}
	var nilList *DenyList
	if nilList.Check(netip.MustParseAddr("127.0.0.1")) != nil {
		t.Error("a nil list denies")
	}
}

func mustPrefixes(ss ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range ss {
		out = append(out, pfx(s))
	}
	return out
}

// TestUpstreamDialer: a VIP is dialled as its name's addresses on the client's port; a name
// resolving into the deny list is refused whole (rebinding), with the message the engine logs;
// plain destinations are checked too; an unbound VIP is refused.
func TestUpstreamDialer(t *testing.T) {
	deny := NewDenyList("upstream_deny", mustPrefixes("127.0.0.0/8", "169.254.169.254/32")...)
	deny.Add("VIP pool", pfx("198.18.0.0/24"))
	res := fakeResolver{
		netip.MustParseAddr("198.18.0.1"): {"mcp.test", []netip.Addr{netip.MustParseAddr("10.1.2.3"), netip.MustParseAddr("fd00:1::3")}},
		netip.MustParseAddr("198.18.0.2"): {"rebind.test", []netip.Addr{netip.MustParseAddr("127.0.0.1")}},
		netip.MustParseAddr("198.18.0.3"): {"mixed.test", []netip.Addr{netip.MustParseAddr("10.1.2.3"), netip.MustParseAddr("169.254.169.254")}},
	}
	base := &recordDialer{}
	m := NewDNSMetrics(nil)
	u := &UpstreamDialer{Base: base, Deny: deny, VIPs: res, Metrics: m}
	ctx := context.Background()
	u.DialContext(ctx, "tcp", "198.18.0.1:8443")
	if want := []string{"10.1.2.3:8443", "[fd00:1::3]:8443"}; fmt.Sprint(base.got) != fmt.Sprint(want) {
		t.Fatalf("dialled %v, want %v", base.got, want)
	}
	for _, tt := range []struct{ addr, want string }{
		{"198.18.0.2:8443", "upstream address 127.0.0.1 is in the deny list (127.0.0.0/8, upstream_deny): rebind.test resolved into it"},
		{"198.18.0.3:8443", "upstream address 169.254.169.254 is in the deny list (169.254.169.254/32, upstream_deny): mixed.test resolved into it"},
		{"198.18.0.77:8443", "VIP 198.18.0.77 is bound to no name"},
		{"127.0.0.1:80", "upstream address 127.0.0.1 is in the deny list (127.0.0.0/8, upstream_deny)"},
	} {
		base.got = nil
		_, err := u.DialContext(ctx, "tcp", tt.addr)
		if err == nil || !strings.Contains(err.Error(), tt.want) || len(base.got) != 0 {
			t.Errorf("%s: %v (dialled %v), want %q and no dial", tt.addr, err, base.got, tt.want)
		}
	}
	if v := testutil.ToFloat64(m.UpstreamDeny.WithLabelValues("dns")); v != 2 {
		t.Errorf("rebinding refusals counted %v", v)
	}
	if v := testutil.ToFloat64(m.UpstreamDeny.WithLabelValues("address")); v != 1 {
		t.Errorf("address refusals counted %v", v)
	}
	base.got = nil
	u.DialContext(ctx, "tcp", "10.200.2.2:8080")
	if len(base.got) != 1 {
		t.Errorf("a plain allowed destination was not dialled: %v", base.got)
	}
}
