package level2

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime/debug"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
)

// The draft, "Security Considerations": an intermediary that parses what a peer controls must
// bound it; DESIGN.md: "What a peer controls (tool schemas, list sizes, names per client) is
// bounded before it is used: a hostile inputSchema must cost bounded time and stack, never the
// process."

// recursiveSchema is issue 16 case 7: a $ref that reaches itself on the same value. The
// library's Validate recurses until the goroutine stack overflows, a fatal error.
const recursiveSchema = `{"$defs":{"a":{"$ref":"#/$defs/a"}},"$ref":"#/$defs/a"}`

// exponentialSchema nests anyOf through shared $defs: depth levels of two branches each cost
// 2^depth evaluations of one value (issue 16: 1.2 KB, depth 18 took 6-9 s; 19 took 1.3 GB).
func exponentialSchema(depth int) string {
	var b strings.Builder
	b.WriteString(`{"$defs":{`)
	for i := range depth {
		fmt.Fprintf(&b, `"a%d":{"anyOf":[{"$ref":"#/$defs/a%d"},{"$ref":"#/$defs/a%d"}]},`, i, i+1, i+1)
	}
	fmt.Fprintf(&b, `"a%d":{"type":"string"}},"$ref":"#/$defs/a0"}`, depth)
	return b.String()
}

// treeSchema is a legitimate recursive type: a node whose children are nodes.
const treeSchema = `{"$defs":{"node":{"type":"object","properties":{"name":{"type":"string"},` +
	`"children":{"type":"array","items":{"$ref":"#/$defs/node"}}},"required":["name"],"additionalProperties":false}},` +
	`"$ref":"#/$defs/node"}`

// doublingSchema recurses through a property with two anyOf branches: each level of the
// instance doubles the evaluations (2^depth on a value nested depth deep), a cost no static
// bound sees: the work budget refuses it.
const doublingSchema = `{"$defs":{"n":{"type":"object","anyOf":[{"properties":{"c":{"$ref":"#/$defs/n"}}},` +
	`{"properties":{"c":{"$ref":"#/$defs/n"}}}]}},"$ref":"#/$defs/n"}`

func nested(key string, depth int, leaf string) string {
	return strings.Repeat(`{"`+key+`":`, depth) + leaf + strings.Repeat("}", depth)
}

// checkWithin runs validate with a hang guard: a regression that makes validation unbounded
// fails here (or crashes the test binary on a stack overflow, which also fails) instead of
// hanging CI. The guard is generous; it measures nothing.
func checkWithin(t *testing.T, schema, args string) verdict {
	t.Helper()
	var a map[string]any
	if err := json.Unmarshal([]byte(args), &a); err != nil {
		t.Fatalf("args %s: %v", args, err)
	}
	ts := &toolSchema{raw: []byte(schema)}
	done := make(chan verdict, 1)
	go func() { done <- ts.validate(a) }()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	select {
	case v := <-done:
		return v
	case <-ctx.Done():
		t.Fatalf("validation of %.80s did not finish", schema)
		return verdict{}
	}
}

