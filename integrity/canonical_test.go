package integrity

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/gowebpki/jcs"

	"mcpintercept/mcp"
)

func canonHash(t *testing.T, kind Kind, raw string) string {
	t.Helper()
	c, _, err := Canonical(kind, json.RawMessage(raw))
	if err != nil {
		t.Fatalf("Canonical(%s): %v", raw, err)
	}
	return hashOf(c).String()
}

func TestCanonicalStable(t *testing.T) {
	base := `{"name":"echo","description":"Echo the text.","inputSchema":{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}}`
	same := []string{
		// key order, whitespace
		`{ "inputSchema" : { "required" : [ "text" ], "properties" : { "text" : { "type" : "string" } }, "type" : "object" },
		   "description" : "Echo the text.", "name" : "echo" }`,
		// escapes in keys and values
		`{"n\u0061me":"\u0065cho","description":"Echo the text\u002e","inputSchema":{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}}`,
		// _meta and unknown members are not part of it; a member spelt in another case is unknown
		`{"name":"echo","_meta":{"x":1},"description":"Echo the text.","inputSchema":{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}}`,
		`{"name":"echo","extra":[1,2,3],"Title":"x","description":"Echo the text.","inputSchema":{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}}`,
	}
	want := canonHash(t, KindTool, base)
	for _, s := range same {
		if got := canonHash(t, KindTool, s); got != want {
			t.Errorf("hash of %s = %s, want %s", s, got, want)
		}
	}
	// numbers are canonical too
	if a, b := canonHash(t, KindTool, `{"name":"n","inputSchema":{"maximum":100}}`), canonHash(t, KindTool, `{"name":"n","inputSchema":{"maximum":1e2}}`); a != b {
		t.Errorf("1e2 and 100 hash differently")
	}
	differ := []string{
		`{"name":"echo","description":"Echo the text!","inputSchema":{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}}`,
		`{"name":"echo","description":"Echo the text.","inputSchema":{"type":"object","properties":{"text":{"type":"string"}},"required":[]}}`,
		`{"name":"echo","title":"Echo","description":"Echo the text.","inputSchema":{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}}`,
		`{"name":"echo","description":"Echo the text.","inputSchema":{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]},"annotations":{"readOnlyHint":true}}`,
		`{"name":"echo","description":"Echo the text.","inputSchema":{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]},"icons":[{"src":"https://x/i.png"}]}`,
		`{"name":"echo","description":"Echo the text.","inputSchema":{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]},"execution":{"taskSupport":"optional"}}`,
		`{"name":"echo","description":"Echo the text.","inputSchema":{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]},"outputSchema":{"type":"object"}}`,
		`{"name":"echo2","description":"Echo the text.","inputSchema":{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}}`,
	}
	for _, s := range differ {
		if got := canonHash(t, KindTool, s); got == want {
			t.Errorf("hash of %s equals the base's", s)
		}
	}
}

