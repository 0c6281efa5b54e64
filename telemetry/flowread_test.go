package telemetry

import (
	"bytes"
	"compress/gzip"
	"io"
	"strings"
	"testing"
)

// TestScanFlowRecords: records, blank lines skipped, bad lines passed with their number (and the
// scan goes on when fn returns nil), an overlong line skipped whole, a final line without its
// newline read; ReadFlowRecords stops at the first bad line.
func TestScanFlowRecords(t *testing.T) {
	long := `{"reason":"` + strings.Repeat("x", MaxRecordLine) + `"}`
	in := `{"flow":"a","decision":"allow"}` + "\n\n  \n" + `not json` + "\n" + long + "\n" +
		`{"flow":"b","level":"two"}` + "\n" + `{"flow":"c"} {"flow":"d"}` + "\n" + `{"flow":"e","decision":"deny"}`
	var got, bad []string
	err := ScanFlowRecords(strings.NewReader(in), func(line int, raw []byte, rec *FlowRecord, err error) error {
		if err != nil {
			bad = append(bad, err.Error())
			return nil
		}
		got = append(got, rec.Flow+":"+string(raw[:7]))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(got, ",") != `a:{"flow",e:{"flow"` {
		t.Errorf("records: %v", got)
	}
	want := []string{"line 4: not a flow log record", "line 5: longer than", "line 6: ", "line 7: more than one JSON value"}
	if len(bad) != len(want) {
		t.Fatalf("bad lines: %q", bad)
	}
	for i, w := range want {
		if !strings.HasPrefix(bad[i], w) {
			t.Errorf("bad line %d: %q, want %q…", i, bad[i], w)
		}
	}
	n := 0
	err = ReadFlowRecords(strings.NewReader(in), func(int, *FlowRecord) error { n++; return nil })
	if n != 1 || err == nil || !strings.HasPrefix(err.Error(), "line 4:") {
		t.Errorf("ReadFlowRecords: %d records, %v", n, err)
	}
}

// TestOpenFlowLog: gzip recognised by its content, plain text passed as it is (even a file shorter
// than the magic), a broken gzip header an error.
func TestOpenFlowLog(t *testing.T) {
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	zw.Write([]byte(`{"flow":"z"}` + "\n"))
	zw.Close()
	for _, c := range []struct{ in, want string }{{z.String(), `{"flow":"z"}` + "\n"}, {"{}\n", "{}\n"}, {"{", "{"}, {"", ""}} {
		r, err := OpenFlowLog(strings.NewReader(c.in))
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(r)
		if err != nil || string(b) != c.want {
			t.Errorf("%q: %q %v", c.in, b, err)
		}
	}
	if _, err := OpenFlowLog(strings.NewReader("\x1f\x8bnot gzip")); err == nil {
		t.Error("a broken gzip header was accepted")
	}
}

// TestParseDecisions: the one spelling, the aliases, the shadow values; a wrong value names the
// valid ones.
func TestParseDecisions(t *testing.T) {
	got, err := ParseDecisions(" allow, rate_limit,,ratelimited ,DENY,would_deny,would_rate_limit")
	if err != nil || strings.Join(got, ",") != "allow,rate_limited,rate_limited,deny,would_deny,would_rate_limit" {
		t.Errorf("%v %v", got, err)
	}
	if got, err := ParseDecisions(""); err != nil || got != nil {
		t.Errorf("empty: %v %v", got, err)
	}
	if _, err := ParseDecisions("allow,dney"); err == nil || !strings.Contains(err.Error(), `"dney"`) || !strings.Contains(err.Error(), DecisionFilterValues) {
		t.Errorf("dney: %v", err)
	}
	r := &FlowRecord{Decision: "rate_limited"}
	if !MatchDecision([]string{"rate_limited"}, r) || MatchDecision([]string{"deny"}, r) || !MatchDecision(nil, r) || !Denied("ratelimited") || Denied("allow") {
		t.Error("MatchDecision/Denied")
	}
	for _, c := range []struct {
		r    FlowRecord
		want Kind
	}{{FlowRecord{Direction: ClientToServer, HTTPMethod: "POST"}, KindMessage}, {FlowRecord{HTTPMethod: "GET"}, KindExchange}, {FlowRecord{TLS: "passthrough"}, KindFlow}} {
		if got := KindOf(&c.r); got != c.want {
			t.Errorf("KindOf(%+v) = %v", c.r, got)
		}
	}
}

// FuzzScanFlowRecords: any input scans without a panic; every line is passed once, as a record
// or an error naming its number, in order; a record's line is a JSON object.
func FuzzScanFlowRecords(f *testing.F) {
	f.Add([]byte(`{"flow":"a","decision":"allow"}` + "\n"))
	f.Add([]byte("\n\n{\"flow\":1}\nnope\n{} {}"))
	f.Fuzz(func(t *testing.T, in []byte) {
		last := 0
		err := ScanFlowRecords(bytes.NewReader(in), func(line int, raw []byte, rec *FlowRecord, err error) error {
			if line <= last {
				t.Fatalf("line %d after %d", line, last)
			}
			last = line
			if (rec == nil) == (err == nil) {
				t.Fatalf("line %d: record %v and error %v", line, rec, err)
			}
			if rec != nil && (len(raw) == 0 || raw[0] != '{') {
				t.Fatalf("line %d: record from %q", line, raw)
			}
			return nil
		})
		if err != nil {
			t.Fatalf("a reader that cannot fail failed: %v", err)
		}
		if n := bytes.Count(in, []byte("\n")) + 1; last > n {
			t.Fatalf("line %d of %d", last, n)
		}
	})
}

// FuzzParseDecisions: a filter either parses to values MatchDecision knows or is refused.
func FuzzParseDecisions(f *testing.F) {
	f.Add("allow,rate_limit")
	f.Add("dney")
	f.Fuzz(func(t *testing.T, s string) {
		got, err := ParseDecisions(s)
		if err != nil {
			return
		}
		for _, d := range got {
			if !strings.Contains(DecisionFilterValues, d) || d != CanonicalDecision(d) {
				t.Fatalf("%q gave %q", s, d)
			}
		}
		MatchDecision(got, &FlowRecord{Decision: "ratelimited", Reason: "would_deny by x"})
	})
}