func TestSchemaBoundsRefuseHostileSchemas(t *testing.T) {
	deep := nested("properties", 0, "")
	{
		var b strings.Builder
		for range 40 {
			b.WriteString(`{"properties":{"x":`)
		}
		b.WriteString(`{}`)
		b.WriteString(strings.Repeat("}}", 40))
		deep = b.String()
	}
	for _, c := range []struct {
		name, schema, args, why string
	}{
		{"recursive $ref", recursiveSchema, `{}`, "$ref cycle at #/$defs/a"},
		{"exponential anyOf depth 18", exponentialSchema(18), `{"x":1}`, "combinator fan-out"},
		{"exponential anyOf depth 19", exponentialSchema(19), `{"x":1}`, "combinator fan-out"},
		{"root refers to itself", `{"$ref":"#"}`, `{}`, "$ref cycle at #"},
		{"cycle through allOf and anyOf", `{"$defs":{"a":{"allOf":[{"$ref":"#/$defs/b"}]},"b":{"anyOf":[{"type":"object"},{"$ref":"#/$defs/a"}]}},"$ref":"#/$defs/a"}`, `{}`, "$ref cycle"},
		{"cycle through not", `{"$defs":{"a":{"not":{"$ref":"#/$defs/a"}}},"$ref":"#/$defs/a"}`, `{}`, "$ref cycle"},
		{"cycle through if/then", `{"$defs":{"a":{"if":{"type":"object"},"then":{"$ref":"#/$defs/a"}}},"$ref":"#/$defs/a"}`, `{}`, "$ref cycle"},
		{"cycle through an anchor", `{"$defs":{"a":{"$anchor":"x","$ref":"#x"}},"$ref":"#x"}`, `{}`, "$ref cycle"},
		{"cycle through dependentSchemas", `{"dependentSchemas":{"p":{"$ref":"#"}}}`, `{"p":1}`, "$ref cycle"},
		{"subschemas nested too deep", deep, `{}`, "nested deeper than 32"},
		{"deep and large", strings.Repeat(`{"allOf":[`, 30) + `{"const":"` + strings.Repeat("x", 64<<10) + `"}` + strings.Repeat(`]}`, 30), `{}`, "too large for its nesting"},
		{"JSON nested too deep", `{"const":` + strings.Repeat("[", 200) + strings.Repeat("]", 200) + `}`, `{}`, "JSON nesting deeper"},
	} {
		t.Run(c.name, func(t *testing.T) {
			v := checkWithin(t, c.schema, c.args)
			if !v.checked || !strings.Contains(v.schema, c.why) {
				t.Fatalf("verdict %+v: want the schema refused with %q", v, c.why)
			}
			why, told := refusalOf("evil", v)
			if !strings.HasPrefix(why, "input schema of tool evil refused: ") || told != why {
				t.Fatalf("record reason %q, client told %q", why, told)
			}
		})
	}
}

func TestSchemaBudgetRefusesCostlyArguments(t *testing.T) {
	for _, c := range []struct {
		name, schema, args, why string
	}{
		{"doubling per level", doublingSchema, nested("c", 30, "{}"), "work budget"},
		{"wide array of anyOf", `{"type":"object","properties":{"l":{"type":"array","items":{"anyOf":[` +
			strings.Repeat(`{"type":"string"},`, 200) + `{"type":"number"}]}}}}`,
			`{"l":[` + strings.Repeat(`true,`, 20000) + `true]}`, "work budget"},
		{"pattern over a long string", `{"type":"object","properties":{"s":{"type":"string","pattern":"^(a|b|c|d|e|f|g|h)*$"}}}`,
			`{"s":"` + strings.Repeat("a", 1<<20) + `"}`, "work budget"},
		{"arguments nested too deep", treeSchema, nested("x", 80, "1"), "nested deeper than"},
	} {
		t.Run(c.name, func(t *testing.T) {
			v := checkWithin(t, c.schema, c.args)
			if !v.checked || v.schema != "" || !strings.Contains(v.budget, c.why) {
				t.Fatalf("verdict %+v: want the arguments refused with %q", v, c.why)
			}
		})
	}
}

func TestSchemaRecursiveTypesStillValidate(t *testing.T) {
	child := func(inner string) string { return `{"name":"n","children":[` + inner + `]}` }
	deep := `{"name":"leaf"}`
	for range 20 {
		deep = child(deep)
	}
	for _, c := range []struct {
		name, args, problem string
	}{
		{"valid tree 20 deep", deep, ""},
		{"bad leaf", child(child(`{"name":7}`)), "name: type is integer, want"},
		{"extra member deep down", child(child(`{"name":"x","evil":1}`)), "unexpected additional properties"},
		{"shallow doubling is fine", "", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			schema := treeSchema
			if c.args == "" {
				schema, c.args = doublingSchema, nested("c", 5, "{}")
			}
			v := checkWithin(t, schema, c.args)
			if !v.checked || v.schema != "" || v.budget != "" {
				t.Fatalf("verdict %+v: want checked within the bounds", v)
			}
			if c.problem == "" && v.problem != "" || !strings.Contains(v.problem, c.problem) {
				t.Fatalf("problem %q, want %q", v.problem, c.problem)
			}
		})
	}
}

