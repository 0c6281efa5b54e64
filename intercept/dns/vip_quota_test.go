package dns

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	mdns "github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestVIPClientQuota: one client asking for every name under a wildcard (issue 16 case 12:
// 254 names fill a /24) is stopped at its quota; another client still gets VIPs for new names,
// and the flooder keeps the names it already has.
func TestVIPClientQuota(t *testing.T) {
	tb, err := OpenVIPTable(VIPOptions{V4: pfx("198.18.0.0/24"), Hold: 24 * time.Hour, Quarantine: time.Hour, Patterns: 1})
	if err != nil {
		t.Fatal(err)
	}
	cq, _ := tb.Quotas()
	flood := Claim{Client: "10.0.0.66", Pattern: "*.mcp.test"}
	var first netip.Addr
	refused := 0
	for i := range 254 {
		a, _, err := tb.LookupFor(fmt.Sprintf("n%d.mcp.test", i), false, flood)
		switch {
		case err == nil && i == 0:
			first = a
		case errors.Is(err, ErrQuota):
			refused++
		case err != nil:
			t.Fatalf("name %d: %v, want a VIP or a quota refusal", i, err)
		}
	}
	if refused != 254-cq {
		t.Fatalf("%d of 254 refused, want %d (quota %d)", refused, 254-cq, cq)
	}
	var qe *QuotaError
	_, _, err = tb.LookupFor("more.mcp.test", false, flood)
	if !errors.As(err, &qe) || qe.Scope != "client" || qe.Client != "10.0.0.66" {
		t.Fatalf("over quota: %v, want a client *QuotaError", err)
	}
	if a, _, err := tb.LookupFor("n0.mcp.test", false, flood); err != nil || a != first {
		t.Fatalf("the flooder's own bound name: %s %v, want %s", a, err, first)
	}
	for i := range 10 {
		if _, _, err := tb.LookupFor(fmt.Sprintf("other%d.mcp.test", i), false, Claim{Client: "10.0.0.7", Pattern: "*.mcp.test"}); err != nil {
			t.Fatalf("another client starved: %v", err)
		}
	}
}

// TestVIPPatternQuota: with several patterns, one wildcard cannot take the room of the others
// (many clients flooding the same wildcard), and an exact name is still bound.
func TestVIPPatternQuota(t *testing.T) {
	tb, err := OpenVIPTable(VIPOptions{V4: pfx("198.18.0.0/24"), Hold: 24 * time.Hour, Quarantine: time.Hour, Patterns: 2})
	if err != nil {
		t.Fatal(err)
	}
	_, pq := tb.Quotas()
	bound := 0
	for c := range 20 {
		for i := range 40 {
			_, _, err := tb.LookupFor(fmt.Sprintf("c%d-%d.mcp.test", c, i), false, Claim{Client: fmt.Sprintf("10.0.0.%d", c), Pattern: "*.mcp.test"})
			if err == nil {
				bound++
			}
		}
	}
	if bound != pq {
		t.Fatalf("the wildcard bound %d names, want its quota %d", bound, pq)
	}
	if _, _, err := tb.LookupFor("mcp.example", false, Claim{Client: "10.0.0.99", Pattern: "mcp.example"}); err != nil {
		t.Fatalf("exact name starved by the wildcard: %v", err)
	}
}

// TestVIPRecycledAfterQuarantine: a full pool of idle names (no flow, no query) frees its least
// recently used VIP once the quarantine is over, not after hold (a day); within the quarantine
// nothing is re-mapped; the recycling is journaled (a restart keeps the new binding).
func TestVIPRecycledAfterQuarantine(t *testing.T) {
	clk := newClock()
	dir := t.TempDir()
	var logs syncBuffer
	opt := VIPOptions{V4: pfx("198.18.0.0/30"), Hold: 24 * time.Hour, Quarantine: time.Hour, StateDir: dir, Now: clk.now,
		Log: slog.New(slog.NewTextHandler(&logs, nil))}
	tb, err := OpenVIPTable(opt)
	if err != nil {
		t.Fatal(err)
	}
	m := NewMetrics(tb.Len)
	m.Watch(tb)
	a := lookup4(t, tb, "a.test")
	clk.add(10 * time.Minute)
	b := lookup4(t, tb, "b.test")
	clk.add(40 * time.Minute)
	if _, _, err := tb.Lookup("c.test", false); !errors.Is(err, ErrPoolExhausted) {
		t.Fatalf("c.test within the quarantine: %v, want exhausted (a was answered 50m ago)", err)
	}
	clk.add(11 * time.Minute) // a idle 61m, b idle 51m
	c := lookup4(t, tb, "c.test")
	if c != a {
		t.Fatalf("c.test = %s, want a's %s (least recently used, idle past the quarantine)", c, a)
	}
	if n, _ := tb.Name(b); n != "b.test" {
		t.Fatalf("b (idle within the quarantine) re-mapped to %q", n)
	}
	if v := testutil.ToFloat64(m.Recycled.WithLabelValues("pool")); v != 1 {
		t.Errorf("recycled counted %v", v)
	}
	if !strings.Contains(logs.String(), "recycled an idle VIP") || !strings.Contains(logs.String(), "name=a.test") {
		t.Errorf("no recycling log line: %s", logs.String())
	}
	tb2, err := OpenVIPTable(opt)
	if err != nil {
		t.Fatal(err)
	}
	if n, ok := tb2.Name(a); !ok || n != "c.test" {
		t.Fatalf("after restart %s is %q, want c.test", a, n)
	}
	if got := lookup4(t, tb2, "b.test"); got != b {
		t.Fatalf("after restart b.test = %s, want %s", got, b)
	}
}

