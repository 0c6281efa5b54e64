package integrity

import (
	"bytes"
	"encoding/json"
	"math/bits"
	"slices"
	"strings"
	"testing"

	"mcpintercept/mcp"
)

var fuzzKinds = [...]Kind{KindTool, KindPrompt, KindTemplate}

// FuzzCanonical: Canonical never panics; what it accepts canonicalises to a strict JSON object
// that canonicalises to itself, with the same fields; and the hash is the same after a
// re-encoding by encoding/json.
func FuzzCanonical(f *testing.F) {
	f.Add([]byte(`{"name":"echo","description":"Echo.","inputSchema":{"type":"object","properties":{"t":{"type":"string"}}}}`), uint8(0))
	f.Add([]byte(`{"name":"p","arguments":[{"name":"a","required":true}],"_meta":{"x":[1,2.5e3,-0]}}`), uint8(1))
	f.Add([]byte(`{"uriTemplate":"file:///{p}","name":"f","mimeType":"text/plain","annotations":{"priority":0.5}}`), uint8(2))
	f.Add([]byte(`{"n\u0061me":"\ud83d\ude00","description":"\u001b[0m<>&\u2028"}`), uint8(0))
	f.Fuzz(func(t *testing.T, raw []byte, k uint8) {
		kind := fuzzKinds[int(k)%len(fuzzKinds)]
		canon, fields, err := Canonical(kind, raw)
		if err != nil {
			return
		}
		if err := mcp.ValidateJSON(canon, maxDefDepth); err != nil || canon[0] != '{' {
			t.Fatalf("canonical form %q is not a strict object: %v", canon, err)
		}
		again, fields2, err := Canonical(kind, canon)
		if err != nil || !bytes.Equal(again, canon) {
			t.Fatalf("re-canonicalised %q to %q (%v)", canon, again, err)
		}
		if len(fields) != len(fields2) {
			t.Fatalf("fields %v, again %v", fields, fields2)
		}
		for name, c := range fields {
			if !bytes.Equal(fields2[name], c) {
				t.Fatalf("field %s: %q, again %q", name, c, fields2[name])
			}
		}
		var v any
		if json.Unmarshal(raw, &v) != nil {
			return
		}
		re, err := json.Marshal(v)
		if err != nil {
			return
		}
		c3, _, err := Canonical(kind, re)
		if err != nil {
			t.Fatalf("encoding/json's re-encoding %q refused: %v", re, err)
		}
		if hashOf(c3) != hashOf(canon) {
			t.Fatalf("hash changed by re-encoding: %q → %q", canon, c3)
		}
	})
}