// oldValidate is validation as it was before the bounds: the library over the plain decoded
// arguments, its message reduced by describeSchemaError.
func oldValidate(t *testing.T, schema string, args map[string]any) (string, bool) {
	var sc jsonschema.Schema
	if err := json.Unmarshal([]byte(schema), &sc); err != nil {
		t.Fatal(err)
	}
	rs, err := sc.Resolve(nil)
	if err != nil {
		return "", false
	}
	if err := rs.Validate(args); err != nil {
		return describeSchemaError(err.Error()), true
	}
	return "", true
}

// Schemas of the lab's peers: the Go SDK infers its tools' schemas with jsonschema.For (the
// argument types of e2e/peers/mcpserver), server-everything's are its tools/list (2026.8.31).
var peerSchemas = map[string]string{
	"everything echo":            `{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","properties":{"message":{"type":"string","description":"Message to echo"}},"required":["message"]}`,
	"everything annotated":       `{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","properties":{"messageType":{"type":"string","enum":["error","success","debug"],"description":"Type of message to demonstrate different annotation patterns"},"includeImage":{"default":false,"description":"Whether to include an example image","type":"boolean"}},"required":["messageType"]}`,
	"everything env":             `{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","properties":{}}`,
	"everything links":           `{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","properties":{"count":{"default":3,"description":"Number of resource links to return (1-10)","type":"number","minimum":1,"maximum":10}}}`,
	"everything reference":       `{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","properties":{"resourceType":{"default":"Text","type":"string","enum":["Text","Blob"]},"resourceId":{"default":1,"description":"ID of the text resource to fetch","type":"number"}}}`,
	"everything sum":             `{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","properties":{"a":{"type":"number","description":"First number"},"b":{"type":"number","description":"Second number"}},"required":["a","b"]}`,
	"everything gzip":            `{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","properties":{"name":{"default":"README.md.gz","type":"string","description":"Name of the output file"},"data":{"default":"https://raw.githubusercontent.com/modelcontextprotocol/servers/refs/heads/main/README.md","type":"string","format":"uri","description":"URL or data URI of the file content to compress"},"outputType":{"default":"resourceLink","description":"How the resulting gzipped file should be returned.","type":"string","enum":["resourceLink","resource"]}}}`,
	"everything long-running":    `{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","properties":{"duration":{"default":10,"description":"Duration of the operation in seconds","type":"number"},"steps":{"default":5,"description":"Number of steps in the operation","type":"number"}}}`,
	"everything research":        `{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","properties":{"topic":{"type":"string","description":"The research topic to investigate"},"ambiguous":{"default":false,"description":"Simulate an ambiguous query that requires clarification (triggers input_required status)","type":"boolean"}},"required":["topic"]}`,
	"lab ask_model":              `{"type":"object","properties":{"prompt":{"type":"string"}}}`,
	"lab extra":                  `{"type":"object"}`,
	"level2 add (surface test)":  `{"type":"object","properties":{"a":{"type":"number"},"b":{"type":"number"}},"required":["a","b"]}`,
	"level2 echo (surface test)": `{"type":"object","properties":{"text":{"type":"string"}},"additionalProperties":false}`,
	"tree":                       treeSchema,
	"combinators": `{"type":"object","properties":{"v":{"oneOf":[{"type":"string","minLength":2,"maxLength":5},{"type":"integer","minimum":0,"multipleOf":2}]},` +
		`"w":{"not":{"const":"x"}},"u":{"type":"array","items":{"type":"string"},"uniqueItems":true,"minItems":1},` +
		`"p":{"patternProperties":{"^k":{"type":"boolean"}}},"d":{"dependentRequired":{"a":["b"]}}}}`,
}

