package engine

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"mcpintercept/policy"
	"mcpintercept/telemetry"
)

// Tests of the flow's single exit (issue 9 point 3): whatever branch ends a flow, one record in
// the log's contract and the metrics come out of it.

var contractTLS = []string{string(Passthrough), string(Terminate), string(Plaintext)}

// panicRules panics when evaluated: a bug inside a flow.
type panicRules struct{}

func (panicRules) Evaluate(*policy.Input) policy.Decision { panic("boom") }
func (panicRules) Needs() policy.Needs                    { return policy.Needs{} }

// TestPanicEndsInOneRecord: a flow whose processing panics is closed and ends in exactly one
// record (deny, "internal error"), and the engine lets go of it.
func TestPanicEndsInOneRecord(t *testing.T) {
	up := upstreamServer(t, func(c *net.TCPConn) { io.Copy(io.Discard, c) })
	h := newRoutedHarness(t, up, Limits{IdleTimeout: time.Minute}, &Routing{
		Routes:   []*Route{{Name: "p", TLS: Plaintext, Level: 0, Development: true, RuleSet: "boom"}},
		RuleSets: map[string]RuleSet{"boom": panicRules{}}})
	c, err := net.Dial("tcp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rec := h.sink.next(t)
	if rec.Decision != string(policy.ActionDeny) || !strings.Contains(rec.Reason, "internal error: boom") ||
		!slices.Contains(contractTLS, rec.TLS) {
		t.Errorf("record decision=%q reason=%q tls=%q; want deny, internal error: boom, a contract tls", rec.Decision, rec.Reason, rec.TLS)
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Error("the panicked flow's client connection is still open")
	}
	waitActive(t, h, 0)
	time.Sleep(50 * time.Millisecond)
	h.sink.mu.Lock()
	n := len(h.sink.recs)
	h.sink.mu.Unlock()
	if n != 1 {
		t.Errorf("%d records, want 1", n)
	}
}

func waitActive(t *testing.T, h *harness, want int64) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); h.eng.Active() != want; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d active flows, want %d", h.eng.Active(), want)
		}
	}
}

