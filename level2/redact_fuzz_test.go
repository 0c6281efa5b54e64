package level2

import (
	"bytes"
	"regexp"
	"slices"
	"testing"

	"mcpintercept/mcp"
	"mcpintercept/policy"
)

// FuzzRedact: whatever message the redactor is given, it never panics; its output is a message
// the strict decoder accepts with the same envelope; every value a path selects is the marker;
// no pattern match survives in scope (keys, strings, numbers' JSON text); everything else is
// byte for byte what came in (checked by walking input and output side by side); and
// redacting again changes nothing. Two rules share one marker, so rewritten keys must be made
// unique; the second pattern matches some of the suffixes that uniqueness tries.
func FuzzRedact(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"key s123 and s9"}]}}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"s1","arguments":{"token":"abc","n":[1,{"token":{"x":"y"}}]}}}`,
		`{"jsonrpc":"2.0","id":"s1","result":{"a\u0073":"s\u0031","requestState":"s2","x":{"token":7}}}`,
		`{"jsonrpc":"2.0","method":"notifications/message","params":{"data":"\ud83d\ude00s42"}}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","arguments":{"pin":1234,"PIN":null,"ok":true}}}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","arguments":{"s1":1,"s2":2,"[R]":3,"[R]-1":4,"s77":{"s3":5}}}}`,
		`{"jsonrpc":"2.0","id":1,"result":{"card":4777123412341234,"n":[77,7.7e77,-0.77],"s5":{"s6":[{"s7":1}]}}}`,
		`{"jsonrpc":"2.0","id":1,"error":{"code":-32077,"message":"s1 failed","data":{"s2":"s3","pin":1}}}`,
		`{"jsonrpc":"2.0","id":1,"method":"m","params":{"s1":1,"s2":2,"_meta":{"s3":"s4"}}}`,
		`{ "jsonrpc" : "2.0" , "id" : 1 , "result" : { "x" : [ 1 , 2 ] , "s1" : { "s2" : 1 } } }`,
	} {
		f.Add([]byte(s), false)
		f.Add([]byte(s), true)
	}
	reds := fuzzRedactions(f)
	f.Fuzz(func(t *testing.T, raw []byte, request bool) {
		if len(raw) > 1<<16 {
			return
		}
		msgs, batch, err := mcp.Decode(raw, mcp.DecodeOptions{})
		if err != nil || batch {
			return
		}
		m := msgs[0]
		scope := "result"
		switch {
		case request:
			scope = "params"
		case m.Kind == mcp.KindError:
			scope = "error"
		}
		out, hits, n := redactJSON(m.Raw, reds, scope)
		if n == 0 {
			if !bytes.Equal(out, m.Raw) || len(hits) != 0 {
				t.Fatal("no redaction, yet the message changed")
			}
		}
		got, err := mcp.DecodeMessage(out, mcp.DecodeOptions{})
		if err != nil {
			t.Fatalf("redacted message does not decode: %v\n%s\nfrom\n%s", err, out, m.Raw)
		}
		if !bytes.Equal(got.ID, m.ID) || got.Method != m.Method || got.Kind != m.Kind ||
			(m.Error != nil && got.Error.Code != m.Error.Code) {
			t.Fatalf("envelope changed:\n%s\n%s", m.Raw, out)
		}
		c := &redactCheck{t: t, in: m.Raw, out: out, reds: reds, scope: scope}
		c.value(0, 0)
		c.survivors(0)
		out2, _, _ := redactJSON(out, reds, scope)
		if !bytes.Equal(out, out2) {
			t.Fatalf("redaction is not stable:\n%s\n%s", out, out2)
		}
	})
}

func fuzzRedactions(f *testing.F) []*policy.Redaction {
	mk := func(rule string, pattern string, paths ...string) *policy.Redaction {
		r := &policy.Redaction{Rule: rule, Marker: "[R]", Patterns: []*regexp.Regexp{regexp.MustCompile(pattern)}}
		for _, p := range paths {
			pp, err := policy.ParsePath(p)
			if err != nil {
				f.Fatal(err)
			}
			r.Paths = append(r.Paths, pp)
		}
		return r
	}
	return []*policy.Redaction{
		mk("a", `s[0-9]+`, "$..token", "$.result.x", "$.params.arguments.n[1]", "$..pin"),
		mk("b", `77+`, "$..ok", "$.error.data.pin"),
	}
}

// redactCheck walks a message and its redaction side by side.
type redactCheck struct {
	t       *testing.T
	in, out []byte
	reds    []*policy.Redaction
	scope   string
	loc     []policy.PathSeg
}

const fuzzMarker = `"[R]"`

func (c *redactCheck) fail(format string, args ...any) {
	c.t.Helper()
	c.t.Fatalf("at %s: "+format+"\nin:  %s\nout: %s", append(append([]any{policy.FormatPath(c.loc)}, args...), c.in, c.out)...)
}

func (c *redactCheck) matches(b []byte) bool {
	for _, r := range c.reds {
		for _, re := range r.Patterns {
			if re.Match(b) {
				return true
			}
		}
	}
	return false
}

func (c *redactCheck) pathSelects() bool {
	if len(c.loc) == 2 && c.loc[0].Key == "error" && c.loc[1].Key == "code" {
		return false
	}
	for _, r := range c.reds {
		for _, p := range r.Paths {
			if p.Match(c.loc) {
				return true
			}
		}
	}
	return false
}

// inScope: what patterns may change at c.loc (its value; its key when key is set).
func (c *redactCheck) inScope(key bool) bool {
	if len(c.loc) < 2 || c.loc[0].Key != c.scope || c.loc[0].Index >= 0 {
		return false
	}
	exempt := map[string][]string{
		"params": {"name", "uri", "_meta", "requestState"},
		"result": {"requestState", "resultType"},
		"error":  {"code"},
	}[c.scope]
	if slices.Contains(exempt, c.loc[1].Key) {
		return false
	}
	if key && len(c.loc) == 2 {
		switch c.scope {
		case "params":
			return !mcp.ScopeParams.Reads(c.loc[1].Key)
		case "error":
			return !mcp.ScopeError.Reads(c.loc[1].Key)
		}
	}
	return true
}

func (c *redactCheck) same(a0, a1, b0, b1 int, what string) {
	c.t.Helper()
	if !bytes.Equal(c.in[a0:a1], c.out[b0:b1]) {
		c.fail("%s changed: %q -> %q", what, c.in[a0:a1], c.out[b0:b1])
	}
}

// value compares the values at i (input) and j (output) and returns their ends.
func (c *redactCheck) value(i, j int) (int, int) {
	ie, je := mcp.SkipValue(c.in, i), mcp.SkipValue(c.out, j)
	top := len(c.loc) == 1 && c.loc[0].Index < 0
	keepShape := top && (c.loc[0].Key == "params" || c.loc[0].Key == "error")
	if len(c.loc) > 0 && c.pathSelects() && !keepShape {
		if string(c.out[j:je]) != fuzzMarker {
			c.fail("a path selects %s, out has %s", c.in[i:ie], c.out[j:je])
		}
		return ie, je
	}
	if bytes.Equal(c.in[i:ie], c.out[j:je]) {
		return ie, je
	}
	switch b := c.in[i]; {
	case b == '{' && c.out[j] == '{':
		c.object(i, j, len(c.loc) == 0)
	case b == '[' && c.out[j] == '[':
		c.array(i, j)
	case b == '"' && c.out[j] == '"':
		if !c.inScope(false) || !c.matches([]byte(mcp.Unquote(c.in[i:ie]))) {
			c.fail("string changed without a match: %s -> %s", c.in[i:ie], c.out[j:je])
		}
	case b == '-' || ('0' <= b && b <= '9'):
		if !c.inScope(false) || !c.matches(c.in[i:ie]) || string(c.out[j:je]) != fuzzMarker {
			c.fail("number changed: %s -> %s", c.in[i:ie], c.out[j:je])
		}
	default:
		c.fail("value changed: %s -> %s", c.in[i:ie], c.out[j:je])
	}
	return ie, je
}

func (c *redactCheck) object(i, j int, top bool) {
	in, out := objectMembers(c.in, i), objectMembers(c.out, j)
	if len(in) != len(out) {
		c.fail("%d members became %d", len(in), len(out))
	}
	pi, pj := i+1, j+1
	for k := range in {
		a, b := in[k], out[k]
		c.same(pi, a.ks, pj, b.ks, "space before a key")
		c.loc = append(c.loc, policy.PathSeg{Key: a.key, Index: -1})
		if !bytes.Equal(c.in[a.ks:a.ke], c.out[b.ks:b.ke]) {
			if top || !c.inScope(true) || !c.matches([]byte(a.key)) {
				c.fail("key changed without a match: %s -> %s", c.in[a.ks:a.ke], c.out[b.ks:b.ke])
			}
		}
		vi, vj := mcp.SkipSpace(c.in, mcp.SkipSpace(c.in, a.ke)+1), mcp.SkipSpace(c.out, mcp.SkipSpace(c.out, b.ke)+1)
		c.same(a.ke, vi, b.ke, vj, "colon")
		if top && (a.key == "jsonrpc" || a.key == "id" || a.key == "method") {
			c.same(vi, a.ve, vj, b.ve, "envelope")
		} else {
			c.value(vi, vj)
		}
		c.loc = c.loc[:len(c.loc)-1]
		pi, pj = a.ve, b.ve
	}
	c.same(pi, mcp.SkipValue(c.in, i), pj, mcp.SkipValue(c.out, j), "end of object")
}

func (c *redactCheck) array(i, j int) {
	in, out := mcp.Elements(c.in[i:]), mcp.Elements(c.out[j:])
	if len(in) != len(out) {
		c.fail("%d elements became %d", len(in), len(out))
	}
	pi, pj := i+1, j+1
	for k := range in {
		c.same(pi, i+in[k][0], pj, j+out[k][0], "space before an element")
		c.loc = append(c.loc, policy.PathSeg{Index: k})
		c.value(i+in[k][0], j+out[k][0])
		c.loc = c.loc[:len(c.loc)-1]
		pi, pj = i+in[k][1], j+out[k][1]
	}
	c.same(pi, mcp.SkipValue(c.in, i), pj, mcp.SkipValue(c.out, j), "end of array")
}

// survivors walks the output alone: nothing in pattern scope still matches.
func (c *redactCheck) survivors(j int) int {
	b := c.out
	je := mcp.SkipValue(b, j)
	switch b[j] {
	case '{':
		for _, m := range objectMembers(b, j) {
			c.loc = append(c.loc, policy.PathSeg{Key: m.key, Index: -1})
			if c.inScope(true) && c.matches([]byte(m.key)) {
				c.fail("key %q still matches", m.key)
			}
			c.survivors(mcp.SkipSpace(b, mcp.SkipSpace(b, m.ke)+1))
			c.loc = c.loc[:len(c.loc)-1]
		}
	case '[':
		for k, e := range mcp.Elements(b[j:je]) {
			c.loc = append(c.loc, policy.PathSeg{Index: k})
			c.survivors(j + e[0])
			c.loc = c.loc[:len(c.loc)-1]
		}
	case '"':
		if c.inScope(false) && c.matches([]byte(mcp.Unquote(b[j:je]))) {
			c.fail("string %s still matches", b[j:je])
		}
	case 't', 'f', 'n':
	default:
		if c.inScope(false) && c.matches(b[j:je]) {
			c.fail("number %s still matches", b[j:je])
		}
	}
	return je
}
