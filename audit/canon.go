package audit

import (
	"bytes"
	"unicode/utf8"
)

// maxCanonDepth bounds the nesting isCanonicalJSON follows; deeper
// documents take jcs.Transform.
const maxCanonDepth = 32

type canonFrame struct {
	obj        bool
	hasKey     bool
	keyFrom    int // the previous key's bytes in the document, without quotes
	keyTo      int
	afterComma bool
}

// isCanonicalJSON reports whether b is already in the RFC 8785 (JCS) form
// jcs.Transform gives it, without allocating: no insignificant whitespace,
// object keys unique and in order of their UTF-16 code units, strings
// escaped exactly as JCS does, numbers as ECMAScript writes them. It answers
// true only when sure: numbers other than integers of at most 15 digits
// (no fraction, no exponent, not -0), keys holding an escape or a character
// outside the Basic Multilingual Plane (whose UTF-16 order differs from
// their byte order), and nesting deeper than maxCanonDepth all answer false,
// and the caller then runs jcs.Transform.
func isCanonicalJSON(b []byte) bool {
	var stack [maxCanonDepth]canonFrame
	depth, i := 0, 0
	var ok bool
	for {
		// A value starts at i.
		if i >= len(b) {
			return false
		}
		switch c := b[i]; {
		case c == '{' || c == '[':
			if depth == len(stack) {
				return false
			}
			i++
			closing := byte(']')
			if c == '{' {
				closing = '}'
			}
			if i < len(b) && b[i] == closing {
				i++
				break // an empty object or array is a whole value
			}
			stack[depth] = canonFrame{obj: c == '{'}
			depth++
			if c == '{' {
				if i, ok = canonKey(b, i, &stack[depth-1]); !ok {
					return false
				}
			}
			continue
		case c == '"':
			if i, _, ok = canonString(b, i); !ok {
				return false
			}
		case c == 't':
			if !bytes.HasPrefix(b[i:], []byte("true")) {
				return false
			}
			i += 4
		case c == 'f':
			if !bytes.HasPrefix(b[i:], []byte("false")) {
				return false
			}
			i += 5
		case c == 'n':
			if !bytes.HasPrefix(b[i:], []byte("null")) {
				return false
			}
			i += 4
		case c == '-' || '0' <= c && c <= '9':
			if i, ok = canonInt(b, i); !ok {
				return false
			}
		default:
			return false
		}
		// A value ends at i: close what it ends, then find the next one.
		for {
			if depth == 0 {
				return i == len(b)
			}
			if i >= len(b) {
				return false
			}
			top := &stack[depth-1]
			if b[i] == ',' {
				i++
				if top.obj {
					if i, ok = canonKey(b, i, top); !ok {
						return false
					}
				}
				break
			}
			if top.obj && b[i] == '}' || !top.obj && b[i] == ']' {
				i++
				depth--
				continue
			}
			return false
		}
	}
}

// canonKey checks the key at i, and the colon after it, against the
// previous key of the object f; it returns where the value begins.
func canonKey(b []byte, i int, f *canonFrame) (int, bool) {
	if i >= len(b) || b[i] != '"' {
		return 0, false
	}
	end, simple, ok := canonString(b, i)
	if !ok || !simple || end >= len(b) || b[end] != ':' {
		return 0, false
	}
	from, to := i+1, end-1
	if f.hasKey && bytes.Compare(b[f.keyFrom:f.keyTo], b[from:to]) >= 0 {
		return 0, false // out of order, or a duplicate
	}
	f.hasKey, f.keyFrom, f.keyTo = true, from, to
	return end + 1, true
}

// canonString checks the string whose opening quote is at i and returns the
// index after its closing quote. simple says it holds no escape and no
// character outside the Basic Multilingual Plane, so its bytes sort as its
// UTF-16 code units do.
func canonString(b []byte, i int) (end int, simple, ok bool) {
	simple = true
	for i++; i < len(b); {
		c := b[i]
		switch {
		case c == '"':
			return i + 1, simple, true
		case c == '\\':
			simple = false
			if i+1 >= len(b) {
				return 0, false, false
			}
			switch b[i+1] {
			case '"', '\\', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				// JCS writes \u00xx (lower-case hex) only for the control
				// characters that have no short escape.
				if i+6 > len(b) || b[i+2] != '0' || b[i+3] != '0' || b[i+4] != '0' && b[i+4] != '1' {
					return 0, false, false
				}
				h := b[i+5]
				var v byte
				switch {
				case '0' <= h && h <= '9':
					v = h - '0'
				case 'a' <= h && h <= 'f':
					v = h - 'a' + 10
				default:
					return 0, false, false
				}
				v += (b[i+4] - '0') << 4
				if v == '\b' || v == '\f' || v == '\n' || v == '\r' || v == '\t' {
					return 0, false, false
				}
				i += 6
			default:
				return 0, false, false
			}
		case c < 0x20:
			return 0, false, false
		case c < utf8.RuneSelf:
			i++
		default:
			r, size := utf8.DecodeRune(b[i:])
			if r == utf8.RuneError && size <= 1 {
				return 0, false, false
			}
			if size == 4 {
				simple = false
			}
			i += size
		}
	}
	return 0, false, false
}

// canonInt checks an integer of at most 15 digits (exactly representable,
// so ECMAScript writes it as it is) at i and returns the index after it.
func canonInt(b []byte, i int) (int, bool) {
	neg := b[i] == '-'
	if neg {
		i++
	}
	if i >= len(b) {
		return 0, false
	}
	switch c := b[i]; {
	case c == '0':
		if neg {
			return 0, false // -0 is written 0
		}
		i++
	case '1' <= c && c <= '9':
		from := i
		for i < len(b) && '0' <= b[i] && b[i] <= '9' {
			i++
		}
		if i-from > 15 {
			return 0, false
		}
	default:
		return 0, false
	}
	if i < len(b) && (b[i] == '.' || b[i] == 'e' || b[i] == 'E' || '0' <= b[i] && b[i] <= '9') {
		return 0, false
	}
	return i, true
}
