package level2

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"mcpintercept/mcp"
)

// The benchmarks are the proof of the work budget's claim (schema_budget.go): a normal schema,
// the hostile ones, and for each costly shape the largest arguments the budget still
// lets through — the worst a schema and arguments under the bounds can cost. Speed is never
// asserted in a test; read ns/op and B/op here.

// costlyShape builds a schema and arguments of size n whose validation grows with n.
type costlyShape struct {
	name string
	gen  func(n int) (schema, args string)
}

var costlyShapes = []costlyShape{
	// Every item fails 49 anyOf branches (messages built, then discarded) and passes the last.
	{"AnyOfPerItem", func(n int) (string, string) {
		return `{"type":"object","properties":{"l":{"type":"array","items":{"anyOf":[` +
				strings.Repeat(`{"type":"string","minLength":1},`, 49) + `{"type":"boolean"}]}}}}`,
			`{"l":[` + strings.TrimSuffix(strings.Repeat(`true,`, n), ",") + `]}`
	}},
	// Two anyOf branches per level of the value: 2^depth evaluations.
	{"DoublingDepth", func(n int) (string, string) { return doublingSchema, nested("c", n, "{}") }},
	// A tree type: one evaluation chain per node.
	{"TreeNodes", func(n int) (string, string) {
		return treeSchema, `{"name":"r","children":[` + strings.TrimSuffix(strings.Repeat(`{"name":"x","children":[]},`, n), ",") + `]}`
	}},
	// A regexp over a long string.
	{"PatternBytes", func(n int) (string, string) {
		return `{"type":"object","properties":{"s":{"type":"string","pattern":"^(a|b|c|d)*$"}}}`, `{"s":"` + strings.Repeat("a", n) + `"}`
	}},
	// Many keys, each matched against 16 patterns.
	{"PatternPropertiesKeys", func(n int) (string, string) {
		var p []string
		for i := range 16 {
			p = append(p, fmt.Sprintf(`"^k%d.*$":{"type":"number"}`, i))
		}
		var a []string
		for i := range n {
			a = append(a, fmt.Sprintf(`"k1_%d":%d`, i, i))
		}
		return `{"type":"object","patternProperties":{` + strings.Join(p, ",") + `}}`, `{` + strings.Join(a, ",") + `}`
	}},
	// A large enum compared with every item.
	{"EnumItems", func(n int) (string, string) {
		var e []string
		for i := range 2000 {
			e = append(e, fmt.Sprintf(`"value-%d"`, i))
		}
		return `{"type":"object","properties":{"l":{"type":"array","uniqueItems":true,"items":{"enum":[` + strings.Join(e, ",") + `]}}}}`,
			`{"l":[` + strings.TrimSuffix(strings.Repeat(`"value-1999",`, 1), ",") + strings.Repeat(`,"value-1998"`, 0) + itemsOf(n) + `]}`
	}},
}

func itemsOf(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, `,"value-%d"`, 1000+i%999)
	}
	return b.String()
}

