package level2

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"mcpintercept/exchange"
	"mcpintercept/policy"
)

// lateStage stands for the credentials route's last stage: it adds the credential once every
// stage judged the request (CredentialKey), or refuses the request when it cannot get one.
type lateStage struct{ exchange.Base }

func (lateStage) RequestBody(_ context.Context, x *exchange.Exchange) exchange.Result {
	if strings.Contains(string(x.RequestBody()), "no-credential") {
		x.Answer(http.StatusBadGateway, []exchange.Header{{Name: "Content-Type", Value: "application/json"}}, []byte(`{}`),
			exchange.Verdict{Decision: exchange.Deny, Status: http.StatusBadGateway, Rule: "credentials", Reason: "token exchange refused"})
		return exchange.Stop
	}
	x.Set(policy.CredentialKey{}, policy.Credential{Added: "injected", Source: "file:/x"})
	return exchange.Continue
}

// TestLateRefusalRecorded: a request Level 2 allowed but a later stage refused is recorded as
// that stage's denial, and a record names a credential only when it was added (not for a request
// Level 2 or a later stage refused).
func TestLateRefusalRecorded(t *testing.T) {
	u := newUpstream(t, echoServer)
	h := newHarnessStages(t, u, denyRules, Options{}, nil, nil, func() exchange.Stage { return lateStage{} })
	if r := post(t, h.addr, jsonHeaders, call(1, "echo", `{"text":"ok"}`)); r.status != 200 {
		t.Fatalf("allowed call: %d %s", r.status, r.body)
	}
	if r := post(t, h.addr, jsonHeaders, call(2, "echo", `{"text":"no-credential"}`)); r.status != http.StatusBadGateway {
		t.Fatalf("late refusal: %d %s", r.status, r.body)
	}
	if r := post(t, h.addr, jsonHeaders, call(3, "denied_delete", `{}`)); r.status != 200 {
		t.Fatalf("denied call: %d %s", r.status, r.body)
	}
	if n := u.calls.Load(); n != 1 {
		t.Fatalf("the server got %d requests, want 1", n)
	}
	want := map[string]struct {
		decision policy.Action
		rule     string
		added    string
	}{"1": {policy.ActionAllow, "", "injected"}, "2": {policy.ActionDeny, "credentials", ""}, "3": {policy.ActionDeny, "no-delete", ""}}
	var got map[string]*Record
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		got = map[string]*Record{}
		for _, r := range h.recs() {
			if r.Direction == ClientToServer {
				got[r.ID] = r
			}
		}
		if len(got) == len(want) {
			break
		}
	}
	for id, w := range want {
		r := got[id]
		if r == nil {
			t.Fatalf("no record of request %s: %+v", id, h.recs())
		}
		if r.Decision != w.decision || r.Rule != w.rule || r.Credential.Added != w.added {
			t.Errorf("request %s: decision %q rule %q credential %q, want %q %q %q", id, r.Decision, r.Rule, r.Credential.Added, w.decision, w.rule, w.added)
		}
	}
}
