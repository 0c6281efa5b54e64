package engine

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"mcpintercept/chain"
	"mcpintercept/policy"
	"mcpintercept/stage"
	"mcpintercept/telemetry"
)

// newRoutedHarness runs an Engine with a routing table (nil: every flow opaque) on a loopback
// listener whose every flow goes to upstream; the peek timeout is short for tests.
func newRoutedHarness(t testing.TB, upstream string, lim Limits, rt *Routing) *harness {
	t.Helper()
	return newHarnessWith(t, upstream, lim, rt, nil)
}

// newHarnessWith is newRoutedHarness with a chance to change the Options (TLS, HTTP) first.
func newHarnessWith(t testing.TB, upstream string, lim Limits, rt *Routing, edit func(*Options)) *harness {
	t.Helper()
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	if lim.ConnectTimeout == 0 {
		lim.ConnectTimeout = 2 * time.Second
	}
	h := &harness{addr: ln.Addr().String(), sink: newSink(), metrics: telemetry.NewMetrics()}
	opt := Options{
		Mechanism: "external", Steering: fixedDst{netip.MustParseAddrPort(upstream)}, Dialer: &net.Dialer{},
		Limits: lim, Flows: h.sink, Metrics: h.metrics, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Routing: rt, TLS: TLSOptions{PeekTimeout: 200 * time.Millisecond},
	}
	if edit != nil {
		edit(&opt)
	}
	if opt.Stages == nil {
		// The appliance's chain (chain.Stages), as every HTTP-aware connection runs it.
		withChain(&opt, chain.Deps{})
	}
	h.eng = New(opt)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { h.eng.Serve(ctx, ln); close(done) }()
	h.stopAccepting = func() { cancel(); <-done }
	t.Cleanup(func() {
		h.stopAccepting()
		dctx, dcancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer dcancel()
		h.eng.Drain(dctx)
	})
	return h
}

// withChain gives opt the appliance's chain with deps, counting on opt's registry.
func withChain(opt *Options, deps chain.Deps) {
	if opt.Metrics != nil && opt.Metrics.Registry != nil {
		deps.Registry = opt.Metrics.Registry
	}
	opt.Stages, opt.ConnSpan = chain.Stages(deps), chain.ConnSpan(deps)
}

