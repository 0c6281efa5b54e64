package level2

import (
	"bytes"
	"sort"
)

// Surface control and redaction rewrite a message by splicing new bytes over the spans they
// change (found with mcp.MemberSpan, mcp.Elements and the other navigation helpers), so that
// everything else (key order, number spelling, escapes, whitespace) goes out as the server or
// the client wrote it.

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

// joinRaw joins raw JSON values with commas.
func joinRaw(b *bytes.Buffer, parts [][]byte) {
	for i, p := range parts {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(p)
	}
}

func joinBatch(parts [][]byte) []byte {
	return append(append([]byte{'['}, bytes.Join(parts, []byte{','})...), ']')
}
