package mcp

import (
	"errors"
	"sort"
	"testing"
)

// resultMethods are the methods CheckResult knows, in a fixed order for the fuzzer to pick from.
var resultMethods = func() []string {
	var out []string
	for m, spec := range Methods {
		if spec.Result != "" {
			out = append(out, m)
		}
	}
	sort.Strings(out)
	return append(out, "vendor/x")
}()

// FuzzCheckResult holds the judging of a result by its method's types: the scan's shortcut
// (no lone case variant of any protocol member seen, no walk) answers as the full walk does; a
// refusal points at a key of the result that folds to a member name of the type and is not it;
// and a method that is not MCP's never refuses.
func FuzzCheckResult(f *testing.F) {
	f.Add([]byte(`{"Tools":[{"name":"x"}]}`), uint8(0))
	f.Add([]byte(`{"tools":[{"NAME":"x","URL":"u"}],"ID":1}`), uint8(1))
	f.Add([]byte(`{"content":[{"type":"text","Text":"x","Title":"t"}],"Metadata":{"a":1}}`), uint8(2))
	f.Add([]byte(`{"resultType":"input_required","inputRequests":{"a":{"method":"elicitation/create","params":{"Url":"u"}}}}`), uint8(3))
	f.Add([]byte(`{"role":"assistant","content":{"type":"text","TEXT":"x"},"model":"m"}`), uint8(4))
	f.Add([]byte(`{"serverInfo":{"name":"s","Version":"1"},"capabilities":{"tools":{"ListChanged":true}}}`), uint8(5))
	f.Add([]byte(`{"ID":"abc","URL":"https://x","Size":3}`), uint8(255))
	f.Fuzz(func(t *testing.T, result []byte, pick uint8) {
		method := resultMethods[int(pick)%len(resultMethods)]
		body := append(append([]byte(`{"jsonrpc":"2.0","id":1,"result":`), result...), '}')
		m, err := DecodeMessage(body, DecodeOptions{})
		if err != nil || m.Kind != KindResponse {
			return
		}
		got := m.CheckResult(method)
		full := *m
		full.indexed = false // a Message built otherwise: always walked
		if want := full.CheckResult(method); (got == nil) != (want == nil) {
			t.Fatalf("%s: shortcut says %v, the walk %v", method, got, want)
		}
		if a, b := m.CheckClientResult(), full.CheckClientResult(); (a == nil) != (b == nil) {
			t.Fatalf("client result: shortcut says %v, the walk %v", a, b)
		}
		if resultType(method) == nil && got != nil {
			t.Fatalf("%s is not MCP's, yet its result is refused: %v", method, got)
		}
		if got == nil {
			return
		}
		var je *JSONError
		if !errors.As(got, &je) || !errors.Is(got, ErrCaseVariantKey) {
			t.Fatalf("refusal %v is no case-variant JSONError", got)
		}
		r := m.Result
		if je.Offset < 0 || je.Offset >= len(r) || r[je.Offset] != '"' {
			t.Fatalf("refusal offset %d is not at a key of %q", je.Offset, r)
		}
		key := Unquote(r[je.Offset:SkipString(r, je.Offset)])
		if name, ok := protocolFolded[string(AppendFolded(nil, []byte(key)))]; !ok || name == key {
			t.Fatalf("refused key %q is no case variant of a member", key)
		}
	})
}