func goSDKSchemas(t *testing.T) map[string]string {
	type echoArgs struct {
		Text string `json:"text" jsonschema:"text to echo back"`
	}
	type addArgs struct {
		A float64 `json:"a" jsonschema:"first addend"`
		B float64 `json:"b" jsonschema:"second addend"`
	}
	type deleteArgs struct {
		Path string `json:"path" jsonschema:"path to delete (nothing is deleted)"`
	}
	type progressArgs struct {
		Steps int `json:"steps" jsonschema:"number of progress notifications to send"`
	}
	out := map[string]string{}
	add := func(name string, s *jsonschema.Schema, err error) {
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(s)
		out[name] = string(b)
	}
	s, err := jsonschema.For[echoArgs](nil)
	add("go echo", s, err)
	s, err = jsonschema.For[addArgs](nil)
	add("go add", s, err)
	s, err = jsonschema.For[deleteArgs](nil)
	add("go denied_delete", s, err)
	s, err = jsonschema.For[progressArgs](nil)
	add("go progress", s, err)
	s, err = jsonschema.For[struct{}](nil)
	add("go whoami", s, err)
	return out
}

// Arguments tried against every peer schema, each with at most one fault so that the library's
// (map-ordered) choice of which failure to report is the same both ways.
var peerArguments = []string{
	`{}`, `{"message":"hi"}`, `{"message":7}`, `{"messageType":"error"}`, `{"messageType":"nope"}`,
	`{"count":5}`, `{"count":11}`, `{"count":"3"}`, `{"a":1,"b":2}`, `{"a":"1","b":2}`, `{"a":1}`,
	`{"text":"x"}`, `{"text":"x","other":1}`, `{"text":1}`, `{"path":"/tmp"}`, `{"path":["/tmp"]}`,
	`{"steps":3}`, `{"steps":2.5}`, `{"prompt":"p"}`, `{"name":"n","children":[{"name":"m"}]}`,
	`{"name":"n","children":[{"name":1}]}`, `{"v":"abc"}`, `{"v":"a"}`, `{"v":4}`, `{"v":3}`,
	`{"w":"x"}`, `{"u":["a","a"]}`, `{"u":[]}`, `{"p":{"k1":true}}`, `{"p":{"k1":"no"}}`,
	`{"d":{"a":1}}`, `{"d":{"a":1,"b":2}}`, `{"resourceType":"Blob","resourceId":2}`, `{"topic":"t","ambiguous":"no"}`,
}

// sortedNames puts the names of an "unexpected additional properties" list in order: the library
// lists them in map order, which differs run to run.
func sortedNames(problem string) string {
	i, j := strings.IndexByte(problem, '['), strings.LastIndexByte(problem, ']')
	if i < 0 || j < i {
		return problem
	}
	names := strings.Fields(problem[i+1 : j])
	slices.Sort(names)
	return problem[:i+1] + strings.Join(names, " ") + problem[j:]
}

func TestSchemaPeerSchemasValidateAsBefore(t *testing.T) {
	schemas := goSDKSchemas(t)
	for k, v := range peerSchemas {
		schemas[k] = v
	}
	for name, schema := range schemas {
		for _, args := range peerArguments {
			var a map[string]any
			if err := json.Unmarshal([]byte(args), &a); err != nil {
				t.Fatal(err)
			}
			wantProblem, wantChecked := oldValidate(t, schema, a)
			v := (&toolSchema{raw: []byte(schema)}).validate(a)
			if v.schema != "" || v.budget != "" {
				t.Fatalf("%s: %s refused: %+v", name, args, v)
			}
			if v.checked != wantChecked || sortedNames(v.problem) != sortedNames(wantProblem) {
				t.Errorf("%s with %s: got (%q, %v), before (%q, %v)", name, args, v.problem, v.checked, wantProblem, wantChecked)
			}
		}
	}
}

