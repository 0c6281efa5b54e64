package level2

import (
	"strings"
	"testing"

	"mcpintercept/mcp"
)

// FuzzSchema feeds an arbitrary schema and arguments to the bounded path, as a tools/call of a
// listed tool reaches it: it must not crash or hang whatever the schema, and when the call is
// checked within the bounds its verdict (valid or not) is the library's own on the plain
// arguments. Inputs are kept small so that each run is quick; the bounds themselves are proved
// by the benchmarks and TestSchemaBounds*.
func FuzzSchema(f *testing.F) {
	f.Add(recursiveSchema, `{}`)
	f.Add(exponentialSchema(18), `{"x":1}`)
	f.Add(exponentialSchema(19), `"s"`)
	f.Add(doublingSchema, nested("c", 12, "{}"))
	f.Add(treeSchema, `{"name":"n","children":[{"name":"m","children":[]}]}`)
	f.Add(`{"type":"object","properties":{"a":{"type":"number"}},"required":["a"]}`, `{"a":"x"}`)
	f.Add(`{"$defs":{"a":{"$anchor":"x","$ref":"#x"}},"$ref":"#x"}`, `{}`)
	f.Add(`{"$dynamicAnchor":"n","properties":{"c":{"$dynamicRef":"#n"}}}`, `{"c":{"c":{}}}`)
	f.Add(`{"patternProperties":{"^(a+)+$":{"type":"string"}},"propertyNames":{"maxLength":3}}`, `{"aaaa":1}`)
	f.Add(`{"items":[{"type":"string"}],"additionalItems":false,"$schema":"http://json-schema.org/draft-07/schema#"}`, `[1,2]`)
	f.Fuzz(func(t *testing.T, schema, args string) {
		if len(schema) > 4096 || len(args) > 4096 {
			return
		}
		m, err := mcp.DecodeMessage([]byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","arguments":`+args+`}}`), mcp.DecodeOptions{})
		if err != nil {
			return
		}
		a := m.Arguments()
		v := (&toolSchema{raw: []byte(schema)}).validate(a)
		if !v.checked || v.schema != "" || v.budget != "" {
			return
		}
		if a == nil {
			a = map[string]any{}
		}
		// Within the bounds the library's own validation is bounded too: compare.
		problem, checked := oldValidate(t, schema, a)
		if !checked || (problem == "") != (v.problem == "") {
			t.Fatalf("schema %s args %s: bounded %q, library %q (checked %v)", schema, args, v.problem, problem, checked)
		}
		if strings.Contains(v.problem, "\n") {
			t.Fatalf("problem spans lines: %q", v.problem)
		}
	})
}
