package level2

import (
	"bytes"
	"sort"
)

// Byte-span helpers over JSON the strict scan has validated: surface control rewrites a message by
// splicing new bytes over the spans it changes, so everything else (key order, number spelling,
// escapes, whitespace) goes out as the server or the client wrote it.

// edit replaces raw[start:end] with repl.
type edit struct {
	start, end int
	repl       []byte
}

// splice applies non-overlapping edits to raw.
func splice(raw []byte, edits []edit) []byte {
	if len(edits) == 0 {
		return raw
	}
	sort.Slice(edits, func(i, j int) bool { return edits[i].start < edits[j].start })
	n := len(raw)
	for _, e := range edits {
		n += len(e.repl) - (e.end - e.start)
	}
	out := make([]byte, 0, n)
	at := 0
	for _, e := range edits {
		out = append(out, raw[at:e.start]...)
		out = append(out, e.repl...)
		at = e.end
	}
	return append(out, raw[at:]...)
}

// span is where a member's key and value lie in an object, as offsets into the object.
type memberAt struct {
	keyStart   int // the key's opening quote
	valStart   int
	valEnd     int
	found      bool
	afterComma int // end of the member including a following comma (for removal), else valEnd
}

// memberSpan finds a top-level member of a validated object.
func memberSpan(obj []byte, name string) memberAt {
	if len(obj) == 0 || obj[0] != '{' {
		return memberAt{}
	}
	i := 1
	for {
		i = skipWS(obj, i)
		if i >= len(obj) || obj[i] != '"' {
			return memberAt{}
		}
		ks := i
		ke := skipString(obj, i)
		i = skipWS(obj, ke)
		i = skipWS(obj, i+1) // ':'
		vs := i
		ve := skipValue(obj, i)
		i = skipWS(obj, ve)
		if keyEquals(obj[ks:ke], name) {
			m := memberAt{keyStart: ks, valStart: vs, valEnd: ve, found: true, afterComma: ve}
			if i < len(obj) && obj[i] == ',' {
				m.afterComma = skipWS(obj, i+1)
			}
			return m
		}
		if i >= len(obj) || obj[i] != ',' {
			return memberAt{}
		}
		i++
	}
}

// elements returns the spans of a validated array's elements, as offsets into arr.
func elements(arr []byte) [][2]int {
	if len(arr) < 2 || arr[0] != '[' {
		return nil
	}
	var out [][2]int
	i := skipWS(arr, 1)
	if i < len(arr) && arr[i] == ']' {
		return out
	}
	for i < len(arr) {
		s := i
		e := skipValue(arr, i)
		out = append(out, [2]int{s, e})
		i = skipWS(arr, e)
		if i >= len(arr) || arr[i] != ',' {
			break
		}
		i = skipWS(arr, i+1)
	}
	return out
}

// offsetOf is where sub (a sub-slice of parent) starts in parent; -1 when it is not one.
func offsetOf(parent, sub []byte) int {
	if len(sub) == 0 || cap(sub) > cap(parent) {
		return -1
	}
	off := cap(parent) - cap(sub)
	if off < 0 || off+len(sub) > len(parent) || &parent[off] != &sub[0] {
		return -1
	}
	return off
}

// stringMember is a top-level string member of a validated object, unquoted.
func stringMember(obj []byte, name string) (string, bool) {
	v, ok := member(obj, name)
	if !ok || len(v) == 0 || v[0] != '"' {
		return "", false
	}
	return unquote(v), true
}

// isObject reports a validated value that is an object.
func isObject(v []byte) bool { return len(v) > 0 && v[0] == '{' }

// quoteJSON is s as a JSON string.
func quoteJSON(s string) []byte { return marshalNoEscape(s) }

// joinRaw joins raw JSON values with commas.
func joinRaw(b *bytes.Buffer, parts [][]byte) {
	for i, p := range parts {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(p)
	}
}
