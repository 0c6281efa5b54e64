package level2

import (
	"bytes"
	"errors"
	"math"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"mcpintercept/exchange"
)

// Level 2 decodes strictly but detects leniently: whatever any supported peer would decode and act
// on must be judged or refused. The peers and what they forgive, read from their sources:
//
//   - Go SDK client: SSE data lines are bytes.TrimSpace'd (every Unicode White_Space rune, so \v,
//     \f, U+0085, U+00A0, U+2028 …), lines end at LF only (a bare CR is part of a line), events of
//     any type are decoded on a 2024-11-05 stream; JSON bodies by mime.ParseMediaType.
//   - TypeScript SDK: a body or response is JSON when its Content-Type *contains*
//     "application/json" (or "text/event-stream"), whatever surrounds it, and the headers of one
//     name are joined with ", "; bodies are decoded as UTF-8 with the BOM stripped.
//   - Python's json: a bytes body's BOM is skipped (utf-8-sig); str.strip() also removes the
//     information separators U+001C…U+001F.
//
// So before Level 2 decides "this is not JSON-RPC", it strips all of that; what remains is decoded
// with the strict decoder, and a decode error is a refusal, never a pass.

// lenientSpace is every rune some peer trims around a JSON text: Unicode White_Space, the BOM
// (U+FEFF, also zero-width no-break space), U+180E (White_Space in older Unicode, still trimmed by
// some JavaScript engines) and the information separators Python's str.strip() removes.
func lenientSpace(r rune) bool {
	return unicode.IsSpace(r) || r == '\uFEFF' || r == '\u180E' || (r >= 0x1c && r <= 0x1f)
}

// trimLenient strips lenientSpace from both ends of b, the way the most forgiving peer would.
func trimLenient(b []byte) []byte {
	// Fast path: nothing to strip (the common case for every well-formed body).
	if len(b) > 0 && b[0] < utf8.RuneSelf && !isASCIISpaceish(b[0]) &&
		b[len(b)-1] < utf8.RuneSelf && !isASCIISpaceish(b[len(b)-1]) {
		return b
	}
	return bytes.TrimFunc(b, lenientSpace)
}

func isASCIISpaceish(c byte) bool {
	return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f)
}

// looksJSON reports bytes that some peer would parse as a JSON object or array: after the
// lenient trim they start with '{' or '['.
func looksJSON(b []byte) bool {
	b = trimLenient(b)
	return len(b) > 0 && (b[0] == '{' || b[0] == '[')
}

// blank reports a body or event value with nothing but lenient space: it carries no message.
func blank(b []byte) bool { return len(trimLenient(b)) == 0 }

// sniffed is what a body's Content-Type and bytes say about it, read as the most lenient peer
// reads them: the read steps of either side (readRequest, ResponseHead, readResponse) judge by
// it.
type sniffed struct {
	ctv      string // every Content-Type value, joined (contentTypes)
	repeated bool   // more than one Content-Type
	ct       ContentType
	// namesJSON and namesEventStream: the type mentions json or event-stream anywhere.
	namesJSON, namesEventStream bool
	python                      string // the UTF-16/32 encoding Python reads the bytes in ("" none)
	json                        bool   // JSON by its type or by its bytes
	trimmed                     []byte // the bytes without the lenient space around them (empty: blank)
}

// sniff reads h's Content-Type and body (nil for a head alone).
func sniff(h *exchange.Head, body []byte) sniffed {
	var s sniffed
	s.ctv, s.repeated = contentTypes(h)
	s.ct = ParseContentType(s.ctv)
	s.namesJSON, s.namesEventStream = namesJSON(s.ctv), namesEventStream(s.ctv)
	s.python = pythonEncoding(body)
	s.json = s.ct.JSON || s.namesJSON || looksJSON(body)
	s.trimmed = trimLenient(body)
	return s
}

// contentTypes returns every Content-Type value of h joined with ", " (as fetch's Headers.get
// does), and whether there was more than one.
func contentTypes(h *exchange.Head) (joined string, repeated bool) {
	n := 0
	var b strings.Builder
	for _, hd := range h.Headers {
		if exchange.EqualFold(hd.Name, "Content-Type") {
			if n > 0 {
				b.WriteString(", ")
			}
			b.WriteString(hd.Value)
			n++
		}
	}
	return b.String(), n > 1
}

// namesJSON reports a Content-Type value that a lenient peer reads as JSON: one that mentions
// "json" anywhere, in any case, with any bytes around it (the TypeScript SDK tests
// includes("application/json"); "json" anywhere is a superset of that and of every +json type).
func namesJSON(ct string) bool { return containsFold(ct, "json") }

// namesEventStream reports a Content-Type value that a lenient peer reads as an event stream.
func namesEventStream(ct string) bool { return containsFold(ct, "event-stream") }

func containsFold(s, sub string) bool {
	return strings.Contains(strings.ToLower(s), sub)
}

