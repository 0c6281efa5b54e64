package telemetry

import (
	"bytes"
	"encoding/json"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"
)

// marshalStd is what the flow log wrote before AppendJSON: encoding/json's output.
func marshalStd(t testing.TB, r FlowRecord) []byte {
	t.Helper()
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func checkSame(t *testing.T, r FlowRecord) {
	t.Helper()
	want := marshalStd(t, r)
	got := r.AppendJSON(nil)
	if !bytes.Equal(got, want) {
		t.Fatalf("AppendJSON differs from encoding/json\n got %q\nwant %q", got, want)
	}
	// Appending keeps what the buffer held.
	if got := r.AppendJSON([]byte("x")); !bytes.Equal(got, append([]byte("x"), want...)) {
		t.Fatalf("AppendJSON onto a non-empty buffer: %q", got)
	}
}

func TestFlowRecordEncoding(t *testing.T) {
	at := time.Date(2026, 11, 30, 23, 4, 21, 123456789, time.UTC)
	typical := FlowRecord{Time: Time{at}, Flow: "f-0001a2b3", Client: "10.200.1.2:53124", OrigDst: "10.200.2.2:8080",
		Mechanism: "nftables-tproxy", TLS: "plaintext", Level: 1, HTTPMethod: "POST", Path: "/mcp", Status: 200,
		MCPVersion: "2026-07-28", MCPMethod: "tools/call", MCPName: "echo", Decision: "allow", Rule: "",
		BytesUp: 1234, BytesDown: 1100, DurationMS: 3}
	withProc := typical
	withProc.Process = &Process{PID: 4242, UID: 1000, GID: 1000, Comm: "node", Exe: "/usr/bin/node", Cgroup: 1 << 40}
	noExe := typical
	noExe.Process = &Process{PID: 1, Comm: "agent"}
	var all strings.Builder
	for c := range 0x80 {
		all.WriteByte(byte(c))
	}
	for _, tt := range []struct {
		name string
		s    string
	}{
		{"empty", ""},
		{"every ASCII byte", all.String()},
		{"quotes and backslashes", `a"b\c\\"\"`},
		{"HTML characters", `<script>alert("x")</script> & &amp;`},
		{"short escapes", "\b\f\n\r\t"},
		{"DEL", "a\x7fb"},
		{"line and paragraph separators", "a\u2028b\u2029c\u2027\u202a"},
		{"multibyte", "héllo wörld — ✓ 日本語 😀 \U0010FFFF"},
		{"lone continuation byte", "a\x80b"},
		{"truncated sequence", "a\xe2\x82"},
		{"truncated at the end", "\xf0\x9f\x98"},
		{"overlong encoding", "\xc0\xaf\xe0\x80\xaf"},
		{"surrogate half", "\xed\xa0\x80\xed\xbf\xbf"},
		{"beyond U+10FFFF", "\xf4\x90\x80\x80"},
		{"invalid then valid", "\xff\xfe€\xff"},
		{"replacement character itself", "\ufffd"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := typical
			r.Path, r.MCPName, r.Reason, r.SNI = tt.s, tt.s, tt.s+"x", "x"+tt.s
			checkSame(t, r)
			r.Process = &Process{Comm: tt.s, Exe: tt.s}
			checkSame(t, r)
		})
	}
	for _, tt := range []struct {
		name string
		r    FlowRecord
	}{
		{"zero record", FlowRecord{}},
		{"typical", typical},
		{"with process", withProc},
		{"process without exe", noExe},
		{"zero process", FlowRecord{Process: &Process{}}},
		{"extreme numbers", FlowRecord{Level: math.MinInt, Status: math.MaxInt, BytesUp: math.MinInt64, BytesDown: math.MaxInt64,
			DurationMS: -1, Process: &Process{PID: math.MaxUint32, UID: math.MaxUint32, GID: math.MaxUint32, Cgroup: math.MaxUint64}}},
		{"time in another zone", FlowRecord{Time: Time{time.Date(2026, 1, 1, 0, 30, 0, 999999999, time.FixedZone("x", 3600))}}},
		{"year 1", FlowRecord{Time: Time{time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC)}}},
		{"year 9999", FlowRecord{Time: Time{time.Date(9999, 12, 31, 23, 59, 59, 999e6, time.UTC)}}},
		{"year 10000", FlowRecord{Time: Time{time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}}},
		{"negative year", FlowRecord{Time: Time{time.Date(-5, 1, 1, 0, 0, 0, 0, time.UTC)}}},
	} {
		t.Run(tt.name, func(t *testing.T) { checkSame(t, tt.r) })
	}
}

