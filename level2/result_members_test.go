package level2

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"testing"
)

// A result is judged by the types of the method of the request it answers (issue 29 item 6,
// review): a lone case variant of a member of that method's result type is refused, since a Go
// peer decoding into its structs reads it as the member; a custom method's result is the
// server's own ("ID", "URL", "Version" from a Go server's untagged struct) and passes, as does
// a key that is no member of the type at hand.
func TestResultCaseVariantsByMethod(t *testing.T) {
	for _, c := range []struct {
		name, method, ctype, result string
		passes                      bool
	}{
		{"vendor result", "vendor/x", "application/json", `{"ID":"CANARY","URL":"https://x.test","Version":"1"}`, true},
		{"vendor result on a stream", "vendor/x", "text/event-stream", `{"ID":"CANARY","Size":3}`, true},
		{"list result, no member of it", "tools/list", "application/json", `{"tools":[{"name":"CANARY","URL":"u"}],"ID":1}`, true},
		{"list result member", "tools/list", "application/json", `{"Tools":[{"name":"CANARY"}]}`, false},
		{"list entry member", "tools/list", "text/event-stream", `{"tools":[{"NAME":"CANARY"}]}`, false},
		{"call content block", "tools/call", "application/json", `{"content":[{"type":"text","Text":"CANARY"}]}`, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			body := `{"jsonrpc":"2.0","id":1,"result":` + c.result + `}`
			u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", c.ctype)
				if c.ctype == "text/event-stream" {
					io.WriteString(w, "event: message\ndata: "+body+"\n\n")
					return
				}
				io.WriteString(w, body)
			})
			h := newHarness(t, u, nil, Options{}, nil)
			params := `{}`
			if c.method == "tools/call" {
				params = `{"name":"echo","arguments":{}}`
			}
			r := post(t, h.addr, jsonHeaders, fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":%q,"params":%s}`, c.method, params))
			got := bytes.Contains(r.body, []byte(c.result))
			if got != c.passes {
				t.Fatalf("result passed: %v, want %v: %d %s", got, c.passes, r.status, r.body)
			}
			if !c.passes && !bytes.Contains(r.body, []byte(strconv.Itoa(CodeUnreadable))) {
				t.Fatalf("refused result: want an error %d naming the appliance, got %d %s", CodeUnreadable, r.status, r.body)
			}
		})
	}
}

// A client's result answers a server→client request Level 2 does not pair it with: it is judged
// by the results of the requests a server sends a client (sampling, elicitation, roots), which
// the server decodes it into. Keys of an elicitation's content are the form's own.
func TestClientResultCaseVariants(t *testing.T) {
	for _, c := range []struct {
		name, result string
		passes       bool
	}{
		{"elicitation action", `{"Action":"accept","content":{"pin":"1"}}`, false},
		{"sampling model", `{"role":"assistant","Model":"m","content":{"type":"text","text":"x"}}`, false},
		{"root uri", `{"roots":[{"URI":"file:///r"}]}`, false},
		{"form fields are the form's", `{"action":"accept","content":{"Name":"x","URL":"u"}}`, true},
		{"custom request's result", `{"ID":1,"Version":"2","Size":3}`, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusAccepted) })
			h := newHarness(t, u, nil, Options{}, nil)
			r := post(t, h.addr, jsonHeaders, `{"jsonrpc":"2.0","id":9,"result":`+c.result+`}`)
			if passed := u.calls.Load() > 0; passed != c.passes {
				t.Fatalf("reached the server: %v, want %v: %d %s", passed, c.passes, r.status, r.body)
			}
			if !c.passes && r.status != http.StatusBadRequest {
				t.Fatalf("refused: %d %s, want 400", r.status, r.body)
			}
		})
	}
}