// bareCR reports a CR that is not the first half of a CRLF in an SSE block. The WHATWG parser
// (Level 2's, and the TypeScript SDK's) ends a line there; the Go SDK's does not (it splits at LF
// only), so the two read different events from the same bytes: such a stream cannot be judged
// for both. A CR that ends raw may be completed by an LF at the start of the next block (prevCR
// says the previous block ended so; then raw must start with that LF).
func bareCR(raw []byte, prevCR bool) bool {
	if prevCR && (len(raw) == 0 || raw[0] != '\n') {
		return true
	}
	for i := bytes.IndexByte(raw, '\r'); i >= 0; {
		if i+1 < len(raw) && raw[i+1] != '\n' {
			return true
		}
		j := bytes.IndexByte(raw[i+1:], '\r')
		if j < 0 {
			break
		}
		i += 1 + j
	}
	return false
}

// pythonEncoding is the encoding Python's json.loads gives a bytes body (json.detect_encoding):
// a UTF-32 or UTF-16 BOM, or NUL bytes in the first positions, make it UTF-32 or UTF-16, which a
// UTF-8 reader (Level 2, the SDKs) sees as something else entirely. "" for UTF-8.
func pythonEncoding(b []byte) string {
	switch {
	case bytes.HasPrefix(b, []byte{0, 0, 0xfe, 0xff}):
		return "utf-32-be"
	case bytes.HasPrefix(b, []byte{0xff, 0xfe, 0, 0}):
		return "utf-32-le"
	case bytes.HasPrefix(b, []byte{0xfe, 0xff}):
		return "utf-16-be"
	case bytes.HasPrefix(b, []byte{0xff, 0xfe}):
		return "utf-16-le"
	}
	switch {
	case len(b) >= 4 && b[0] == 0 && b[1] == 0:
		return "utf-32-be"
	case len(b) >= 4 && b[0] == 0:
		return "utf-16-be"
	case len(b) >= 4 && b[1] == 0 && b[2] == 0 && b[3] == 0:
		return "utf-32-le"
	case len(b) >= 4 && b[1] == 0:
		return "utf-16-le"
	case len(b) == 2 && b[0] == 0:
		return "utf-16-be"
	case len(b) == 2 && b[1] == 0:
		return "utf-16-le"
	}
	return ""
}

// trimJSSpace is strings.TrimFunc(s, jsSpace), written out.
func trimJSSpace(s string) string {
	for s != "" {
		r, n := utf8.DecodeRuneInString(s)
		if !jsSpace(r) {
			break
		}
		s = s[n:]
	}
	for s != "" {
		r, n := utf8.DecodeLastRuneInString(s)
		if !jsSpace(r) {
			break
		}
		s = s[:len(s)-n]
	}
	return s
}

// jsNumber is JavaScript's Number(s) for a string (ECMA-262 StringToNumber), which the TypeScript
// SDK applies to a response's id before it looks up the request it answers: " 1 ", "0x1", "1e0",
// "+1", "01", "1." and even "" (0) answer request 1 (or 0) there. ok is false for NaN.
func jsNumber(s string) (float64, bool) {
	s = trimJSSpace(s)
	if s == "" {
		return 0, true
	}
	if len(s) > 2 && s[0] == '0' {
		base := 0
		switch s[1] {
		case 'x', 'X':
			base = 16
		case 'o', 'O':
			base = 8
		case 'b', 'B':
			base = 2
		}
		if base != 0 {
			if strings.ContainsAny(s[2:], "_+-") {
				return 0, false
			}
			n, err := strconv.ParseUint(s[2:], base, 64)
			if err != nil {
				// Too large for uint64 still is a number (a large one): never a small id.
				var ne *strconv.NumError
				if errors.As(err, &ne) && ne.Err == strconv.ErrRange {
					return math.Inf(1), true
				}
				return 0, false
			}
			return float64(n), true
		}
	}
	body := strings.TrimLeft(s, "+-")
	if len(s)-len(body) > 1 {
		return 0, false
	}
	if body == "Infinity" {
		return math.Inf(1), true
	}
	// StrUnsignedDecimalLiteral: digits, '.', an exponent; none of Go's extras (underscores, hex
	// floats, "inf", "nan").
	digits, dot, exp := 0, false, false
	for i := 0; i < len(body); i++ {
		c := body[i]
		switch {
		case c >= '0' && c <= '9':
			digits++
		case c == '.' && !dot && !exp:
			dot = true
		case (c == 'e' || c == 'E') && !exp && digits > 0:
			exp = true
			if i+1 < len(body) && (body[i+1] == '+' || body[i+1] == '-') {
				i++
			}
			if i+1 >= len(body) {
				return 0, false
			}
		default:
			return 0, false
		}
	}
	if digits == 0 {
		return 0, false
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		var ne *strconv.NumError
		if !errors.As(err, &ne) || ne.Err != strconv.ErrRange {
			return 0, false
		}
	}
	return f, true
}

// jsSpace is ECMA-262 StrWhiteSpaceChar: WhiteSpace (TAB, VT, FF, ZWNBSP, any Zs) and
// LineTerminator (LF, CR, LS, PS).
func jsSpace(r rune) bool {
	switch r {
	case '\t', '\v', '\f', ' ', '\n', '\r', '\u00a0', '\ufeff', '\u2028', '\u2029':
		return true
	}
	return unicode.Is(unicode.Zs, r)
}
