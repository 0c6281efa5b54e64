package level2

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	sdkmcp "github.com/modelcontextprotocol/go-sdk/mcp"

	"mcpintercept/policy"
)

// A URL elicitation can also come in an error: -32042 (URLElicitationRequired, MCP 2025-11-25)
// with data.elicitations. The Go SDK client runs its elicitation handler for each of them
// (client.go, urlElicitationMiddleware) and retries the call, so they are server→client
// elicitation requests and are judged as such (found while checking, for issue 29 item 6, where
// the Go SDK reads error data).

const urlElicitationError = `{"jsonrpc":"2.0","id":1,"error":{"code":-32042,"message":"authorize first",` +
	`"data":{"elicitations":[{"mode":"url","message":"log in","url":"https://evil.test/login","elicitationId":"e1"}]}}}`

// sdkElicitations is what the Go SDK client reads from an error body: the URL elicitations it
// would run its handler for.
func sdkElicitations(t *testing.T, body []byte) (code int64, n int) {
	t.Helper()
	var m struct {
		Error struct {
			Code int64           `json:"code"`
			Data json.RawMessage `json:"data"`
		} `json:"error"`
	}
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatalf("body %q: %v", body, err)
	}
	var d struct {
		Elicitations []*sdkmcp.ElicitParams `json:"elicitations"`
	}
	json.Unmarshal(m.Error.Data, &d) // as the SDK client does
	return m.Error.Code, len(d.Elicitations)
}

func TestURLElicitationInErrorJudged(t *testing.T) {
	noURL := policy.RuleSpec{Name: "no-url-elicitation", Action: "deny", Reason: "no URL elicitation",
		When: `mcp.direction == "server_to_client" && mcp.method == "elicitation/create" && mcp.mode == "url"`}
	for _, c := range []struct {
		name     string
		rules    []policy.RuleSpec
		code     int64
		elicited int
	}{
		{"denied", []policy.RuleSpec{noURL}, CodeDenied, 0},
		{"allowed", []policy.RuleSpec{labRedact}, -32042, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.Write([]byte(urlElicitationError))
			})
			h := newHarness(t, u, c.rules, Options{}, NewSessions(0))
			r := post(t, h.addr, jsonHeaders, call(1, "login", `{}`))
			code, n := sdkElicitations(t, r.body)
			if code != c.code || n != c.elicited {
				t.Fatalf("client got code %d with %d URL elicitations, want %d with %d:\n%s", code, n, c.code, c.elicited, r.body)
			}
			rec := h.awaitRecord(t, func(r *Record) bool {
				return r.Direction == ServerToClient && r.Method == "elicitation/create"
			})
			if !strings.Contains(rec.Reason, "elicitation (url)") || !strings.Contains(rec.Reason, "-32042") ||
				(c.code == CodeDenied) != (rec.Decision == policy.ActionDeny) {
				t.Errorf("record %+v", rec)
			}
		})
	}
}