// TestVIPNeverRecycledUnderAFlow: a VIP with an open flow through it is never recycled,
// however old its last answer; once the flow is closed its quarantine starts.
func TestVIPNeverRecycledUnderAFlow(t *testing.T) {
	clk := newClock()
	tb, err := OpenVIPTable(VIPOptions{V4: pfx("198.18.0.0/30"), Hold: 24 * time.Hour, Quarantine: time.Hour, Now: clk.now})
	if err != nil {
		t.Fatal(err)
	}
	a := lookup4(t, tb, "a.test")
	clk.add(time.Minute)
	b := lookup4(t, tb, "b.test")
	flow := tcpPair(t)
	tb.Track(a, flow)
	clk.add(2 * time.Hour) // both idle past the quarantine; a carries a flow
	c := lookup4(t, tb, "c.test")
	if c != b {
		t.Fatalf("c.test = %s, want b's %s (a has an open flow)", c, b)
	}
	if n, _ := tb.Name(a); n != "a.test" {
		t.Fatalf("a VIP with an open flow re-mapped to %q", n)
	}
	clk.add(2 * time.Hour)
	tb.Sweep() // a's flow is still open: a is used now
	lookup4(t, tb, "c.test")
	flow.Close()
	if _, _, err := tb.Lookup("d.test", false); !errors.Is(err, ErrPoolExhausted) {
		t.Fatalf("d.test right after a's flow closed: %v, want exhausted (quarantine)", err)
	}
	clk.add(time.Hour + time.Minute)
	if d := lookup4(t, tb, "d.test"); d != a {
		t.Fatalf("d.test = %s, want a's %s after its quarantine", d, a)
	}
}

// TestVIPQuotaRecyclesOwnIdleNames: a client at its quota gets a new name by recycling its own
// oldest idle name (after the quarantine), never another client's.
func TestVIPQuotaRecyclesOwnIdleNames(t *testing.T) {
	clk := newClock()
	tb, err := OpenVIPTable(VIPOptions{V4: pfx("198.18.0.0/24"), Hold: 24 * time.Hour, Quarantine: time.Hour, ClientQuota: 2, Now: clk.now})
	if err != nil {
		t.Fatal(err)
	}
	other := Claim{Client: "10.0.0.2"}
	me := Claim{Client: "10.0.0.1"}
	o, _, _ := tb.LookupFor("other.test", false, other)
	clk.add(time.Minute)
	x, _, _ := tb.LookupFor("x.test", false, me)
	tb.LookupFor("y.test", false, me)
	if _, _, err := tb.LookupFor("z.test", false, me); !errors.Is(err, ErrQuota) {
		t.Fatalf("third name within the quarantine: %v, want the quota", err)
	}
	clk.add(2 * time.Hour)
	if _, _, err := tb.LookupFor("z.test", false, me); err != nil {
		t.Fatalf("third name after the quarantine: %v", err)
	}
	if n, _ := tb.Name(o); n != "other.test" {
		t.Fatal("another client's name was recycled for this client's quota")
	}
	if _, ok := tb.Name(x); ok {
		t.Fatal("the client's oldest idle name was not the one recycled")
	}
}