func TestCanonicalForm(t *testing.T) {
	raw := `{"title":"T","name":"echo","description":"a\u00e9\/b","_meta":{"k":"v"},"inputSchema":{"b":1.50,"a":true}}`
	canon, fields, err := Canonical(KindTool, json.RawMessage(raw))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"description":"aé/b","inputSchema":{"a":true,"b":1.5},"name":"echo","title":"T"}`
	if string(canon) != want {
		t.Errorf("canon = %s, want %s", canon, want)
	}
	if len(fields) != 4 {
		t.Errorf("fields = %v, want 4 of them", fields)
	}
	for name, c := range fields {
		v, ok := mcp.Member([]byte(raw), name)
		if !ok {
			t.Fatalf("field %s not in the entry", name)
		}
		j, err := jcs.Transform(v)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(j, c) {
			t.Errorf("field %s = %s, want %s", name, c, j)
		}
	}
	if _, ok := fields["_meta"]; ok {
		t.Error("_meta is a field")
	}
}

func TestCanonicalKinds(t *testing.T) {
	// prompt: arguments define it, annotations do not
	p1 := canonHash(t, KindPrompt, `{"name":"p","arguments":[{"name":"a"}]}`)
	if p1 == canonHash(t, KindPrompt, `{"name":"p","arguments":[{"name":"b"}]}`) {
		t.Error("prompt arguments not hashed")
	}
	if p1 != canonHash(t, KindPrompt, `{"name":"p","arguments":[{"name":"a"}],"annotations":{"x":1}}`) {
		t.Error("prompt annotations hashed")
	}
	// template: uriTemplate and mimeType define it, inputSchema does not
	t1 := canonHash(t, KindTemplate, `{"uriTemplate":"file:///{path}","name":"f","mimeType":"text/plain"}`)
	if t1 == canonHash(t, KindTemplate, `{"uriTemplate":"file:///{p}","name":"f","mimeType":"text/plain"}`) {
		t.Error("uriTemplate not hashed")
	}
	if t1 == canonHash(t, KindTemplate, `{"uriTemplate":"file:///{path}","name":"f","mimeType":"text/html"}`) {
		t.Error("mimeType not hashed")
	}
	if t1 != canonHash(t, KindTemplate, `{"uriTemplate":"file:///{path}","name":"f","mimeType":"text/plain","inputSchema":{}}`) {
		t.Error("template inputSchema hashed")
	}
	// the same entry as a tool and as a prompt: the tool's description counts for both, but a
	// tool's inputSchema only for the tool
	if canonHash(t, KindTool, `{"name":"x","inputSchema":{}}`) == canonHash(t, KindTool, `{"name":"x"}`) {
		t.Error("tool inputSchema not hashed")
	}
	if canonHash(t, KindPrompt, `{"name":"x","inputSchema":{}}`) != canonHash(t, KindPrompt, `{"name":"x"}`) {
		t.Error("prompt inputSchema hashed")
	}
}

func TestCanonicalErrors(t *testing.T) {
	deep := strings.Repeat(`{"a":`, 70) + "1" + strings.Repeat("}", 70)
	big := `{"name":"x","description":"` + strings.Repeat("a", maxDefSize) + `"}`
	cases := []struct {
		kind Kind
		raw  string
		is   error
	}{
		{KindTool, `{"name":"x","name":"y"}`, mcp.ErrDuplicateKey},
		{KindTool, `{"name":"x","Name":"y"}`, mcp.ErrCaseVariantKey},
		{KindTool, `{"name":"x","inputSchema":{"a":1,"a":2}}`, mcp.ErrDuplicateKey},
		{KindTool, `["name"]`, errNotObject},
		{KindTool, `"x"`, errNotObject},
		{KindTool, `{"name":"x"`, mcp.ErrSyntax},
		{KindTool, `{"name":"x"} {}`, mcp.ErrSyntax},
		{KindTool, "{\"name\":\"\xff\"}", mcp.ErrInvalidUTF8},
		{KindTool, `{"name":"\ud800"}`, mcp.ErrLoneSurrogate},
		{KindTool, `{"inputSchema":` + deep + `}`, mcp.ErrTooDeep},
		{KindTool, big, nil},
		{"widget", `{"name":"x"}`, nil},
		{KindTool, `{"name":"x","inputSchema":{"max":1e400}}`, nil},
	}
	for _, c := range cases {
		_, _, err := Canonical(c.kind, json.RawMessage(c.raw))
		if err == nil {
			t.Errorf("Canonical(%.60s) accepted it", c.raw)
			continue
		}
		if c.is != nil && !errors.Is(err, c.is) {
			t.Errorf("Canonical(%.60s) = %v, want %v", c.raw, err, c.is)
		}
	}
}

func TestDiffFields(t *testing.T) {
	fs := func(raw string) []fieldSum {
		_, fv, err := canonical(KindTool, []byte(raw))
		if err != nil {
			t.Fatal(err)
		}
		return sumFields(fv)
	}
	a := fs(`{"name":"e","description":"one","inputSchema":{"type":"object"}}`)
	b := fs(`{"name":"e","description":"two","inputSchema":{"type":"object"},"title":"T"}`)
	c := fs(`{"name":"e","description":"one"}`)
	check := func(got []string, want ...string) {
		t.Helper()
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("diff = %v, want %v", got, want)
		}
	}
	check(diffFields(a, b), "description", "title")
	check(diffFields(b, a), "description", "title")
	check(diffFields(a, c), "inputSchema")
	check(diffFields(a, a))
	check(diffFields(nil, c), "description", "name")
	// a field's hash is SHA-256 of its canonical bytes
	if h, ok := fieldSumOf(a, uint8(fieldOf(KindTool, "description"))); !ok || h != sha256.Sum256([]byte(`"one"`)) {
		t.Errorf("description's field hash = %x", h)
	}
}
