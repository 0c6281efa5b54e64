package level2

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"

	"mcpintercept/exchange"
	flowstage "mcpintercept/stage"
)

// credStage stands for a credentials route's last stage: the request went upstream with the
// credential it names.
type credStage struct{ exchange.Base }

func (credStage) RequestHead(_ context.Context, x *exchange.Exchange) exchange.Result {
	x.SetRequestHeader("Authorization", "Bearer exchanged-for-server")
	flowstage.SetCredential(x, exchange.Header{Name: "Authorization", Value: "Bearer exchanged-for-server"})
	return exchange.Continue
}

// bearerTransport sends the client's own token, as a workload on an exchange route does.
type bearerTransport struct{}

func (bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer client-subject-token")
	return http.DefaultTransport.RoundTrip(r)
}

// TestAnswerServerCarriesTheRoutesCredential: when Level 2 answers a blocked server request on
// the client's behalf on a credentials route, its POST carries the credential the route added,
// never the client's own token (which would be token passthrough to the server).
func TestAnswerServerCarriesTheRoutesCredential(t *testing.T) {
	srv := newHostile("one", `{}`)
	u := newUpstream(t, srv.ServeHTTP)
	var mu sync.Mutex
	var posted []exchange.Header
	base := identityFlow(u, "10.0.0.1")
	h := newHarnessStages(t, u, samplingRule, Options{}, NewSessions(0), func(f *Flow) {
		base(f)
		post := f.Post
		f.Post = func(ctx context.Context, target string, headers []exchange.Header, body []byte) error {
			mu.Lock()
			posted = append(posted, headers...)
			mu.Unlock()
			return post(ctx, target, headers, body)
		}
	}, func() exchange.Stage { return credStage{} })
	_, sampled, err := sdkCallWith(t, "http://"+h.addr+"/mcp", "lab-agent-untrusted", &http.Client{Transport: bearerTransport{}})
	if err != nil {
		t.Fatal(err)
	}
	if r := awaitSampling(t, h); sampled != 0 || r == nil {
		t.Fatalf("sampling handler ran %d times, record %+v: want it blocked and answered by the appliance", sampled, r)
	}
	mu.Lock()
	defer mu.Unlock()
	var authz []string
	for _, hd := range posted {
		if strings.EqualFold(hd.Name, "Authorization") {
			authz = append(authz, hd.Value)
		}
	}
	if len(authz) != 1 || authz[0] != "Bearer exchanged-for-server" {
		t.Fatalf("the appliance's answer to the server carried Authorization %q; want only the route's credential", authz)
	}
}