// TestExitRecordsAndMetrics: refusals and failures from every stage of a flow (before its
// route, by policy after an on_mismatch passthrough, dialling) each give one record whose tls is
// one of the contract's three, and the metric of their kind.
func TestExitRecordsAndMetrics(t *testing.T) {
	closedPort := func(t *testing.T) string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		return addr
	}
	plainDenied := func(t *testing.T) *Routing {
		// conn.tls names what was seen even on the on_mismatch passthrough path.
		s, err := policy.Compile([]policy.RuleSpec{{Name: "no-plain", When: `conn.tls == "plaintext"`, Action: policy.RuleDeny}})
		if err != nil {
			t.Fatal(err)
		}
		return &Routing{Routes: []*Route{{Name: "pt", TLS: Passthrough, OnMismatch: "passthrough", RuleSet: "r"}},
			RuleSets: map[string]RuleSet{"r": s}}
	}
	tests := []struct {
		name     string
		upstream func(t *testing.T) string
		routing  func(t *testing.T) *Routing
		send     string
		tls      string
		decision string
		reason   string
		metric   func(m *telemetry.Metrics) float64
	}{
		{name: "dial failure", upstream: closedPort, routing: func(*testing.T) *Routing { return nil },
			tls: "passthrough", decision: "allow", reason: "upstream: ",
			metric: func(m *telemetry.Metrics) float64 {
				return testutil.ToFloat64(m.UpstreamErrors.WithLabelValues("dial"))
			}},
		{name: "policy after on_mismatch passthrough", routing: plainDenied, send: "hello\n",
			tls: "plaintext", decision: "deny", reason: "",
			metric: func(m *telemetry.Metrics) float64 {
				return testutil.ToFloat64(m.FlowsRefused.WithLabelValues("policy"))
			}},
		{name: "on_mismatch close", routing: func(*testing.T) *Routing {
			return &Routing{Routes: []*Route{{Name: "t", TLS: Terminate, Level: 1}}}
		}, send: "GET / HTTP/1.1\r\n\r\n",
			tls: "plaintext", decision: "deny", reason: "on_mismatch close",
			metric: func(m *telemetry.Metrics) float64 {
				return testutil.ToFloat64(m.FlowsRefused.WithLabelValues("mismatch"))
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			up := ""
			if tt.upstream != nil {
				up = tt.upstream(t)
			} else {
				up = upstreamServer(t, func(c *net.TCPConn) { io.Copy(io.Discard, c) })
			}
			h := newRoutedHarness(t, up, Limits{IdleTimeout: time.Minute}, tt.routing(t))
			c, err := net.Dial("tcp", h.addr)
			switch {
			case errors.Is(err, syscall.ECONNRESET):
				// Refused before connect(2) returned: the record is what is checked.
			case err != nil:
				t.Fatal(err)
			default:
				defer c.Close()
				if tt.send != "" {
					io.WriteString(c, tt.send)
				}
			}
			rec := h.sink.next(t)
			if rec.TLS != tt.tls || rec.Decision != tt.decision || !strings.Contains(rec.Reason, tt.reason) || rec.Level != 0 {
				t.Errorf("record tls=%q decision=%q reason=%q level=%d; want %q, %q, reason containing %q, level 0",
					rec.TLS, rec.Decision, rec.Reason, rec.Level, tt.tls, tt.decision, tt.reason)
			}
			if v := tt.metric(h.metrics); v != 1 {
				t.Errorf("metric %v, want 1", v)
			}
			waitActive(t, h, 0)
			if n := testutil.CollectAndCount(h.metrics.FlowDuration); n != 1 {
				t.Errorf("flow duration observed in %d series, want 1", n)
			}
		})
	}
}

// TestHeaderTimeoutBeforeIdle: with an idle timeout at or under Level 1's header timeout, a head
// that stops halfway still gets its 408 (the header timeout is kept under the idle one) rather
// than a silent close by the idle watch.
func TestHeaderTimeoutBeforeIdle(t *testing.T) {
	up := upstreamServer(t, func(c *net.TCPConn) { io.Copy(io.Discard, c) })
	h := newRoutedHarness(t, up, Limits{IdleTimeout: time.Second},
		&Routing{Routes: []*Route{{Name: "l1", TLS: Plaintext, Level: 1, Development: true}}})
	c, err := net.Dial("tcp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n") // no blank line: the head never ends
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer to a stalled head under a 1 s idle timeout: %v", err)
	}
	if resp.StatusCode != http.StatusRequestTimeout {
		t.Errorf("status %d, want 408", resp.StatusCode)
	}
	if rec := h.sink.next(t); rec.Status != http.StatusRequestTimeout {
		t.Errorf("record status %d reason %q, want 408", rec.Status, rec.Reason)
	}
}

func TestHeaderTimeoutUnder(t *testing.T) {
	s := time.Second
	for _, tt := range []struct {
		name          string
		h, idle, want time.Duration
	}{
		{"default under a long idle", 0, time.Minute, 0},
		{"default over a short idle", 0, 5 * s, 4500 * time.Millisecond},
		{"set over idle", 30 * s, 10 * s, 9 * s},
		{"set equal to idle", 10 * s, 10 * s, 9 * s},
		{"set under idle", 2 * s, 10 * s, 2 * s},
		{"no idle timeout", 30 * s, 0, 30 * s},
		{"header timeout disabled", -1, 5 * s, -1},
	} {
		if got := headerTimeoutUnder(tt.h, tt.idle); got != tt.want {
			t.Errorf("%s: headerTimeoutUnder(%v, %v) = %v, want %v", tt.name, tt.h, tt.idle, got, tt.want)
		}
	}
}