func decodeArgs(tb testing.TB, args string) map[string]any {
	tb.Helper()
	m, err := mcp.DecodeMessage([]byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","arguments":`+args+`}}`), mcp.DecodeOptions{})
	if err != nil {
		tb.Fatalf("args: %v", err)
	}
	return m.Arguments()
}

// largestAllowed finds the largest n (to a factor of 1/16) whose arguments the budget lets
// through: the costliest validation of that shape under the bounds.
func largestAllowed(tb testing.TB, s costlyShape) (int, *toolSchema, map[string]any) {
	allowed := func(n int) bool {
		schema, args := s.gen(n)
		var a map[string]any
		if err := json.Unmarshal([]byte(args), &a); err != nil {
			tb.Fatal(err)
		}
		v := (&toolSchema{raw: []byte(schema)}).validate(decodeArgs(tb, args))
		if v.schema != "" {
			tb.Fatalf("%s: schema refused: %s", s.name, v.schema)
		}
		return v.budget == ""
	}
	lo, hi := 1, 2
	for allowed(hi) && hi < 1<<24 {
		lo, hi = hi, hi*2
	}
	for hi-lo > max(1, lo/16) {
		if mid := (lo + hi) / 2; allowed(mid) {
			lo = mid
		} else {
			hi = mid
		}
	}
	schema, args := s.gen(lo)
	ts := &toolSchema{raw: []byte(schema)}
	return lo, ts, decodeArgs(tb, args)
}

func benchValidate(b *testing.B, ts *toolSchema, args map[string]any, want func(verdict) bool) {
	b.Helper()
	if v := ts.validate(args); !want(v) {
		b.Fatalf("unexpected verdict %+v", v)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		ts.validate(args)
	}
}

func within(v verdict) bool     { return v.checked && v.schema == "" && v.budget == "" }
func schemaOver(v verdict) bool { return v.schema != "" }
func budgetOver(v verdict) bool { return v.budget != "" }

func BenchmarkValidateNormal(b *testing.B) {
	ts := &toolSchema{raw: []byte(peerSchemas["everything gzip"])}
	benchValidate(b, ts, decodeArgs(b, `{"name":"a.gz","data":"https://example.com/x","outputType":"resource"}`), within)
}

func BenchmarkValidateNormalInvalid(b *testing.B) {
	ts := &toolSchema{raw: []byte(peerSchemas["everything sum"])}
	benchValidate(b, ts, decodeArgs(b, `{"a":1,"b":"two"}`), within)
}

func BenchmarkValidateHostileRecursive(b *testing.B) {
	benchValidate(b, &toolSchema{raw: []byte(recursiveSchema)}, decodeArgs(b, `{}`), schemaOver)
}

func BenchmarkValidateHostileExponential(b *testing.B) {
	benchValidate(b, &toolSchema{raw: []byte(exponentialSchema(19))}, decodeArgs(b, `{"x":1}`), schemaOver)
}

// BenchmarkValidateHostileCompile is the one-time cost of bounding a hostile schema (compile
// runs once per listed tool).
// largestDecodable is a schema just under maxSchemaParseWork: subschemas nested 16 deep (32
// JSON levels) around a long enum value, the costliest decoding the bounds allow.
func largestDecodable() string {
	wrap := func(n int) string {
		return strings.Repeat(`{"allOf":[`, 16) + `{"enum":["` + strings.Repeat("x", n) + `"]}` + strings.Repeat(`]}`, 16)
	}
	n := 1
	for {
		if _, w := jsonDepth([]byte(wrap(2 * n))); w > maxSchemaParseWork {
			return wrap(n)
		}
		n *= 2
	}
}

func BenchmarkValidateHostileCompile(b *testing.B) {
	for _, c := range []struct{ name, schema string }{
		{"Recursive", recursiveSchema}, {"Exponential19", exponentialSchema(19)},
		{"LargestDecodable", largestDecodable()},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				(&toolSchema{raw: []byte(c.schema)}).compile()
			}
		})
	}
}

// BenchmarkValidateHostileDoublingRefused is the budget refusing the instance-driven explosion
// (2^40 evaluations before the bounds).
func BenchmarkValidateHostileDoublingRefused(b *testing.B) {
	benchValidate(b, &toolSchema{raw: []byte(doublingSchema)}, decodeArgs(b, nested("c", 40, "{}")), budgetOver)
}

// BenchmarkValidateHostileAtBudget validates, for each costly shape, the largest arguments the
// budget allows: these figures are the bound (about 10 ms, a few MiB).
func BenchmarkValidateHostileAtBudget(b *testing.B) {
	for _, s := range costlyShapes {
		b.Run(s.name, func(b *testing.B) {
			n, ts, args := largestAllowed(b, s)
			benchValidate(b, ts, args, within)
			b.ReportMetric(float64(n), "n")
		})
	}
}
