package audit

import (
	"bytes"
	"testing"

	"github.com/gowebpki/jcs"
)

var canonCases = []struct {
	in   string
	want bool
}{
	{`{"a":"x","b":1}`, true},
	{`{}`, true},
	{`[]`, true},
	{`[1,-2,0,"s",true,false,null,{},[]]`, true},
	{`{"a":{"b":[{"c":null}]},"d":123456789012345}`, true},
	{`"tab\there \"q\" \\ \u001f \u0000 é ☃ 😀 \u007f"`, false}, // \u007f: JCS writes DEL as it is
	{"\"tab\\there \\\"q\\\" \\\\ \\u001f \\u0000 é ☃ 😀 \x7f/\"", true},
	{`{"b":1,"a":2}`, false},
	{`{"a":1,"a":2}`, false},
	{`{ "a":1}`, false},
	{`{"a": 1}`, false},
	{`[1, 2]`, false},
	{` 1`, false},
	{`1 `, false},
	{`1.0`, false},
	{`1e3`, false},
	{`-0`, false},
	{`01`, false},
	{`1234567890123456`, false},
	{`"\u0041"`, false},
	{`"\/"`, false},
	{`"\u000a"`, false},
	{`"\u001F"`, false},
	{`{"\n":1}`, false},
	{`{"😀":1,"":2}`, false},
	{"\"\xff\"", false},
	{"\"\xed\xa0\x80\"", false},
	{`{"a":1,}`, false},
	{`[1,]`, false},
	{`[`, false},
	{`{"a"}`, false},
	{`tru`, false},
	{`nul`, false},
	{``, false},
	{`{"a":1}{}`, false},
	{`{"A":1,"_":2,"a":3,"é":4}`, true},
}

func TestIsCanonicalJSON(t *testing.T) {
	for _, tt := range canonCases {
		got := isCanonicalJSON([]byte(tt.in))
		if got != tt.want {
			t.Errorf("isCanonicalJSON(%q) = %v, want %v", tt.in, got, tt.want)
		}
		if got {
			if out, err := jcs.Transform([]byte(tt.in)); err != nil || !bytes.Equal(out, []byte(tt.in)) {
				t.Errorf("%q is not what jcs.Transform makes of it: %q, %v", tt.in, out, err)
			}
		}
	}
	deep := bytes.Repeat([]byte("["), maxCanonDepth+1)
	deep = append(deep, bytes.Repeat([]byte("]"), maxCanonDepth+1)...)
	if isCanonicalJSON(deep) {
		t.Error("nesting past maxCanonDepth is not left to jcs")
	}
	if !isCanonicalJSON(deep[1 : len(deep)-1]) {
		t.Error("nesting of maxCanonDepth is not checked")
	}
	doc := []byte(canonCases[4].in)
	if n := testing.AllocsPerRun(100, func() { isCanonicalJSON(doc) }); n != 0 {
		t.Errorf("isCanonicalJSON allocates %v times", n)
	}
}

// FuzzIsCanonicalJSON is differential: whatever isCanonicalJSON accepts,
// jcs.Transform accepts and returns unchanged.
func FuzzIsCanonicalJSON(f *testing.F) {
	for _, tt := range canonCases {
		f.Add([]byte(tt.in))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if !isCanonicalJSON(b) {
			return
		}
		out, err := jcs.Transform(b)
		if err != nil || !bytes.Equal(out, b) {
			t.Fatalf("isCanonicalJSON accepted %q; jcs.Transform gives %q, %v", b, out, err)
		}
	})
}

// prepare keeps canonical arguments as they are, in its own copy, and
// canonicalizes the rest.
func TestPrepareArguments(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{`{"a":"x","b":1}`, `{"a":"x","b":1}`},
		{`{ "b": 1, "a": "x" }`, `{"a":"x","b":1}`},
		{`{"n":1.50}`, `{"n":1.5}`},
		{`  `, ``},
	} {
		r := sample(0)
		r.Arguments = []byte(tt.in)
		rec, err := prepare(r)
		if err != nil {
			t.Fatal(err)
		}
		if string(rec.Arguments) != tt.want {
			t.Fatalf("prepare(%q) arguments %q, want %q", tt.in, rec.Arguments, tt.want)
		}
		if len(rec.Arguments) > 0 && &rec.Arguments[0] == &r.Arguments[0] {
			t.Fatalf("prepare(%q) shares the caller's buffer", tt.in)
		}
	}
}
