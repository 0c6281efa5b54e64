package level2

import (
	"regexp"
	"strings"
	"testing"

	"mcpintercept/mcp"
	"mcpintercept/policy"
)

func testRedaction(t *testing.T, marker string, paths []string, patterns ...string) *policy.Redaction {
	t.Helper()
	r := &policy.Redaction{Rule: "hide", Marker: marker}
	for _, p := range paths {
		pp, err := policy.ParsePath(p)
		if err != nil {
			t.Fatal(err)
		}
		r.Paths = append(r.Paths, pp)
	}
	for _, p := range patterns {
		r.Patterns = append(r.Patterns, regexp.MustCompile(p))
	}
	return r
}

// Case 9 of issue 16: redaction covers non-string values on paths, object keys and numbers'
// text, and the output is still one strict JSON-RPC message.
func TestRedactKeysAndValues(t *testing.T) {
	const canary = `CANARY-[A-Za-z0-9]+`
	call := func(args string) string {
		return `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","arguments":` + args + `}}`
	}
	for _, c := range []struct {
		name     string
		paths    []string
		patterns []string
		scope    string
		in, want string
		hits     int
	}{
		{"number on a path", []string{"$..pin"}, nil, "params",
			call(`{"pin":1234,"user":"bob"}`), call(`{"pin":"[R]","user":"bob"}`), 1},
		{"folded key on a path", []string{"$..pin"}, nil, "params",
			call(`{"PIN":1234}`), call(`{"PIN":"[R]"}`), 1},
		{"boolean and null on a path", []string{"$..admin", "$..token"}, nil, "params",
			call(`{"admin":true,"token":null}`), call(`{"admin":"[R]","token":"[R]"}`), 2},
		{"object replaced whole", []string{"$.params.arguments.creds"}, nil, "params",
			call(`{"creds":{"CANARY-k":1,"p":[2,"x"]},"n":1}`), call(`{"creds":"[R]","n":1}`), 1},
		{"array replaced whole", []string{"$.result.keys"}, nil, "result",
			`{"jsonrpc":"2.0","id":1,"result":{"keys":[1,{"a":"b"}]}}`, `{"jsonrpc":"2.0","id":1,"result":{"keys":"[R]"}}`, 1},
		{"already hidden", []string{"$..pin"}, nil, "params",
			call(`{"pin":"[R]"}`), call(`{"pin":"[R]"}`), 0},
		{"params keeps its shape", []string{"$.params"}, nil, "params",
			call(`{"a":1}`), `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"[R]","arguments":"[R]"}}`, 2},
		{"error keeps its shape and code", []string{"$.*"}, nil, "error",
			`{"jsonrpc":"2.0","id":1,"error":{"code":-32000,"message":"m","data":{"x":1}}}`,
			`{"jsonrpc":"2.0","id":1,"error":{"code":-32000,"message":"[R]","data":"[R]"}}`, 2},
		{"key holding the canary", nil, []string{canary}, "params",
			call(`{"CANARY-abc":1}`), call(`{"[R]":1}`), 1},
		{"key with the canary inside", nil, []string{canary}, "result",
			`{"jsonrpc":"2.0","id":1,"result":{"x":{"id-CANARY-abc-1":"v"}}}`, `{"jsonrpc":"2.0","id":1,"result":{"x":{"id-[R]-1":"v"}}}`, 1},
		{"two keys made unique", nil, []string{canary}, "params",
			call(`{"CANARY-a":1,"[R]-1":2,"CANARY-b":3}`), call(`{"[R]":1,"[R]-1":2,"[R]-2":3}`), 2},
		{"a rewritten key never folds to a kept one", nil, []string{canary}, "params",
			call(`{"[r]":0,"CANARY-a":1}`), call(`{"[r]":0,"[R]-1":1}`), 1},
		{"params member names are not rewritten", nil, []string{`^arguments$`, canary}, "params",
			call(`{"a":1}`), call(`{"a":1}`), 0},
		{"a rewritten params key never becomes a member Level 2 reads", nil, []string{canary}, "params",
			`{"jsonrpc":"2.0","id":1,"method":"m","params":{"CANARY-x":1}}`, `{"jsonrpc":"2.0","id":1,"method":"m","params":{"[R]":1}}`, 1},
		{"number text", nil, []string{`4[0-9]{15}`}, "params",
			call(`{"card":4111111111111111,"n":4}`), call(`{"card":"[R]","n":4}`), 1},
		{"number text, other spelling", nil, []string{`4[0-9]{15}`}, "params",
			call(`{"card":4.111111111111111e15}`), call(`{"card":4.111111111111111e15}`), 0},
		{"error.code is never a match", nil, []string{`-320`}, "error",
			`{"jsonrpc":"2.0","id":1,"error":{"code":-32000,"message":"-320"}}`, `{"jsonrpc":"2.0","id":1,"error":{"code":-32000,"message":"[R]"}}`, 1},
		{"member removed when no name is free", nil, []string{`^k[0-9]$|\]-`}, "params",
			call(`{"a":0,"k1":1,"k2":{"s":"x"},"b":3,"k3":4}`), call(`{"a":0,"[R]":1,"b":3}`), 3},
		{"every member removed", nil, []string{`^k[0-9]$|\]-`}, "params",
			call(`{"k1":1, "k2":2, "k3":3}`), call(`{"[R]":1}`), 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			red := testRedaction(t, "[R]", c.paths, c.patterns...)
			m, err := mcp.DecodeMessage([]byte(c.in), mcp.DecodeOptions{})
			if err != nil {
				t.Fatal(err)
			}
			out, hits, n := redactJSON(m.Raw, []*policy.Redaction{red}, c.scope)
			if string(out) != c.want || n != c.hits {
				t.Fatalf("got %s (%d hits), want %s (%d)", out, n, c.want, c.hits)
			}
			if _, err := mcp.DecodeMessage(out, mcp.DecodeOptions{}); err != nil {
				t.Fatalf("output refused by the strict decoder: %v", err)
			}
			if d := describeHits(hits, n); strings.Contains(d, "CANARY") || strings.Contains(d, "1234") {
				t.Fatalf("the record holds a redacted value: %s", d)
			}
		})
	}
}