// TestFlowRecordEncodingEveryField fills every field of FlowRecord and Process with a distinct
// non-zero value by reflection, so a field added to either struct but not to AppendJSON fails here.
func TestFlowRecordEncodingEveryField(t *testing.T) {
	var r FlowRecord
	n := 0
	var fill func(v reflect.Value)
	fill = func(v reflect.Value) {
		for i := range v.NumField() {
			f := v.Field(i)
			n++
			switch f.Kind() {
			case reflect.String:
				f.SetString("v<" + v.Type().Field(i).Name + ">")
			case reflect.Int, reflect.Int64, reflect.Int32:
				f.SetInt(int64(n * 1001))
			case reflect.Uint, reflect.Uint64, reflect.Uint32:
				f.SetUint(uint64(n * 1003))
			case reflect.Pointer:
				f.Set(reflect.New(f.Type().Elem()))
				fill(f.Elem())
			case reflect.Struct:
				if f.Type() == reflect.TypeOf(Time{}) {
					f.Set(reflect.ValueOf(Time{time.Date(2026, 7, 28, 1, 2, 3, 4e6, time.UTC)}))
					continue
				}
				fill(f)
			default:
				t.Fatalf("field %s has kind %s: teach this test and AppendJSON about it", v.Type().Field(i).Name, f.Kind())
			}
		}
	}
	fill(reflect.ValueOf(&r).Elem())
	checkSame(t, r)
}

func FuzzFlowRecordEncoding(f *testing.F) {
	f.Add("f-1", "10.200.1.2:5000", "mcp.lab.test", "/mcp", "echo", "", "node", "/usr/bin/node", 1, 200, int64(1024), int64(3), int64(1_790_000_000_123_456_789), uint32(42), uint64(7), true)
	f.Add("", "", "", "", "", "", "", "", 0, 0, int64(0), int64(0), int64(0), uint32(0), uint64(0), false)
	f.Fuzz(func(t *testing.T, flow, client, sni, path, name, reason, comm, exe string, level, status int,
		nbytes, dur, nanos int64, pid uint32, cgroup uint64, proc bool) {
		r := FlowRecord{Time: Time{time.Unix(0, nanos)}, Flow: flow, Client: client, OrigDst: sni + client,
			Mechanism: reason, SNI: sni, TLS: comm, Level: level, HTTPMethod: exe, Path: path, Status: status,
			MCPVersion: name + path, MCPMethod: flow + name, MCPName: name, Decision: reason, Rule: path + reason,
			Reason: reason, BytesUp: nbytes, BytesDown: -nbytes, DurationMS: dur}
		if proc {
			r.Process = &Process{PID: pid, UID: pid ^ 0xffff, GID: pid >> 3, Comm: comm, Exe: exe, Cgroup: cgroup}
			r.Pod = &Pod{Namespace: name, Name: comm, UID: exe, ServiceAccount: sni}
		}
		want, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		if got := r.AppendJSON(nil); !bytes.Equal(got, want) {
			t.Fatalf("AppendJSON differs from encoding/json\n got %q\nwant %q", got, want)
		}
	})
}

// BenchmarkFlowRecordEncoding compares the flow log's encoder before (encoding/json, by reflection)
// and after (AppendJSON) on a typical Level 1 record, as the writer goroutine does it: into a reused
// line buffer, newline included.
func BenchmarkFlowRecordEncoding(b *testing.B) {
	r := FlowRecord{Time: Time{time.Now()}, Flow: "f-0001a2b3c4", Client: "10.200.1.2:53124", OrigDst: "10.200.2.2:8080",
		Mechanism: "nftables-tproxy", TLS: "plaintext", Level: 1, HTTPMethod: "POST", Path: "/mcp", Status: 200,
		MCPVersion: "2026-07-28", MCPMethod: "tools/call", MCPName: "echo", Decision: "allow",
		BytesUp: 1234, BytesDown: 1100, DurationMS: 3}
	buf := make([]byte, 0, 1024)
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			j, err := json.Marshal(r)
			if err != nil {
				b.Fatal(err)
			}
			buf = append(append(buf[:0], j...), '\n')
		}
	})
	b.Run("append", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			buf = append(r.AppendJSON(buf[:0]), '\n')
		}
	})
}