// counterValue is the value of the counter name{labels…} on h's registry (0: no such series).
func counterValue(t testing.TB, h *harness, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := h.metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, lp := range m.GetLabel() {
				have[lp.GetName()] = lp.GetValue()
			}
			for i := 0; i+1 < len(labels); i += 2 {
				if have[labels[i]] != labels[i+1] {
					continue series
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

func denyAll(t *testing.T) RuleSet {
	t.Helper()
	s, err := policy.Compile([]policy.RuleSpec{{Name: "deny-all", Action: policy.RuleDeny}})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestLevel1HungUpstreamTimesOut: an upstream that reads the request and never answers does not
// hold the flow (and its max_flows slot) forever: the idle timeout ends it.
func TestLevel1HungUpstreamTimesOut(t *testing.T) {
	up := upstreamServer(t, func(c *net.TCPConn) { io.Copy(io.Discard, c) }) // never answers
	h := newRoutedHarness(t, up, Limits{IdleTimeout: 300 * time.Millisecond},
		&Routing{Routes: []*Route{{Name: "l1", TLS: Plaintext, Level: 1, Development: true}}})
	c, err := net.Dial("tcp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err = c.Read(make([]byte, 1))
	if errors.Is(err, syscall.EAGAIN) || isTimeout(err) {
		t.Fatalf("the flow with a hung upstream was not closed: %v", err)
	}
	h.sink.next(t)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// TestStalledHelloDoesNotBypassPolicy: a client that sends part of a ClientHello and pauses past
// the peek timeout is closed, not forwarded opaque past the route's rules.
func TestStalledHelloDoesNotBypassPolicy(t *testing.T) {
	var got atomic.Int64
	up := upstreamServer(t, func(c *net.TCPConn) { n, _ := io.Copy(io.Discard, c); got.Add(n) })
	for _, d := range []Disposition{Passthrough, Terminate} {
		t.Run(string(d), func(t *testing.T) {
			h := newRoutedHarness(t, up, Limits{}, &Routing{
				Routes:   []*Route{{Name: "r", TLS: d, Level: 0, RuleSet: "deny", OnMismatch: "passthrough"}},
				RuleSets: map[string]RuleSet{"deny": denyAll(t)}})
			c, err := net.Dial("tcp", h.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.Write([]byte{0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00}) // a hello's first 7 bytes
			time.Sleep(400 * time.Millisecond)                        // past the 200 ms peek timeout
			c.Write([]byte(strings.Repeat("x", 100)))
			rec := h.sink.next(t)
			if rec.Decision != "deny" {
				t.Fatalf("record %+v: want the stalled hello refused", rec)
			}
			if got.Load() != 0 {
				t.Fatalf("the upstream received %d bytes", got.Load())
			}
		})
	}
}

// TestNonTLSOnPassthroughStillJudged: plain bytes on a passthrough route (on_mismatch passthrough)
// are still subject to the route's connection rules.
func TestNonTLSOnPassthroughStillJudged(t *testing.T) {
	var got atomic.Int64
	up := upstreamServer(t, func(c *net.TCPConn) { n, _ := io.Copy(io.Discard, c); got.Add(n) })
	h := newRoutedHarness(t, up, Limits{}, &Routing{
		Routes:   []*Route{{Name: "pt", TLS: Passthrough, RuleSet: "deny", OnMismatch: "passthrough"}},
		RuleSets: map[string]RuleSet{"deny": denyAll(t)}})
	c, err := net.Dial("tcp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "GET / HTTP/1.1\r\n\r\n")
	if rec := h.sink.next(t); rec.Decision != "deny" || rec.Rule != "deny-all" {
		t.Fatalf("record %+v: want deny-all", rec)
	}
	if got.Load() != 0 {
		t.Fatalf("the upstream received %d bytes", got.Load())
	}
}

// TestHostileHeaderValuesKeepTheDaemonUp: a tool name that is not UTF-8 (a metric label) and a
// flood of distinct names neither crash the appliance nor grow its metrics without bound.
func TestHostileHeaderValuesKeepTheDaemonUp(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer srv.Close()
	// A small joint bound, so that 1502 names overflow it.
	small := telemetry.NewMetricsWith(telemetry.MetricsOptions{RequestSeries: 500})
	h := newHarnessWith(t, strings.TrimPrefix(srv.URL, "http://"), Limits{},
		&Routing{Routes: []*Route{{Name: "l1", TLS: Plaintext, Level: 1, Development: true}}},
		func(o *Options) { o.Metrics = small })
	h.metrics = small
	c, err := net.Dial("tcp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	for i, name := range append([]string{"caf\xe9", "\xff\xfe"}, manyNames(1500)...) {
		c.SetDeadline(time.Now().Add(5 * time.Second))
		io.WriteString(c, "POST /mcp HTTP/1.1\r\nHost: x\r\nMcp-Method: tools/call\r\nMcp-Name: "+name+"\r\nContent-Length: 0\r\n\r\n")
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("request %d (%q): %v", i, name, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	n := 0
	mfs, _ := h.metrics.Registry.Gather()
	for _, mf := range mfs {
		if mf.GetName() == "mcpintercept_requests_total" {
			n = len(mf.GetMetric())
		}
	}
	// The joint bound plus the reserved fold-to-"other" series, and no fewer than the general
	// pool (so names beyond it were folded, not dropped).
	if bound := 500 + telemetry.ReservedFallbackSeries; n == 0 || n > bound || n < 400 {
		t.Fatalf("%d request series for 1502 distinct tool names; want at most the joint bound %d", n, bound)
	}
}

func manyNames(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = "tool-" + strconv.Itoa(i)
	}
	return out
}

func itoa(i int) string {
	return strings.TrimSpace(strings.Replace(string(rune('0'+i%10))+string(rune('0'+i/10%10))+string(rune('0'+i/100%10))+string(rune('0'+i/1000%10)), "", "", 0))
}

func TestClientKey(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"ipv4 as is", "10.0.0.7", "10.0.0.7"},
		{"ipv6 by /64", "fd00:1:2:3:aaaa:bbbb:cccc:dddd", "fd00:1:2:3::"},
		{"same /64, same key", "fd00:1:2:3::1", "fd00:1:2:3::"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := clientKey(netip.MustParseAddr(tt.in)).String(); got != tt.want {
				t.Fatalf("clientKey(%s) = %s, want %s", tt.in, got, tt.want)
			}
		})
	}
}

// TestConnectionFlood: 200 connections against max_flows 50: the excess is refused (reset, a
// record, a metric) while the admitted flows keep working, and the slots come back afterwards.
func TestConnectionFlood(t *testing.T) {
	up := upstreamServer(t, func(c *net.TCPConn) {
		defer c.Close()
		io.Copy(c, c)
	})
	h := newHarness(t, up, Limits{MaxFlows: 50, MaxFlowsPerClient: 1000})
	var open []net.Conn
	defer func() {
		for _, c := range open {
			c.Close()
		}
	}()
	for i := 0; i < 200; i++ {
		c, err := net.Dial("tcp", h.addr)
		if err != nil {
			continue // refused during connect: fine, counted below
		}
		open = append(open, c)
	}
	alive := 0
	for _, c := range open {
		c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Write([]byte("x")); err != nil {
			continue
		}
		b := make([]byte, 1)
		if _, err := io.ReadFull(c, b); err == nil {
			alive++
		}
	}
	if alive != 50 {
		t.Fatalf("%d flows work, want exactly max_flows (50)", alive)
	}
	for deadline := time.Now().Add(5 * time.Second); testutil.ToFloat64(h.metrics.FlowsRefused.WithLabelValues("max_flows")) < 150; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("refused metric %v, want 150", testutil.ToFloat64(h.metrics.FlowsRefused.WithLabelValues("max_flows")))
		}
	}
	for _, c := range open {
		c.Close()
	}
	open = nil
	for deadline := time.Now().Add(5 * time.Second); h.eng.Active() != 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d flows still active after every client left", h.eng.Active())
		}
	}
	c, err := net.Dial("tcp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	echo(t, c, "after the flood")
}

// TestHeaderRuleThroughEngine: rules see request headers (secrets removed) through the engine's
// adapter, and the same connection is judged per request.
func TestHeaderRuleThroughEngine(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer srv.Close()
	rs, err := policy.Compile([]policy.RuleSpec{{Name: "tenant", When: `http.headers["x-tenant"] == "blocked"`, Action: policy.RuleDeny}})
	if err != nil {
		t.Fatal(err)
	}
	h := newRoutedHarness(t, strings.TrimPrefix(srv.URL, "http://"), Limits{}, &Routing{
		Routes:   []*Route{{Name: "l1", TLS: Plaintext, Level: 1, Development: true, RuleSet: "r"}},
		RuleSets: map[string]RuleSet{"r": rs}})
	c, err := net.Dial("tcp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	for _, tc := range []struct {
		tenant string
		want   int
	}{{"ok", 200}, {"blocked", 403}, {"ok", 200}} {
		c.SetDeadline(time.Now().Add(5 * time.Second))
		io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\nX-Tenant: "+tc.tenant+"\r\n\r\n")
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Fatalf("tenant %s: %d, want %d", tc.tenant, resp.StatusCode, tc.want)
		}
	}
}

// TestNoChainRefuses: an engine built without its stage chain refuses a route that reads HTTP
// (its requests would otherwise go upstream with no guard, policy, token check or Level 2), and
// says why in the record; the upstream never sees a byte.
func TestNoChainRefuses(t *testing.T) {
	up, read := countingUpstream(t, nil)
	for _, level := range []int{1, 2} {
		h := newHarnessWith(t, up, Limits{}, &Routing{Routes: []*Route{{Name: "l", TLS: Plaintext, Level: level, Development: true}}},
			func(o *Options) { o.Stages = []stage.Factory{} })
		c := dialHTTP(t, h.addr)
		c.c.SetDeadline(time.Now().Add(10 * time.Second))
		io.WriteString(c.c, "GET / HTTP/1.1\r\nHost: mcp.test\r\n\r\n")
		if _, err := http.ReadResponse(c.br, nil); err == nil {
			t.Fatalf("level %d: a response without a chain", level)
		}
		rec := h.sink.next(t)
		if rec.Decision != "deny" || !strings.Contains(rec.Reason, "no stage chain") {
			t.Fatalf("level %d: record %+v", level, rec)
		}
		if n := <-read; n != 0 {
			t.Fatalf("level %d: upstream read %d bytes", level, n)
		}
	}
}