// The record says where, never what: a key that is the secret is shown as the marker.
func TestRedactHitsHideKeys(t *testing.T) {
	red := testRedaction(t, "[R]", []string{"$..pin"}, `CANARY-[a-z]+`)
	raw := []byte(`{"jsonrpc":"2.0","id":1,"result":{"CANARY-abc":{"pin":1,"t":"CANARY-def"}}}`)
	_, hits, n := redactJSON(raw, []*policy.Redaction{red}, "result")
	d := describeHits(hits, n)
	if n != 3 || strings.Contains(d, "CANARY") || !strings.Contains(d, `$.result["[R]"].pin`) {
		t.Fatalf("%d hits: %s", n, d)
	}
}

// Case 8 of issue 16 needs it: a string from a message (an error message) loses what the
// patterns hide before it reaches a record.
func TestRedactText(t *testing.T) {
	reds := []*policy.Redaction{
		testRedaction(t, "[REDACTED]", nil, `CANARY-[A-Za-z0-9]+`),
		testRedaction(t, "***", []string{"$..pin"}, `\b4[0-9]{15}\b`),
	}
	got := redactText("failed for CANARY-abc123 with card 4111111111111111; CANARY-x", reds)
	if want := "failed for [REDACTED] with card ***; [REDACTED]"; got != want {
		t.Fatalf("%q, want %q", got, want)
	}
	if got := redactText("nothing", nil); got != "nothing" {
		t.Fatal(got)
	}
}

// A body the strict decoder refuses is never judged, yet its error quotes a key: every redact
// rule's patterns apply to it, whether or not its when would have matched.
func TestRedactTextAll(t *testing.T) {
	set, err := policy.Compile([]policy.RuleSpec{{Name: "c", When: `mcp.method == "never"`, Action: policy.RuleRedact,
		Redact: &policy.Redact{Patterns: []string{`CANARY-[a-z]+`}}}})
	if err != nil {
		t.Fatal(err)
	}
	_, derr := mcp.DecodeMessage([]byte(`{"jsonrpc":"2.0","id":1,"method":"m","params":{"a":{"CANARY-abc":1,"CANARY-abc":2}}}`), mcp.DecodeOptions{})
	if derr == nil || !strings.Contains(derr.Error(), "CANARY-abc") {
		t.Fatalf("premise: the decoder's error quotes the key: %v", derr)
	}
	if got := redactTextAll(derr.Error(), set); strings.Contains(got, "CANARY") || !strings.Contains(got, "[REDACTED]") {
		t.Fatalf("%q", got)
	}
	if got := redactTextAll("CANARY-x", nil); got != "CANARY-x" {
		t.Fatalf("no rules: %q", got)
	}
}
