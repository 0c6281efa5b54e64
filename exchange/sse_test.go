package exchange

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// fields is an Event without Raw, for comparing what was parsed.
type fields struct {
	Type, Data, ID string
	HasData, HasID bool
	Retry          int64
	HasRetry       bool
	Comments       []string
}

func fieldsOf(evs []Event) []fields {
	var out []fields
	for _, e := range evs {
		out = append(out, fields{e.Type, e.Data, e.ID, e.HasData, e.HasID, e.Retry, e.HasRetry, e.Comments})
	}
	return out
}

func rawsOf(evs []Event) []string {
	var out []string
	for _, e := range evs {
		out = append(out, string(e.Raw))
	}
	return out
}

func feedAll(t testing.TB, p *SSEParser, chunks ...string) []Event {
	t.Helper()
	var out []Event
	for _, c := range chunks {
		evs, err := p.Feed([]byte(c))
		if err != nil {
			t.Fatalf("Feed: %v", err)
		}
		out = append(out, evs...)
	}
	return out
}

func TestSSE(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    []fields
		raws    []string
		pending string
	}{
		{
			name: "LF",
			in:   "event: message\nid: 1\ndata: {\"a\":1}\n\n",
			want: []fields{{Type: "message", ID: "1", HasID: true, Data: `{"a":1}`, HasData: true}},
			raws: []string{"event: message\nid: 1\ndata: {\"a\":1}\n\n"},
		},
		{
			name: "CRLF",
			in:   "data: a\r\ndata: b\r\n\r\ndata: c\r\n\r\n",
			want: []fields{{Data: "a\nb", HasData: true}, {Data: "c", HasData: true}},
			raws: []string{"data: a\r\ndata: b\r\n\r\n", "data: c\r\n\r\n"},
		},
		{
			name: "CR only",
			in:   "data: a\rdata: b\r\rid: 7\rdata: c\r\r",
			want: []fields{{Data: "a\nb", HasData: true}, {ID: "7", HasID: true, Data: "c", HasData: true}},
			raws: []string{"data: a\rdata: b\r\r", "id: 7\rdata: c\r\r"},
		},
		{
			name: "mixed line ends",
			in:   "data: a\rdata: b\ndata: c\r\n\n",
			want: []fields{{Data: "a\nb\nc", HasData: true}},
		},
		{
			name: "comments and keepalive",
			in:   ": keepalive\n\n:\n\n: x\ndata: d\n\n",
			want: []fields{{Comments: []string{" keepalive"}}, {Comments: []string{""}}, {Comments: []string{" x"}, Data: "d", HasData: true}},
			raws: []string{": keepalive\n\n", ":\n\n", ": x\ndata: d\n\n"},
		},
		{
			name: "field without colon and one space removed",
			in:   "data\ndata:  two spaces\ndata:none\nevent\n\n",
			want: []fields{{Data: "\n two spaces\nnone", HasData: true}},
		},
		{
			name: "empty data line",
			in:   "data:\n\n",
			want: []fields{{Data: "", HasData: true}},
		},
		{
			name: "unknown fields and case-sensitive names",
			in:   "Data: no\nfoo: bar\nEVENT: x\n\n",
			want: []fields{{}},
		},
		{
			name: "retry",
			in:   "retry: 3000\n\nretry: 3s\n\nretry:\n\n",
			want: []fields{{Retry: 3000, HasRetry: true}, {}, {}},
		},
		{
			name: "id with NUL ignored, empty id kept",
			in:   "id: a\x00b\n\nid\n\n",
			want: []fields{{}, {HasID: true}},
		},
		{
			name: "BOM at start",
			in:   "\uFEFFdata: x\n\n",
			want: []fields{{Data: "x", HasData: true}},
			raws: []string{"\uFEFFdata: x\n\n"},
		},
		{
			name: "BOM only at stream start",
			in:   "data: x\n\n\uFEFFdata: y\n\n",
			want: []fields{{Data: "x", HasData: true}, {}},
		},
		{
			name: "blank lines are blocks",
			in:   "\n\ndata: x\n\n\n",
			want: []fields{{}, {}, {Data: "x", HasData: true}, {}},
			raws: []string{"\n", "\n", "data: x\n\n", "\n"},
		},
		{
			name:    "incomplete block stays pending",
			in:      "data: x\n\ndata: y\n",
			want:    []fields{{Data: "x", HasData: true}},
			pending: "data: y\n",
		},
		{
			name:    "partial line pending",
			in:      "data: x",
			pending: "data: x",
		},
		{
			name: "data with colons and JSON",
			in:   "event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"a\":\"b:c\"}}\n\n",
			want: []fields{{Type: "message", Data: `{"jsonrpc":"2.0","id":1,"result":{"a":"b:c"}}`, HasData: true}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, mode := range []string{"one feed", "byte by byte"} {
				p := NewSSEParser(0)
				var evs []Event
				if mode == "one feed" {
					evs = feedAll(t, p, tt.in)
				} else {
					for i := 0; i < len(tt.in); i++ {
						evs = append(evs, feedAll(t, p, tt.in[i:i+1])...)
					}
				}
				if got := fieldsOf(evs); !reflect.DeepEqual(got, tt.want) {
					t.Fatalf("%s: events\n got %+v\nwant %+v", mode, got, tt.want)
				}
				var all []byte
				for _, e := range evs {
					all = append(all, e.Raw...)
				}
				all = append(all, p.Pending()...)
				if string(all) != tt.in {
					t.Fatalf("%s: Raw concatenation %q, want %q", mode, all, tt.in)
				}
				if tt.raws != nil && mode == "one feed" && !reflect.DeepEqual(rawsOf(evs), tt.raws) {
					t.Fatalf("Raw = %q, want %q", rawsOf(evs), tt.raws)
				}
				if mode == "one feed" && string(p.Pending()) != tt.pending {
					t.Fatalf("Pending = %q, want %q", p.Pending(), tt.pending)
				}
			}
		})
	}
}

