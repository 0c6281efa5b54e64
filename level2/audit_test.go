package level2

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"mcpintercept/audit"
)

// fakeAuditor stands in for the engine's durable writer: Append "makes durable" by keeping the
// record (or fails with fail), Outcome keeps the record too.
type fakeAuditor struct {
	mu      sync.Mutex
	recs    []*audit.Record
	seq     uint64
	fail    error
	args    bool
	outcome chan *audit.Record
}

func newFakeAuditor() *fakeAuditor { return &fakeAuditor{outcome: make(chan *audit.Record, 16)} }

func (a *fakeAuditor) Append(_ context.Context, r *audit.Record) (audit.Receipt, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.fail != nil {
		return audit.Receipt{}, fmt.Errorf("%w: %w", audit.ErrUnavailable, a.fail)
	}
	a.seq++
	r.Seq = a.seq
	a.recs = append(a.recs, r)
	return audit.Receipt{Seq: a.seq}, nil
}

func (a *fakeAuditor) Outcome(r *audit.Record) {
	a.mu.Lock()
	a.seq++
	r.Seq = a.seq
	a.recs = append(a.recs, r)
	a.mu.Unlock()
	a.outcome <- r
}

func (a *fakeAuditor) Arguments() bool { return a.args }

func (a *fakeAuditor) all() []*audit.Record {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]*audit.Record(nil), a.recs...)
}

func (a *fakeAuditor) nextOutcome(t *testing.T) *audit.Record {
	t.Helper()
	// Outcome is called before Done returns, and Done runs before the exchange's connection is
	// reused or closed; the client has its answer by then, so this waits on the stage, not a clock.
	select {
	case o := <-a.outcome:
		return o
	case <-time.After(time.Minute): // a guard against a hang, not a timing check
		t.Fatal("no outcome record")
		return nil
	}
}

func auditHarness(t *testing.T, u *upstream, a *fakeAuditor) *harness {
	return newHarnessWith(t, u, denyRules, Options{}, nil, func(f *Flow) { f.Audit = a })
}

// Issue 18: an allowed tools/call's authorization record is durable before the server sees the
// call, and its outcome names the authorization.
func TestAuditAuthorizationBeforeForwarding(t *testing.T) {
	a := newFakeAuditor()
	var seenBefore []*audit.Record
	u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		seenBefore = a.all() // what was durable when the call reached the server
		echoServer(w, r)
	})
	h := auditHarness(t, u, a)
	r := post(t, h.addr, jsonHeaders+"traceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01\r\n",
		call(3, "read_file", `{"path":"/tmp/x","n":1}`))
	if r.status != 200 || !strings.Contains(string(r.body), "ran tools/call") {
		t.Fatalf("call: %d %s", r.status, r.body)
	}
	if len(seenBefore) != 1 {
		t.Fatalf("the server got the call with %d records durable, want its authorization", len(seenBefore))
	}
	auth := seenBefore[0]
	want, _ := audit.HashArguments(json.RawMessage(`{"n":1,"path":"/tmp/x"}`)) // key order does not matter
	if auth.Kind != audit.KindAuthorization || auth.Decision != audit.Allow || auth.Method != "tools/call" ||
		auth.Tool != "read_file" || auth.ID != "3" || auth.ArgsHash != want || auth.Arguments != nil ||
		auth.Traceparent != "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01" || auth.Level != 2 {
		t.Errorf("authorization %+v", auth)
	}
	o := a.nextOutcome(t)
	if o.Outcome != "result" || o.Authorization != auth.Seq || o.Tool != "read_file" {
		t.Errorf("outcome %+v, want result of authorization %d", o, auth.Seq)
	}
}

// A denial is recorded before it is answered, whatever the method; the server sees nothing.
func TestAuditDenial(t *testing.T) {
	a := newFakeAuditor()
	u := newUpstream(t, echoServer)
	h := auditHarness(t, u, a)
	r := post(t, h.addr, jsonHeaders, call(7, "denied_delete", `{"path":"/tmp"}`))
	denial(t, r, "7", CodeDenied, "no-delete")
	recs := a.all()
	if len(recs) != 1 || recs[0].Decision != audit.Deny || recs[0].Outcome != "denied" || recs[0].Rule != "no-delete" || recs[0].Tool != "denied_delete" {
		t.Fatalf("records %+v, want one denial", recs)
	}
	if u.calls.Load() != 0 {
		t.Fatal("the server saw a denied call")
	}
}

// Fail closed: a record that cannot be made durable refuses the call with -31004 and forwards
// nothing; a call the audit does not cover (tools/list) still goes through.
func TestAuditUnavailableRefuses(t *testing.T) {
	a := newFakeAuditor()
	a.fail = errors.New("no space left on device")
	u := newUpstream(t, echoServer)
	h := auditHarness(t, u, a)
	r := post(t, h.addr, jsonHeaders, call(9, "read_file", `{}`))
	denial(t, r, "9", CodeAuditUnavailable, "audit")
	if !strings.Contains(string(r.body), "no space left") {
		t.Errorf("refusal %s does not say why", r.body)
	}
	if u.calls.Load() != 0 {
		t.Fatal("an unaudited call reached the server")
	}
	r = post(t, h.addr, jsonHeaders, `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`)
	if r.status != 200 || u.calls.Load() != 1 {
		t.Fatalf("tools/list with the store down: %d %s (server calls %d)", r.status, r.body, u.calls.Load())
	}
}

// A server error ends the call as an error with its code; a response the appliance cannot read
// after dispatch ends it as uncertain.
func TestAuditOutcomes(t *testing.T) {
	a := newFakeAuditor()
	u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if strings.Contains(r.Header.Get("X-Case"), "garbage") {
			fmt.Fprint(w, `{"jsonrpc":"2.0","id":1,"result":{"a":1,"a":2}}`)
			return
		}
		fmt.Fprint(w, `{"jsonrpc":"2.0","id":1,"error":{"code":-32001,"message":"boom"}}`)
	})
	h := auditHarness(t, u, a)
	post(t, h.addr, jsonHeaders, call(1, "read_file", `{}`))
	if o := a.nextOutcome(t); o.Outcome != "error" || o.ErrorCode != -32001 {
		t.Errorf("outcome %+v, want error -32001", o)
	}
	post(t, h.addr, jsonHeaders+"X-Case: garbage\r\n", call(1, "read_file", `{}`))
	if o := a.nextOutcome(t); o.Outcome != "uncertain" || !strings.HasPrefix(o.Reason, "malformed") {
		t.Errorf("outcome %+v, want uncertain (malformed)", o)
	}
}

// audit_arguments: the record carries the arguments as forwarded.
func TestAuditArguments(t *testing.T) {
	a := newFakeAuditor()
	a.args = true
	u := newUpstream(t, echoServer)
	h := auditHarness(t, u, a)
	post(t, h.addr, jsonHeaders, call(2, "read_file", `{"path":"/tmp/y"}`))
	a.nextOutcome(t)
	if recs := a.all(); string(recs[0].Arguments) != `{"path":"/tmp/y"}` {
		t.Errorf("arguments %s", recs[0].Arguments)
	}
}
