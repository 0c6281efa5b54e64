package audit

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/gowebpki/jcs"
)

func fullRecord() *Record {
	r := sample(3)
	r.Seq, r.Prev, r.Time = 7, strings.Repeat("ab", 32), time.Date(2026, 7, 28, 1, 2, 3, 456789000, time.UTC)
	r.Arguments = json.RawMessage(`{"path":"/etc/\u2028x","n":[1,2.5]}`)
	r.Arguments, _ = jcs.Transform(r.Arguments)
	r.Traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	r.Reason, r.Outcome, r.ErrorCode, r.Authorization = "timeout", "uncertain", -32000, 3
	r.Iss, r.Sub = "https://idp.example", "sha256:00112233445566778899aabbccddeeff"
	r.TraceID, r.SpanID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	r.Tool = "quote\"back\\slash\ttab\x01ctl\u2028ls é"
	return r
}

func TestEncodeIsRFC8785Canonical(t *testing.T) {
	line := encodeRecord(nil, fullRecord())
	canon, err := jcs.Transform(line)
	if err != nil {
		t.Fatal(err)
	}
	if string(canon) != string(line) {
		t.Fatalf("line is not its JCS form:\n%s\n%s", line, canon)
	}
	if !strings.Contains(string(line), `"time":"2026-07-28T01:02:03.456Z"`) {
		t.Fatalf("time not in UTC milliseconds: %s", line)
	}
}

func TestDecodeRoundTrip(t *testing.T) {
	want := fullRecord()
	line := encodeRecord(nil, want)
	got, err := DecodeRecord(line)
	if err != nil {
		t.Fatal(err)
	}
	want.Time = want.Time.Truncate(time.Millisecond)
	if string(encodeRecord(nil, got)) != string(line) || got.Tool != want.Tool || !got.Time.Equal(want.Time) ||
		got.Iss != want.Iss || got.Sub != want.Sub || got.TraceID != want.TraceID || got.SpanID != want.SpanID {
		t.Fatalf("round trip changed the record:\n%+v\n%+v", got, want)
	}
}

func TestDecodeIsStrict(t *testing.T) {
	good := string(encodeRecord(nil, fullRecord()))
	tests := []struct {
		name, line, want string
	}{
		{"unknown field", strings.Replace(good, `{"args_hash"`, `{"aardvark":1,"args_hash"`, 1), "unknown field"},
		{"duplicate key", strings.Replace(good, `"kind":"authorization"`, `"kind":"authorization","kind":"outcome"`, 1), "duplicate key"},
		{"keys out of order", `{"seq":1,"kind":"outcome","prev":"` + strings.Repeat("0", 64) + `","time":"2026-01-01T00:00:00.000Z"}`, "canonical order"},
		{"float", strings.Replace(good, `"seq":7`, `"seq":7.0`, 1), "not an integer"},
		{"exponent", strings.Replace(good, `"seq":7`, `"seq":7e0`, 1), "not an integer"},
		{"whitespace", strings.Replace(good, `"seq":7`, `"seq": 7`, 1), "canonical"},
		{"needless escape", strings.Replace(good, `"kind":"authorization"`, `"kind":"\u0061uthorization"`, 1), "canonical"},
		{"case-folded key", strings.Replace(good, `"seq":7`, `"SEQ":7`, 1), ""},
		{"time not in ms", strings.Replace(good, `.456Z`, `.45Z`, 1), "time"},
		{"time not UTC", strings.Replace(good, `.456Z`, `.456+00:00`, 1), "time"},
		{"uppercase prev", strings.Replace(good, strings.Repeat("ab", 32), strings.Repeat("AB", 32), 1), "prev"},
		{"no seq", strings.Replace(good, `"seq":7,`, ``, 1), "seq"},
		{"unknown kind", strings.Replace(good, `"kind":"authorization"`, `"kind":"other"`, 1), "kind"},
		{"arguments not canonical", strings.Replace(good, `"arguments":{"n"`, `"arguments":{ "n"`, 1), "canonical"},
		{"trailing data", good + `{}`, ""},
		{"empty", ``, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := DecodeRecord([]byte(tt.line))
			if err == nil {
				t.Fatalf("DecodeRecord accepted %s", tt.line)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("DecodeRecord: %v; want it to mention %q", err, tt.want)
			}
		})
	}
}

func TestHashArguments(t *testing.T) {
	a, err := HashArguments(json.RawMessage(`{"b":[1,2],"a":"x"}`))
	if err != nil {
		t.Fatal(err)
	}
	b, err := HashArguments(json.RawMessage(" {\"a\":\"\\u0078\", \"b\":[1.0,2]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if a != b || !strings.HasPrefix(a, "sha256:") || len(a) != len("sha256:")+64 {
		t.Fatalf("HashArguments: %q and %q", a, b)
	}
	if h, err := HashArguments(nil); h != "" || err != nil {
		t.Fatalf("HashArguments(nil) = %q, %v", h, err)
	}
	if _, err := HashArguments(json.RawMessage(`{"a":1,"a":2}`)); err == nil {
		t.Fatal("HashArguments accepted a duplicate key")
	}
}

// FuzzDecodeRecord checks that whatever the decoder accepts is exactly the
// canonical encoding of what it decoded: one record, one spelling.
func FuzzDecodeRecord(f *testing.F) {
	f.Add(encodeRecord(nil, fullRecord()))
	f.Add(encodeRecord(nil, &Record{Seq: 1, Prev: strings.Repeat("0", 64), Time: time.Unix(0, 0), Kind: KindOutcome}))
	f.Fuzz(func(t *testing.T, line []byte) {
		r, err := DecodeRecord(line)
		if err != nil {
			return
		}
		// The segment reader ends a segment's data at its first NUL: no
		// accepted line may hold one (nor a newline).
		if bytes.IndexByte(line, 0) >= 0 || bytes.IndexByte(line, '\n') >= 0 {
			t.Fatalf("accepted a line holding a NUL or a newline: %q", line)
		}
		if again := encodeRecord(nil, r); string(again) != string(line) {
			t.Fatalf("accepted a non-canonical line:\n%q\nre-encodes as\n%q", line, again)
		}
	})
}

// TestOutcomeOfKeepsTrace: an outcome names the same span as its authorization.
func TestOutcomeOfKeepsTrace(t *testing.T) {
	a := fullRecord()
	o := OutcomeOf(a, a.Seq, "result", "")
	if o.TraceID != a.TraceID || o.SpanID != a.SpanID || o.Traceparent != a.Traceparent || o.TraceID == "" {
		t.Fatalf("outcome trace %q/%q, authorization %q/%q", o.TraceID, o.SpanID, a.TraceID, a.SpanID)
	}
}