// TestVIPPoolNearFull: crossing 90% is logged and counted once, and the gauge reads the share.
func TestVIPPoolNearFull(t *testing.T) {
	var logs syncBuffer
	tb, err := OpenVIPTable(VIPOptions{V4: pfx("198.18.0.0/28"), Hold: time.Hour, Quarantine: time.Hour,
		Log: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	m := NewMetrics(tb.Len)
	m.Watch(tb)
	for i := range 12 { // 12 of 14: 86%
		lookup4(t, tb, fmt.Sprintf("n%d.test", i))
	}
	if v := testutil.ToFloat64(m.PoolNearFull.WithLabelValues("v4")); v != 0 {
		t.Fatalf("near full counted at 86%%: %v", v)
	}
	lookup4(t, tb, "n12.test")
	lookup4(t, tb, "n13.test")
	if v := testutil.ToFloat64(m.PoolNearFull.WithLabelValues("v4")); v != 1 {
		t.Fatalf("near full counted %v times, want once", v)
	}
	if got := testutil.ToFloat64(m.PoolUse[0]); got != 1 {
		t.Fatalf("pool used ratio %v, want 1", got)
	}
	if n := strings.Count(logs.String(), "VIP pool near full"); n != 1 || !strings.Contains(logs.String(), "pool=198.18.0.0/28") {
		t.Fatalf("near-full log lines %d: %s", n, logs.String())
	}
}

// TestDNSQuotaAnswers: through the server, a flooding client's queries over its quota are
// REFUSED (with an Extended DNS Error when it speaks EDNS), counted, and logged at most once a
// second; another client's new name is answered with a VIP.
func TestDNSQuotaAnswers(t *testing.T) {
	var logs syncBuffer
	tb, err := OpenVIPTable(VIPOptions{V4: pfx("198.18.0.0/24"), Hold: 24 * time.Hour, Quarantine: time.Hour, Patterns: 2})
	if err != nil {
		t.Fatal(err)
	}
	m := NewMetrics(tb.Len)
	m.Watch(tb)
	s := NewServer(ServerOptions{Names: []string{"mcp.test", "*.mcp.test"}, Table: tb,
		Upstream: echoUpstream{}, Clients: []netip.Prefix{pfx("10.0.0.0/8")}, TTL: 30 * time.Second,
		Metrics: m, Log: slog.New(slog.NewTextHandler(&logs, nil)), Now: func() time.Time { return time.Unix(1_800_000_000, 0) }})
	ctx := context.Background()
	flooder := netip.MustParseAddrPort("10.0.0.66:5353")
	answered, refused := 0, 0
	for i := range 254 {
		q := query(fmt.Sprintf("r%d.mcp.test.", i), mdns.TypeA)
		q.SetEdns0(1232, false)
		r := s.Answer(ctx, flooder, q)
		switch r.Rcode {
		case mdns.RcodeSuccess:
			answered++
		case mdns.RcodeRefused:
			refused++
			if refused == 1 && !hasEDE(r, mdns.ExtendedErrorCodeProhibited) {
				t.Fatalf("over-quota answer without EDE Prohibited: %v", r)
			}
		default:
			t.Fatalf("flood query %d: %s, want NOERROR or REFUSED", i, mdns.RcodeToString[r.Rcode])
		}
	}
	cq, _ := tb.Quotas()
	if answered != cq || refused != 254-cq {
		t.Fatalf("answered %d refused %d, want %d and %d", answered, refused, cq, 254-cq)
	}
	for _, n := range []string{"new.mcp.test.", "mcp.test."} {
		r := s.Answer(ctx, client, query(n, mdns.TypeA))
		if r.Rcode != mdns.RcodeSuccess || len(r.Answer) != 1 {
			t.Fatalf("another client's %s: %s %v, want a VIP", n, mdns.RcodeToString[r.Rcode], r.Answer)
		}
	}
	if v := testutil.ToFloat64(m.QuotaRefused.WithLabelValues("client")); v != float64(refused) {
		t.Errorf("quota refusals counted %v, want %d", v, refused)
	}
	if v := testutil.ToFloat64(m.Queries.WithLabelValues("A", "quota")); v != float64(refused) {
		t.Errorf("quota outcome counted %v", v)
	}
	if n := strings.Count(logs.String(), "VIP quota exceeded"); n != 1 {
		t.Errorf("%d quota log lines for one second of flood, want 1", n)
	}
	if !strings.Contains(logs.String(), "client=10.0.0.66") || !strings.Contains(logs.String(), "pattern=*.mcp.test") {
		t.Errorf("quota log line lacks the client or pattern: %s", logs.String())
	}
}

func hasEDE(r *mdns.Msg, code uint16) bool {
	o := r.IsEdns0()
	if o == nil {
		return false
	}
	for _, opt := range o.Option {
		if e, ok := opt.(*mdns.EDNS0_EDE); ok && e.InfoCode == code {
			return true
		}
	}
	return false
}

// tcpPair is the accepted side of a loopback TCP connection (closed at the end of the test).
func tcpPair(t *testing.T) *net.TCPConn {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	a, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	return a.(*net.TCPConn)
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestVIPQuotaSurvivesRestart: what a client holds is journaled with the binding, so a restart
// does not hand a flooding client a fresh quota.
func TestVIPQuotaSurvivesRestart(t *testing.T) {
	opt := VIPOptions{V4: pfx("198.18.0.0/24"), Hold: 24 * time.Hour, Quarantine: time.Hour, ClientQuota: 3, StateDir: t.TempDir()}
	tb, err := OpenVIPTable(opt)
	if err != nil {
		t.Fatal(err)
	}
	me := Claim{Client: "10.0.0.66", Pattern: "*.mcp.test"}
	for i := range 3 {
		if _, _, err := tb.LookupFor(fmt.Sprintf("n%d.mcp.test", i), false, me); err != nil {
			t.Fatal(err)
		}
	}
	tb2, err := OpenVIPTable(opt) // a crash: no Close
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := tb2.LookupFor("n3.mcp.test", false, me); !errors.Is(err, ErrQuota) {
		t.Fatalf("after a restart: %v, want the quota still used", err)
	}
}