// A CRLF split across two Feeds is one line end: the LF must not end a second (blank) line.
func TestSSECRLFSplitAcrossFeeds(t *testing.T) {
	p := NewSSEParser(0)
	evs := feedAll(t, p, "data: a\r", "\ndata: b\r", "\n\r", "\n")
	want := []fields{{Data: "a\nb", HasData: true}}
	if got := fieldsOf(evs); !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	if string(evs[0].Raw) != "data: a\r\ndata: b\r\n\r" {
		t.Fatalf("Raw = %q", evs[0].Raw)
	}
	// The event went out at its CR; the LF that completes the CRLF starts the next block.
	if string(p.Pending()) != "\n" {
		t.Fatalf("Pending = %q", p.Pending())
	}
	evs = feedAll(t, p, "data: c\r\n\r\n")
	if len(evs) != 1 || evs[0].Data != "c" || string(evs[0].Raw) != "\ndata: c\r\n\r\n" {
		t.Fatalf("next event %+v", evs)
	}
	// A CR-terminated event is not held back waiting for a possible LF.
	p = NewSSEParser(0)
	if evs := feedAll(t, p, "data: x\r\r"); len(evs) != 1 {
		t.Fatalf("CR-only event held back: %+v", evs)
	}
	// After a trailing CR, a chunk that does not start with LF is a new line.
	p = NewSSEParser(0)
	evs = feedAll(t, p, "data: x\r", "\r")
	if len(evs) != 1 || evs[0].Data != "x" {
		t.Fatalf("CR then CR: %+v", evs)
	}
}

func TestSSEManyOneByteFeedsEqualOneFeed(t *testing.T) {
	var in strings.Builder
	for i := 0; i < 50; i++ {
		in.WriteString("event: message\nid: ")
		in.WriteString(strings.Repeat("9", i))
		in.WriteString("\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progress\":1}}\n\n: ping\n\n")
	}
	one := feedAll(t, NewSSEParser(0), in.String())
	p := NewSSEParser(0)
	var split []Event
	for _, b := range []byte(in.String()) {
		split = append(split, feedAll(t, p, string([]byte{b}))...)
	}
	if !reflect.DeepEqual(one, split) {
		t.Fatalf("one feed and 1-byte feeds differ: %d vs %d events", len(one), len(split))
	}
	if len(one) != 100 {
		t.Fatalf("%d events, want 100", len(one))
	}
}

func TestSSEEventTooLarge(t *testing.T) {
	p := NewSSEParser(32)
	if _, err := p.Feed([]byte("data: " + strings.Repeat("x", 20) + "\n\n")); err != nil {
		t.Fatalf("under the bound: %v", err)
	}
	_, err := p.Feed([]byte("data: " + strings.Repeat("x", 40)))
	if !errors.Is(err, ErrEventTooLarge) {
		t.Fatalf("err = %v", err)
	}
	if _, err := p.Feed([]byte("\n\n")); !errors.Is(err, ErrEventTooLarge) {
		t.Fatalf("error not sticky: %v", err)
	}
	// The bound counts the whole block, not one line.
	p = NewSSEParser(32)
	if _, err := p.Feed([]byte(strings.Repeat("data: xxxxxxx\n", 4))); !errors.Is(err, ErrEventTooLarge) {
		t.Fatalf("many lines: err = %v", err)
	}
}

