package dns

import (
	"context"
	"net/netip"
	"testing"
	"time"

	mdns "github.com/miekg/dns"
)

// echoUpstream answers every query with one A record, without a network.
type echoUpstream struct{}

func (echoUpstream) Exchange(ctx context.Context, q *mdns.Msg) (*mdns.Msg, error) {
	m := new(mdns.Msg)
	m.SetReply(q)
	if q.Question[0].Qtype == mdns.TypeA {
		m.Answer = []mdns.RR{&mdns.A{Hdr: mdns.RR_Header{Name: q.Question[0].Name, Rrtype: mdns.TypeA, Class: mdns.ClassINET, Ttl: 60}, A: []byte{10, 1, 2, 3}}}
	}
	return m, nil
}

func fuzzSeeds() [][]byte {
	var out [][]byte
	add := func(m *mdns.Msg) {
		b, err := m.Pack()
		if err == nil {
			out = append(out, b)
		}
	}
	for _, n := range []string{"mcp.test.", "A.B.Mcp.Test.", "plain.test.", "rebind.test.", "."} {
		for _, t := range []uint16{mdns.TypeA, mdns.TypeAAAA, mdns.TypeHTTPS, mdns.TypeSVCB, mdns.TypeANY, mdns.TypeTXT} {
			add(query(n, t))
		}
	}
	e := query("mcp.test.", mdns.TypeA)
	e.SetEdns0(1232, true)
	add(e)
	r := query("mcp.test.", mdns.TypeA)
	r.Response = true
	add(r)
	c := query("mcp.test.", mdns.TypeA)
	c.Question[0].Qclass = mdns.ClassCHAOS
	add(c)
	return append(out, []byte{}, []byte{0, 1, 2}, make([]byte, 12))
}

// FuzzDNSQuery drives raw messages through what the server does with a datagram: the parse that
// decides drop or answer, then the answer. A parsed query is always answered (never dropped
// after parsing), with its id and question exactly, an answer that packs and fits the client's
// UDP size once truncated, and an intercepted name is never NXDOMAIN.
func FuzzDNSQuery(f *testing.F) {
	for _, s := range fuzzSeeds() {
		f.Add(s)
	}
	tb, err := OpenVIPTable(VIPOptions{V4: pfx("198.18.0.0/20"), Hold: time.Hour, Quarantine: time.Hour, MaxNames: 2000})
	if err != nil {
		f.Fatal(err)
	}
	s := NewServer(ServerOptions{Names: []string{"mcp.test", "*.mcp.test"}, Table: tb,
		Upstream: &Cache{Upstream: echoUpstream{}, Size: 100}, Clients: []netip.Prefix{pfx("10.0.0.0/8")},
		TTL: 30 * time.Second, Metrics: NewMetrics(tb.Len)})
	ctx := context.Background()
	f.Fuzz(func(t *testing.T, raw []byte) {
		q, ok := ParseQuery(raw)
		if !ok {
			return
		}
		r := s.Answer(ctx, client, q)
		if r == nil {
			t.Fatal("a parsed query was dropped")
		}
		if r.Id != q.Id || len(r.Question) != 1 || r.Question[0] != q.Question[0] || !r.Response {
			t.Fatalf("answer id %d question %v, query id %d question %v", r.Id, r.Question, q.Id, q.Question)
		}
		if s.names.Match(CanonicalName(q.Question[0].Name)) && q.Question[0].Qclass == mdns.ClassINET && r.Rcode == mdns.RcodeNameError {
			t.Fatal("NXDOMAIN for an intercepted name")
		}
		if _, err := r.Pack(); err != nil {
			t.Fatalf("answer does not pack: %v", err)
		}
		size := udpSize(q)
		r.Truncate(size)
		b, err := r.Pack()
		if err != nil || len(b) > size {
			t.Fatalf("truncated answer %d bytes for a %d-byte client: %v", len(b), size, err)
		}
	})
}