// FuzzScan: Scan never panics; its findings are sorted and unique; a string with a U+200B
// inserted, raw or escaped, always yields zero_width; one with a Default_Ignorable_Code_Point
// (chosen by pos) inserted always yields that code point's finding.
func FuzzScan(f *testing.F) {
	f.Add([]byte(`{"description":"plain"}`), uint16(3))
	f.Add([]byte(`{"description":"\u001b[31m<IMPORTANT>\udb40\udc41\u202e"}`), uint16(0))
	f.Add([]byte("{\"a\":\"\xff\x1b]0;t\x07\"}"), uint16(9))
	f.Add([]byte(`"\ud800\`), uint16(1))
	f.Fuzz(func(t *testing.T, raw []byte, pos uint16) {
		check := func(raw []byte) []string {
			got := Scan(raw, DefaultPatterns)
			if !slices.IsSorted(got) || len(slices.Compact(slices.Clone(got))) != len(got) {
				t.Fatalf("Scan(%q) = %v: not sorted and unique", raw, got)
			}
			return got
		}
		check(raw)
		pats := prefilterTestPatterns()
		if a, b := scan(raw, pats, prefiltersOf(pats)), scan(raw, pats, nil); !slices.Equal(a, b) {
			t.Fatalf("Scan(%q): prefiltered %v, plain %v", raw, a, b)
		}
		s := []rune(string(raw))
		p := int(pos) % (len(s) + 1)
		text := string(s[:p]) + "\u200b" + string(s[p:])
		quoted, _ := json.Marshal(map[string]string{"description": text})
		if got := check(quoted); !slices.Contains(got, FindingZeroWidth) {
			t.Fatalf("Scan(%q) = %v: no zero_width", quoted, got)
		}
		plain, _ := json.Marshal(string(raw))
		esc := append([]byte(`{"k":"\u200b`), plain[1:]...)
		esc = append(esc, '}')
		if got := check(esc); !slices.Contains(got, FindingZeroWidth) {
			t.Fatalf("Scan(%q) = %v: no zero_width", esc, got)
		}
		di := defaultIgnorables[int(pos)%len(defaultIgnorables)]
		want := findingNames[bits.TrailingZeros8(hiddenClass(di))]
		quoted, _ = json.Marshal(map[string]string{"description": string(s[:p]) + string(di) + string(s[p:])})
		if got := check(quoted); !slices.Contains(got, want) {
			t.Fatalf("Scan(%q) = %v: U+%04X gives no %s", quoted, got, di, want)
		}
	})
}

// FuzzPinFile: the pin-file parser never panics, and what it accepts encodes to a file that
// parses to the same pins (the encoding is stable).
func FuzzPinFile(f *testing.F) {
	h := "sha256:" + strings.Repeat("ab", 32)
	f.Add([]byte(`{"version":1,"servers":[{"server":"10.200.2.2:3011/mcp","spki":"` + h + `","definitions":[{"kind":"tool","name":"echo","hash":"` + h + `","fields":{"description":"` + h + `"}}]}]}`))
	f.Add([]byte(`{"version":1,"servers":[]}`))
	f.Add([]byte(`{"version":1,"servers":[{"server":"s","definitions":[{"kind":"template","name":"file:///{p}","hash":"` + h + `"},{"kind":"prompt","name":"p","hash":"` + h + `"}]}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		ps, err := parsePins(data)
		if err != nil {
			return
		}
		enc, err := encodePins(ps)
		if err != nil {
			t.Fatal(err)
		}
		ps2, err := parsePins(enc)
		if err != nil {
			t.Fatalf("encoded pin file refused: %v\n%s", err, enc)
		}
		enc2, _ := encodePins(ps2)
		if !bytes.Equal(enc, enc2) {
			t.Fatalf("encoding not stable:\n%s\n%s", enc, enc2)
		}
	})
}

// FuzzStateFile: the state.json parser never panics, and a state it accepts, loaded and
// written again, parses to the same state.
func FuzzStateFile(f *testing.F) {
	h := "sha256:" + strings.Repeat("cd", 32)
	h2 := "sha256:" + strings.Repeat("ef", 32)
	f.Add([]byte(`{"version":1,"servers":[{"server":"s:1/mcp","spki":"` + h + `","definitions":[` +
		`{"kind":"tool","name":"echo","pin":"` + h + `","source":"learned","pin_fields":{"name":"` + h + `"},"seen":"` + h2 + `","seen_fields":{"name":"` + h2 + `"},"findings":["zero_width"],"seen_at":"2026-05-01T12:00:00Z","state":"changed","diverged":true},` +
		`{"kind":"prompt","name":"p","seen":"` + h + `","state":"pending"},` +
		`{"kind":"tool","name":"x","pin":"` + h + `","source":"approved","file_pin":"` + h2 + `","invalid":true,"state":"quarantined","removed":true}]}]}`))
	f.Add([]byte(`{"version":1,"servers":[]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		rs, err := parseState(data)
		if err != nil {
			return
		}
		g := &Guard{servers: map[string]*serverState{}, fileOver: map[*defState]digest{}}
		g.load(rs)
		out := g.records()
		sortRecords(out)
		enc, err := encodeState(out)
		if err != nil {
			t.Fatal(err)
		}
		rs2, err := parseState(enc)
		if err != nil {
			t.Fatalf("written state refused: %v\n%s", err, enc)
		}
		g2 := &Guard{servers: map[string]*serverState{}, fileOver: map[*defState]digest{}}
		g2.load(rs2)
		out2 := g2.records()
		sortRecords(out2)
		enc2, _ := encodeState(out2)
		if !bytes.Equal(enc, enc2) {
			t.Fatalf("not stable:\n%s\n%s", enc, enc2)
		}
	})
}