func TestEncodeEvent(t *testing.T) {
	tests := []struct {
		name string
		ev   Event
		want string
	}{
		{"data", Event{Data: `{"a":1}`, HasData: true}, "data: {\"a\":1}\n\n"},
		{"all fields", Event{Type: "message", ID: "5", HasID: true, Retry: 10, HasRetry: true, Data: "a\nb", HasData: true, Comments: []string{" c"}},
			": c\nevent: message\nid: 5\nretry: 10\ndata: a\ndata: b\n\n"},
		{"line ends in data", Event{Data: "a\r\nb\rc", HasData: true}, "data: a\ndata: b\ndata: c\n\n"},
		{"leading space kept", Event{Data: " x", HasData: true}, "data:  x\n\n"},
		{"empty data", Event{HasData: true}, "data: \n\n"},
		{"no injection through id or type", Event{Type: "a\ndata: evil", ID: "1\r\nretry: 1", HasID: true}, "event: adata: evil\nid: 1retry: 1\n\n"},
		{"keepalive", Event{Comments: []string{""}}, ":\n\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := EncodeEvent(tt.ev)
			if string(got) != tt.want {
				t.Fatalf("got %q, want %q", got, tt.want)
			}
			// What EncodeEvent writes parses back to the same fields (line ends normalised).
			evs := feedAll(t, NewSSEParser(0), string(got))
			if len(evs) != 1 || !bytes.Equal(evs[0].Raw, got) {
				t.Fatalf("reparse: %+v", evs)
			}
			wantData := strings.NewReplacer("\r\n", "\n", "\r", "\n").Replace(tt.ev.Data)
			if evs[0].Data != wantData || evs[0].HasData != tt.ev.HasData {
				t.Fatalf("reparsed data %q, want %q", evs[0].Data, wantData)
			}
		})
	}
}

func TestCommentOnly(t *testing.T) {
	evs := feedAll(t, NewSSEParser(0), ":\n\n: x\ndata: y\n\n\n")
	if !evs[0].CommentOnly() || evs[1].CommentOnly() || evs[2].CommentOnly() {
		t.Fatalf("CommentOnly: %v %v %v", evs[0].CommentOnly(), evs[1].CommentOnly(), evs[2].CommentOnly())
	}
}

// FuzzSSE: feeding a stream in any chunk sizes gives the same events as one Feed, and the Raw of
// the events plus what is pending is exactly the input.
func FuzzSSE(f *testing.F) {
	f.Add([]byte("event: message\nid: 1\ndata: {\"a\":1}\n\n: ping\n\n"), []byte{1, 2, 3})
	f.Add([]byte("data: a\r\ndata: b\r\n\r\ndata: c\r\r"), []byte{8})
	f.Add([]byte("\uFEFFdata: x\rretry: 10\r\r"), []byte{1})
	f.Add([]byte("data\n\n\n:\r\nid: a\x00\n\n"), []byte{0, 5})
	f.Fuzz(func(t *testing.T, in []byte, cuts []byte) {
		one := NewSSEParser(1 << 30)
		whole, err := one.Feed(in)
		if err != nil {
			t.Fatal(err)
		}
		checkConcat(t, in, whole, one.Pending())

		p := NewSSEParser(1 << 30)
		var split []Event
		rest := in
		for i := 0; len(rest) > 0; i++ {
			n := len(rest)
			if len(cuts) > 0 {
				n = int(cuts[i%len(cuts)])%17 + 1
				n = min(n, len(rest))
			}
			evs, err := p.Feed(rest[:n])
			if err != nil {
				t.Fatal(err)
			}
			split = append(split, evs...)
			rest = rest[n:]
		}
		checkConcat(t, in, split, p.Pending())
		if !reflect.DeepEqual(fieldsOf(whole), fieldsOf(split)) {
			t.Fatalf("chunked feed differs:\n one %+v\n split %+v", fieldsOf(whole), fieldsOf(split))
		}
		// Raw differs only by an LF that completes a CRLF split across Feeds.
		for i := range whole {
			w, s := whole[i].Raw, split[i].Raw
			if i > 0 && bytes.HasSuffix(split[i-1].Raw, []byte("\r")) && bytes.HasSuffix(whole[i-1].Raw, []byte("\r\n")) {
				if s[0] != '\n' {
					t.Fatalf("event %d: the LF of a split CRLF is missing: %q", i, s)
				}
				s = s[1:]
			}
			if bytes.HasSuffix(s, []byte("\r")) && bytes.HasSuffix(w, []byte("\r\n")) {
				w = w[:len(w)-1]
			}
			if !bytes.Equal(w, s) {
				t.Fatalf("event %d Raw: one %q split %q", i, whole[i].Raw, split[i].Raw)
			}
		}
		// Re-framing an event gives the same fields back.
		for _, e := range whole {
			got, err := NewSSEParser(1 << 30).Feed(EncodeEvent(e))
			if err != nil || len(got) != 1 {
				t.Fatalf("Encode(%+v) reparses to %d events, %v", e, len(got), err)
			}
			if !reflect.DeepEqual(fieldsOf(got), fieldsOf([]Event{e})) {
				t.Fatalf("Encode round trip: %+v vs %+v", fieldsOf(got), fieldsOf([]Event{e}))
			}
		}
	})
}

func checkConcat(t *testing.T, in []byte, evs []Event, pending []byte) {
	t.Helper()
	var all []byte
	for _, e := range evs {
		if len(e.Raw) == 0 {
			t.Fatalf("event with empty Raw")
		}
		all = append(all, e.Raw...)
	}
	all = append(all, pending...)
	if !bytes.Equal(all, in) {
		t.Fatalf("Raw concatenation %q, input %q", all, in)
	}
}