// TestValidateArgumentsHostileSchemas is the attack through the stage: a server lists
// the recursive and the exponential schemas beside a normal one. Before the bounds the call of
// "recursive" crashed the test binary (fatal error: stack overflow) and "exponential" ran for
// seconds; now both are refused with -32602 naming the appliance, and the normal tool is still
// checked.
func TestValidateArgumentsHostileSchemas(t *testing.T) {
	tools := `{"tools":[{"name":"recursive","inputSchema":` + recursiveSchema + `},` +
		`{"name":"exponential","inputSchema":` + exponentialSchema(19) + `},` +
		`{"name":"doubling","inputSchema":` + doublingSchema + `},` +
		`{"name":"add","inputSchema":{"type":"object","properties":{"a":{"type":"number"}},"required":["a"]}}]}`
	u := newUpstream(t, listServer(map[string]string{"tools/list": tools}, false))
	h := surfaceHarness(t, u, nil, NewSessions(0), func(f *Flow) { f.ValidateArguments = true })
	sess := jsonHeaders + "Mcp-Session-Id: s1\r\n"
	post(t, h.addr, sess, req(1, "tools/list", `{}`))
	for _, c := range []struct {
		tool, args, reason string
	}{
		{"recursive", `{}`, "input schema of tool recursive refused: $ref cycle at #/$defs/a"},
		{"exponential", `{"x":1}`, "input schema of tool exponential refused: combinator fan-out"},
		{"doubling", nested("c", 40, "{}"), "arguments of doubling refused: validating these arguments would exceed the work budget"},
		{"add", `{"a":"one"}`, "arguments of add do not match its input schema: arguments.a: type is string"},
	} {
		t.Run(c.tool, func(t *testing.T) {
			before := u.calls.Load()
			r := post(t, h.addr, sess, call(2, c.tool, c.args))
			denial(t, r, "2", CodeInvalidParams, ruleValidate)
			if u.calls.Load() != before {
				t.Fatal("the server saw the call")
			}
			// The record is written when the exchange is done, which can be just after the
			// client read its response: wait for it (the deadline only guards against a hang).
			for deadline := time.Now().Add(time.Minute); !hasReason(h.recs(), c.reason); time.Sleep(5 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("no record says %q: %+v", c.reason, h.recs())
				}
			}
		})
	}
	before := u.calls.Load()
	post(t, h.addr, sess, call(3, "add", `{"a":1}`))
	if u.calls.Load() != before+1 {
		t.Fatal("a valid call of a normal tool was refused")
	}
}

func hasReason(recs []*Record, reason string) bool {
	for _, r := range recs {
		if strings.Contains(r.Reason, reason) {
			return true
		}
	}
	return false
}

func TestSchemaOversizeIsRefused(t *testing.T) {
	big := `{"type":"object","description":"` + strings.Repeat("x", maxSchemaBytes) + `"}`
	res := `{"tools":[{"name":"big","inputSchema":` + big + `}]}`
	st := newSchemaStore(0, 0)
	st.learn("k", true, toolSchemas([]byte(res)))
	ts := st.lookup("k", "big")
	if ts == nil {
		t.Fatal("an oversize schema was forgotten: its calls would go unchecked")
	}
	if v := ts.validate(map[string]any{}); !strings.Contains(v.schema, "more than") || len(ts.raw) != 0 {
		t.Fatalf("verdict %+v, %d bytes kept", v, len(ts.raw))
	}
}

// TestSchemaStackBounded validates the deepest evaluation chain the bounds allow on a goroutine
// whose stack may not grow past 4 MiB (runtime/debug.SetMaxStack; the default is 1 GB): if the
// budget did not bound the library's recursion, this would die of "stack overflow". The schema
// chains three subschemas per level of the value, so the recursion is deeper than the value.
func TestSchemaStackBounded(t *testing.T) {
	schema := `{"$defs":{"a":{"allOf":[{"$ref":"#/$defs/b"}]},"b":{"allOf":[{"$ref":"#/$defs/c"}]},` +
		`"c":{"type":"object","properties":{"c":{"$ref":"#/$defs/a"}}}},"$ref":"#/$defs/a"}`
	deepest := 0
	for d := 1; d < maxInstanceDepth; d++ {
		if v := checkWithin(t, schema, nested("c", d, "{}")); v.budget != "" {
			break
		}
		deepest = d
	}
	t.Logf("deepest value that validates: %d levels", deepest)
	if deepest < 10 {
		t.Fatalf("only %d levels validate", deepest)
	}
	if v := checkWithin(t, schema, nested("c", deepest+1, "{}")); v.budget == "" {
		t.Fatalf("one level more: %+v, want a budget refusal", v)
	}
	old := debug.SetMaxStack(4 << 20)
	defer debug.SetMaxStack(old)
	if v := checkWithin(t, schema, nested("c", deepest-1, `{"c":7}`)); !v.checked || v.problem == "" {
		t.Fatalf("verdict %+v: want the deepest value checked and refused", v)
	}
}
