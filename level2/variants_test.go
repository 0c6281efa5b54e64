package level2

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode"

	"mcpintercept/mcp"
	"mcpintercept/policy"
)

// Folded duplicate keys deep inside params.arguments: encoding/json fills one struct field from
// both, and which one wins differs by peer, so the strict decoder refuses them at any depth.
func TestDecodeFoldedDuplicateDeepInArguments(t *testing.T) {
	for _, c := range []struct{ name, args string }{
		{"ascii at depth 3", `{"a":{"b":{"path":"/ok","PATH":"/etc/passwd"}}}`},
		{"long s at depth 3", `{"a":{"b":{"secret":"x","ſecret":"y"}}}`},
		{"kelvin in an array element", `{"a":[{"b":{"kind":"x","Kind":"y"}}]}`},
		{"escaped variant", `{"a":{"b":{"path":"/ok","P\u0041TH":"/etc"}}}`},
		{"many keys, then a variant", `{"a":{"b":{"k0":0,"k1":1,"k2":2,"k3":3,"k4":4,"k5":5,"k6":6,"k7":7,"k8":8,"k9":9,"k10":10,"k11":11,"k12":12,"k13":13,"k14":14,"k15":15,"k16":16,"path":1,"pAth":2}}}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","arguments":` + c.args + `}}`
			if _, err := mcp.DecodeMessage([]byte(body), mcp.DecodeOptions{}); !errors.Is(err, mcp.ErrCaseVariantKey) {
				t.Fatalf("DecodeMessage: %v, want ErrCaseVariantKey", err)
			}
		})
	}
}

// variantTarget is a server's view of the arguments, decoded with encoding/json the way a Go
// tool handler receives them.
type variantTarget struct {
	Path  string `json:"path"`
	Mask  string `json:"mask"`
	Token string `json:"token"`
	A     *struct {
		B    string `json:"b"`
		Kind string `json:"kind"`
	} `json:"a"`
	Files []struct {
		Path string `json:"path"`
	} `json:"files"`
}

// variantRules read every field of variantTarget.
const variantRules = `mcp.arguments.path.startsWith("/etc") || mcp.arguments.mask == "x" ||
	has(mcp.arguments.token) || mcp.arguments.a.b == "y" || mcp.arguments.a.kind == "z" ||
	mcp.arguments.files[0].path == "w"`

func variantSet(t testing.TB) *policy.Set {
	t.Helper()
	set, err := policy.Compile([]policy.RuleSpec{{Name: "r", When: variantRules, Action: policy.RuleDeny}})
	if err != nil {
		t.Fatal(err)
	}
	return set
}

// spellings returns every spelling of key whose runes are in the fold orbits of key's runes
// (what encoding/json may match), and spellings with one rune replaced by a look-alike outside
// the orbit (what it must not).
func spellings(key string) []string {
	out := []string{""}
	for _, r := range key {
		var next []string
		for _, alt := range orbit(r) {
			for _, prefix := range out {
				next = append(next, prefix+string(alt))
			}
		}
		out = next
	}
	lookalike := map[rune][]rune{'a': {'а', 'ａ'}, 'p': {'р'}, 's': {'ѕ', 'ß'}, 'k': {'κ'}, 't': {'τ'}, 'h': {'һ'}, 'e': {'е', 'é'}}
	for i, r := range []rune(key) {
		for _, l := range lookalike[r] {
			rs := []rune(key)
			rs[i] = l
			out = append(out, string(rs))
		}
	}
	return out
}

func orbit(r rune) []rune {
	out := []rune{r}
	for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
		out = append(out, f)
	}
	return out
}

