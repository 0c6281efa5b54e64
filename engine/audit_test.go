package engine

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"mcpintercept/audit"
	"mcpintercept/audit/auditstage"
	"mcpintercept/mcp"
	"mcpintercept/stage"
)

// fakeStore is an Appender that keeps what it was given. gate, when set, holds every Append until
// it is closed; entered hears of each Append before it blocks.
type fakeStore struct {
	mu      sync.Mutex
	recs    []audit.Record
	ch      chan audit.Record
	fail    error
	gate    chan struct{}
	entered chan struct{}
	durable atomic.Int64 // Appends that returned a receipt
}

func newFakeStore() *fakeStore { return &fakeStore{ch: make(chan audit.Record, 100)} }

func (s *fakeStore) Append(ctx context.Context, r *audit.Record) (audit.Receipt, error) {
	if s.entered != nil {
		s.entered <- struct{}{}
	}
	if s.gate != nil {
		<-s.gate
	}
	if s.fail != nil {
		return audit.Receipt{}, s.fail
	}
	s.mu.Lock()
	seq := uint64(len(s.recs) + 1)
	c := *r
	c.Seq = seq
	s.recs = append(s.recs, c)
	s.mu.Unlock()
	s.durable.Add(1)
	s.ch <- c
	return audit.Receipt{Seq: seq, Hash: fmt.Sprintf("h%d", seq)}, nil
}

func (s *fakeStore) next(t *testing.T) audit.Record {
	t.Helper()
	select {
	case r := <-s.ch:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("no audit record")
	}
	return audit.Record{}
}

func auditedRoute(ra *auditstage.Options) *Route {
	return &Route{Name: "audited", TLS: Plaintext, Level: 1, Development: true, Stages: stage.Options{auditstage.Name: ra}}
}

// countingUpstream answers every request 200 and reports, when its connection ends, how many
// bytes it read; firstByte runs when the first byte arrives.
func countingUpstream(t *testing.T, firstByte func()) (addr string, read chan int64) {
	read = make(chan int64, 10)
	addr = upstreamServer(t, func(c *net.TCPConn) {
		defer c.Close()
		cr := &countReader{r: c, first: firstByte}
		br := bufio.NewReader(cr)
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				read <- cr.n
				return
			}
			io.Copy(io.Discard, req.Body)
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		}
	})
	return addr, read
}

type countReader struct {
	r     io.Reader
	n     int64
	first func()
}

func (c *countReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	if n > 0 && c.n == 0 && c.first != nil {
		c.first()
	}
	c.n += int64(n)
	return n, err
}

