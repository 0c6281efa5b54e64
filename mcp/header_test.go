package mcp

import (
	"errors"
	"testing"
)

func TestDecodeHeaderValue(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want string
		err  bool
	}{
		{name: "plain ascii", in: "get_weather", want: "get_weather"},
		{name: "empty", in: "", want: ""},
		{name: "encoded utf-8", in: "=?base64?5aSp5rCX?=", want: "天気"},
		{name: "encoded look-alike of the sentinel", in: "=?base64?PT9iYXNlNjQ/bGl0ZXJhbD89?=", want: "=?base64?literal?="},
		{name: "encoded leading space", in: "=?base64?IHg=?=", want: " x"},
		{name: "empty payload", in: "=?base64??=", want: ""},
		{name: "markers are case-sensitive", in: "=?BASE64?eA==?=", want: "=?BASE64?eA==?="},
		{name: "prefix only is plain", in: "=?base64?abc", want: "=?base64?abc"},
		{name: "invalid base64", in: "=?base64?***?=", err: true},
		{name: "missing padding", in: "=?base64?eA?=", want: "x"},
		{name: "bad padding", in: "=?base64?eA=?=", err: true},
		{name: "url-safe alphabet", in: "=?base64?-_8=?=", err: true},
		{name: "not utf-8", in: "=?base64?/w==?=", err: true},
		{name: "line break inside the payload", in: "=?base64?ZGVs\nZXRl?=", err: true},
		{name: "carriage return only (fuzz regression)", in: "=?base64?\r?=", err: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := DecodeHeaderValue(tt.in)
			if (err != nil) != tt.err {
				t.Fatalf("err = %v, want error %v", err, tt.err)
			}
			if err != nil {
				var he *HeaderValueError
				if !errors.As(err, &he) {
					t.Errorf("err is %T, want *HeaderValueError", err)
				}
				return
			}
			if got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

// TestRedactURI: issue 8 case 8. For resources/read, Mcp-Name is the resource URI; its userinfo,
// query and fragment never reach Info (and so no log, label or rule).
func TestRedactURI(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{name: "userinfo, signed query, fragment", in: "https://user:pass@host/x?X-Amz-Signature=abc&access_token=def#frag", want: "https://host/x"},
		{name: "plain tool name", in: "get_weather", want: "get_weather"},
		{name: "tool name with a question mark is not a URI", in: "what?now", want: "what?now"},
		{name: "clean uri", in: "file:///home/u/notes.txt", want: "file:///home/u/notes.txt"},
		{name: "opaque uri keeps its @", in: "mailto:a@b.example", want: "mailto:a@b.example"},
		{name: "custom scheme with query", in: "db://prod/users?password=hunter2", want: "db://prod/users"},
		{name: "port kept", in: "http://u@h:8080/p#x", want: "http://h:8080/p"},
		{name: "@ in path of a parseable uri kept", in: "https://host/users/@me", want: "https://host/users/@me"},
		{name: "unparseable: cut to the last @", in: "https://user:p/ss@ho st/x?t=1", want: "https://ho st/x"},
		{name: "bytes kept as sent", in: "https://h/a%20b/ü", want: "https://h/a%20b/ü"},
		{name: "empty", in: "", want: ""},
		{name: "starts with a colon", in: ":x?y", want: ":x?y"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := RedactURI(tt.in); got != tt.want {
				t.Errorf("RedactURI(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestPathOf(t *testing.T) {
	tests := []struct{ name, target, want string }{
		{name: "origin form", target: "/mcp?x=1", want: "/mcp"},
		{name: "fragment", target: "/mcp#f", want: "/mcp"},
		{name: "absolute form", target: "http://h:80/a/b?q", want: "/a/b"},
		{name: "absolute form without path", target: "https://h", want: "/"},
		{name: "authority form", target: "h:443", want: ""},
		{name: "asterisk", target: "*", want: "*"},
		{name: "empty", target: "", want: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := PathOf(tt.target); got != tt.want {
				t.Errorf("PathOf(%q) = %q, want %q", tt.target, got, tt.want)
			}
		})
	}
}

// header is the shape of a framing package's header line.
type header struct{ Name, Value string }

func TestAccepts(t *testing.T) {
	sse := []string{"text/event-stream", "text/*", "*/*"}
	tests := []struct {
		name    string
		headers []header
		want    bool
	}{
		{name: "listed", headers: []header{{"Accept", "application/json, text/event-stream"}}, want: true},
		{name: "second line", headers: []header{{"Accept", "application/json"}, {"accept", "text/event-stream"}}, want: true},
		{name: "wildcard with q", headers: []header{{"ACCEPT", "TEXT/*; q=0.5"}}, want: true},
		{name: "q=0 is not acceptable", headers: []header{{"Accept", "text/event-stream;q=0.000"}}, want: false},
		{name: "other header", headers: []header{{"Content-Type", "text/event-stream"}}, want: false},
		{name: "substring is not a range", headers: []header{{"Accept", "application/x-text/event-streamish"}}, want: false},
		{name: "non-ASCII fold is not a match", headers: []header{{"Acceptſ", "*/*"}}, want: false},
		{name: "none", want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Accepts(tt.headers, sse...); got != tt.want {
				t.Errorf("Accepts(%v) = %v, want %v", tt.headers, got, tt.want)
			}
		})
	}
}

type store map[any]any

func (s store) Set(k, v any)  { s[k] = v }
func (s store) Get(k any) any { return s[k] }

func TestInfoOf(t *testing.T) {
	s := store{}
	if InfoOf(s) != nil {
		t.Fatal("InfoOf an empty exchange is not nil")
	}
	s[struct{}{}] = &Info{Method: "GET"} // a key of another package is not Info's
	if InfoOf(s) != nil {
		t.Fatal("InfoOf read another key")
	}
	want := &Info{Method: "POST", ProtocolVersion: "2026-07-28"}
	SetInfo(s, want)
	if got := InfoOf(s); got != want || !got.Version().ServerChecksHeaders() {
		t.Fatalf("InfoOf = %+v, want %+v", got, want)
	}
}