// TestCaseVariantDifferential: for every spelling of every key a rule reads, at its position,
// encoding/json itself says whether a Go server would read it as that key; caseVariant must
// refuse exactly the spellings it reads that are not the key.
func TestCaseVariantDifferential(t *testing.T) {
	paths := variantSet(t).ArgumentPaths()
	cases := []struct {
		key  string
		wrap func(k string) string // arguments with k at the key's position, holding "v"
		read func(*variantTarget) string
	}{
		{"path", func(k string) string { return `{"` + k + `":"v"}` }, func(v *variantTarget) string { return v.Path }},
		{"mask", func(k string) string { return `{"` + k + `":"v"}` }, func(v *variantTarget) string { return v.Mask }},
		{"token", func(k string) string { return `{"` + k + `":"v"}` }, func(v *variantTarget) string { return v.Token }},
		{"b", func(k string) string { return `{"a":{"` + k + `":"v"}}` }, func(v *variantTarget) string {
			if v.A == nil {
				return ""
			}
			return v.A.B
		}},
		{"kind", func(k string) string { return `{"a":{"x":1,"` + k + `":"v"}}` }, func(v *variantTarget) string {
			if v.A == nil {
				return ""
			}
			return v.A.Kind
		}},
		{"path", func(k string) string { return `{"files":[{"path":"/"},{"` + k + `":"v"}]}` }, func(v *variantTarget) string {
			if len(v.Files) < 2 {
				return ""
			}
			return v.Files[1].Path
		}},
	}
	variants := map[string]bool{}
	for _, c := range cases {
		for _, sp := range spellings(c.key) {
			args := c.wrap(sp)
			var v variantTarget
			if err := json.Unmarshal([]byte(args), &v); err != nil {
				t.Fatalf("%s: %v", args, err)
			}
			readAsKey := c.read(&v) == "v"
			why, got := caseVariant([]byte(args), paths)
			if want := readAsKey && sp != c.key; got != want {
				t.Errorf("%s: caseVariant = %v (%q); encoding/json reads it as %q: %v", args, got, why, c.key, readAsKey)
			}
			if got {
				variants[sp] = true
				if !strings.Contains(why, "a rule reads") || !strings.Contains(why, `"`+c.key+`"`) {
					t.Errorf("%s: reason %q", args, why)
				}
			}
		}
	}
	// The premise: encoding/json does read these, so the check is not vacuous.
	for _, sp := range []string{"PATH", "Path", "maſk", "MAS\u212a", "\u212aind", "ToKeN", "B"} {
		if !variants[sp] {
			t.Errorf("spelling %q was not found a variant", sp)
		}
	}
}

// The reason quotes the key and where it is, and a message whose arguments spell a read key
// exactly passes.
func TestArgumentCaseVariant(t *testing.T) {
	set := variantSet(t)
	for _, c := range []struct {
		body string
		want string
	}{
		{`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"read","arguments":{"PATH":"/etc/passwd"}}}`,
			`argument key "PATH" is a case variant of "path", which a rule reads`},
		{`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"read","arguments":{"a":{"\u212aIND":"z"}}}}`,
			`argument key "\u212aIND" (in arguments.a) is a case variant of "kind", which a rule reads`},
		{`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"read","arguments":{"path":"/etc/passwd","a":{"kind":"z"},"other":{"PATH":1}}}}`, ""},
		{`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"read"}}`, ""},
	} {
		m, err := mcp.DecodeMessage([]byte(c.body), mcp.DecodeOptions{})
		if err != nil {
			t.Fatal(err)
		}
		why, bad := argumentCaseVariant(m, set)
		if bad != (c.want != "") || why != c.want {
			t.Errorf("%s: (%q, %v), want %q", c.body, why, bad, c.want)
		}
	}
}

// BenchmarkCaseVariant: the check of a tools/call's arguments against a few read keys.
func BenchmarkCaseVariant(b *testing.B) {
	paths := variantSet(b).ArgumentPaths()
	args := []byte(`{"path":"/srv/data/file.txt","mode":"r","a":{"b":"y","kind":"z","extra":[1,2,3]},"files":[{"path":"/a"},{"path":"/b"}],"text":"` + strings.Repeat("x", 512) + `"}`)
	b.SetBytes(int64(len(args)))
	b.ReportAllocs()
	for b.Loop() {
		if _, bad := caseVariant(args, paths); bad {
			b.Fatal("variant")
		}
	}
}