// TestAuditLevel1RecordBeforeUpstream: "the durable authorization audit record is written inside
// the decision; if it cannot be written, no downstream transport starts". The upstream sees no
// byte of the request while the store holds the Append, and when its first byte arrives the
// record is durable; the outcome follows the response.
func TestAuditLevel1RecordBeforeUpstream(t *testing.T) {
	store := newFakeStore()
	store.gate, store.entered = make(chan struct{}), make(chan struct{}, 1)
	var early atomic.Bool
	up, read := countingUpstream(t, func() {
		if store.durable.Load() == 0 {
			early.Store(true)
		}
	})
	h := newRoutedHarness(t, up, Limits{}, &Routing{Routes: []*Route{auditedRoute(&auditstage.Options{Store: store})}})
	c := dialHTTP(t, h.addr)
	status := make(chan int, 1)
	go func() {
		status <- c.doBody("POST /mcp?token=secret HTTP/1.1\r\nHost: mcp.test\r\n", "{}",
			"Content-Length: 2", "Mcp-Method: tools/call", "Mcp-Name: get_weather",
			"traceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	}()
	<-store.entered
	close(store.gate) // the record is durable from here on
	if s := <-status; s != 200 {
		t.Fatalf("status %d, want 200", s)
	}
	if early.Load() {
		t.Fatal("the upstream saw a byte before the authorization record was durable")
	}
	auth := store.next(t)
	want := audit.Record{Seq: 1, Kind: "authorization", Flow: auth.Flow, Exchange: 1, Client: c.c.LocalAddr().String(),
		Destination: up, Level: 1, Method: "POST /mcp", Direction: "client_to_server", Tool: "get_weather",
		Decision: audit.Allow, Server: "mcp.test", Traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
	if auth.Flow == 0 || fmt.Sprint(auth) != fmt.Sprint(want) {
		t.Errorf("authorization record\n got %+v\nwant %+v", auth, want)
	}
	out := store.next(t)
	if out.Kind != "outcome" || out.Outcome != "result" || out.Reason != "http 200" || out.Authorization != 1 || out.Flow != auth.Flow {
		t.Errorf("outcome record %+v", out)
	}
	c.c.Close()
	if n := <-read; n == 0 {
		t.Error("the request never reached the upstream")
	}
	if got := counterValue(t, h, "mcpintercept_audit_records_total", "kind", "authorization"); got != 1 {
		t.Errorf("audit_records_total{kind=authorization} = %v, want 1", got)
	}
}

// TestAuditFailClosedRefuses: a record that cannot be made durable refuses the request with the
// JSON-RPC error -31004 naming the appliance, and nothing reaches the upstream.
func TestAuditFailClosedRefuses(t *testing.T) {
	store := newFakeStore()
	store.fail = fmt.Errorf("%w: disk full", audit.ErrUnavailable)
	up, read := countingUpstream(t, nil)
	h := newRoutedHarness(t, up, Limits{}, &Routing{Routes: []*Route{auditedRoute(&auditstage.Options{Store: store})}})
	c := dialHTTP(t, h.addr)
	c.c.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(c.c, "POST /mcp HTTP/1.1\r\nHost: mcp.test\r\nContent-Length: 2\r\n\r\n{}")
	resp, err := http.ReadResponse(c.br, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 503 || resp.Header.Get("Content-Type") != "application/json" {
		t.Errorf("status %d, content type %q; want 503 application/json", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	var msg struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Error   struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
			Data    struct {
				Intermediary, Reason string
			} `json:"data"`
		} `json:"error"`
	}
	if err := json.Unmarshal(body, &msg); err != nil {
		t.Fatalf("body %q: %v", body, err)
	}
	if msg.JSONRPC != "2.0" || string(msg.ID) != "null" || msg.Error.Code != -31004 || msg.Error.Message != "audit unavailable" ||
		msg.Error.Data.Intermediary != "mcpintercept" || !strings.Contains(msg.Error.Data.Reason, "disk full") {
		t.Errorf("body %s", body)
	}
	c.c.Close()
	if n := <-read; n != 0 {
		t.Errorf("the upstream read %d bytes of a refused request", n)
	}
	rec := h.sink.next(t)
	if rec.Decision != "deny" || rec.Rule != "audit" || rec.Status != 503 {
		t.Errorf("flow record %+v", rec)
	}
}

// TestAuditFailOpenForwards: with fail: open the request goes through and is counted unrecorded.
func TestAuditFailOpenForwards(t *testing.T) {
	store := newFakeStore()
	store.fail = audit.ErrUnavailable
	up, _ := countingUpstream(t, nil)
	h := newRoutedHarness(t, up, Limits{}, &Routing{Routes: []*Route{auditedRoute(&auditstage.Options{Store: store, FailOpen: true})}})
	if s := dialHTTP(t, h.addr).doBody("POST /mcp HTTP/1.1\r\nHost: mcp.test\r\n", "{}", "Content-Length: 2"); s != 200 {
		t.Fatalf("status %d, want 200", s)
	}
	if got := counterValue(t, h, "mcpintercept_audit_unrecorded_total", "route", "audited"); got != 1 {
		t.Errorf("audit_unrecorded_total{route=audited} = %v, want 1", got)
	}
}

// TestAuditNoStoreFailsClosed: an audited route with no store to write to refuses, never
// forwards unrecorded.
func TestAuditNoStoreFailsClosed(t *testing.T) {
	up, _ := countingUpstream(t, nil)
	h := newRoutedHarness(t, up, Limits{}, &Routing{Routes: []*Route{auditedRoute(&auditstage.Options{})}})
	if s := dialHTTP(t, h.addr).get(); s != 503 {
		t.Fatalf("status %d, want 503", s)
	}
}

// TestAuditDenial: a request policy refused has one record, its denial, and never an outcome of
// a call that did not happen.
func TestAuditDenial(t *testing.T) {
	store := newFakeStore()
	up, _ := countingUpstream(t, nil)
	route := auditedRoute(&auditstage.Options{Store: store})
	route.RuleSet = "deny"
	h := newRoutedHarness(t, up, Limits{}, &Routing{Routes: []*Route{route}, RuleSets: map[string]RuleSet{"deny": denyAll(t)}})
	c := dialHTTP(t, h.addr)
	if s := c.get(); s != 403 {
		t.Fatalf("status %d, want 403", s)
	}
	if s := c.get(); s != 403 {
		t.Fatalf("second status %d, want 403", s)
	}
	// Denials are written in the background: in either order, each under its own number.
	exchanges := map[uint64]bool{}
	for range 2 {
		r := store.next(t)
		if r.Kind != "authorization" || r.Decision != audit.Deny || r.Outcome != "denied" || r.Rule != "deny-all" || r.Method != "GET /" {
			t.Errorf("denial record %+v", r)
		}
		exchanges[r.Exchange] = true
	}
	if !exchanges[1] || !exchanges[2] {
		t.Errorf("exchange numbers %v, want 1 and 2", exchanges)
	}
	c.c.Close()
	h.stopAccepting()
	h.eng.Drain(context.Background())
	store.mu.Lock()
	defer store.mu.Unlock()
	if n := len(store.recs); n != 2 {
		t.Errorf("%d records, want 2", n)
	}
}

// TestAuditUncertain: a call whose response never came has an uncertain outcome: "reset" when the
// upstream reset, "shutdown" when the drain deadline cut the flow — written before Drain returns,
// so that the store can be closed after it.
func TestAuditUncertain(t *testing.T) {
	for _, tt := range []struct {
		name string
		want string
	}{{"upstream reset", "reset"}, {"drain deadline", "shutdown"}} {
		t.Run(tt.name, func(t *testing.T) {
			store := newFakeStore()
			got := make(chan struct{})
			up := upstreamServer(t, func(c *net.TCPConn) {
				http.ReadRequest(bufio.NewReader(c))
				if tt.want == "reset" {
					c.SetLinger(0)
					c.Close()
					return
				}
				close(got)
				io.Copy(io.Discard, c) // until the drain closes it
			})
			h := newRoutedHarness(t, up, Limits{}, &Routing{Routes: []*Route{auditedRoute(&auditstage.Options{Store: store})}})
			c := dialHTTP(t, h.addr)
			io.WriteString(c.c, "GET / HTTP/1.1\r\nHost: mcp.test\r\n\r\n")
			if auth := store.next(t); auth.Kind != "authorization" {
				t.Fatalf("first record %+v", auth)
			}
			if tt.want == "shutdown" {
				<-got
				h.stopAccepting()
				ctx, cancel := context.WithCancel(context.Background())
				cancel()
				if forced := h.eng.Drain(ctx); forced != 1 {
					t.Fatalf("drain closed %d flows, want 1", forced)
				}
				select {
				case out := <-store.ch:
					if out.Outcome != "uncertain" || out.Reason != "shutdown" || out.Authorization != 1 {
						t.Errorf("outcome %+v", out)
					}
				default:
					t.Fatal("Drain returned before the flow's outcome was written")
				}
				return
			}
			out := store.next(t)
			if out.Kind != "outcome" || out.Outcome != "uncertain" || out.Reason != tt.want || out.Authorization != 1 {
				t.Errorf("outcome %+v", out)
			}
		})
	}
}

// TestTraceparentValidation: only a well-formed W3C traceparent reaches a record.
func TestTraceparentValidation(t *testing.T) {
	for s, want := range map[string]bool{
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01":     true,
		"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-xyz": true,
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-xyz": false,
		"00-00000000000000000000000000000000-00f067aa0ba902b7-01":     false,
		"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01":     false,
		"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01":     false,
		"Bearer abc": false,
		"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01":     false,
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\x00": false,
	} {
		if got := mcp.ValidTraceparent(s); got != want {
			t.Errorf("ValidTraceparent(%q) = %v, want %v", s, got, want)
		}
	}
}
