package mcp

import "bytes"

// Navigation over JSON the decoder has validated (a Message's raw members, or a body ValidateJSON
// accepted). These helpers do not check the grammar again: they jump from token to token and are
// exact only on bytes that passed the strict scan, which is what lets Level 2 read and rewrite a
// message by byte spans, leaving everything else (key order, number spelling, escapes,
// whitespace) as the peer wrote it. On other input their result is unspecified and they may
// panic.

// Member returns the value of the top-level member name of obj, which must be an object the
// decoder validated, without allocating. Keys are compared unescaped and exactly (the decoder
// refused duplicates and case variants, so there is at most one); false when there is no such
// member.
func Member(obj []byte, name string) ([]byte, bool) {
	i := 1
	for {
		i = SkipSpace(obj, i)
		if i >= len(obj) || obj[i] != '"' {
			return nil, false
		}
		ke := SkipString(obj, i)
		key := obj[i:ke]
		i = SkipSpace(obj, ke)
		i = SkipSpace(obj, i+1) // ':'
		ve := SkipValue(obj, i)
		if keyEquals(key, name) {
			return obj[i:ve], true
		}
		i = SkipSpace(obj, ve)
		if i >= len(obj) || obj[i] != ',' {
			return nil, false
		}
		i++
	}
}

// keyEquals compares a quoted key with name without unescaping when the key has no escape.
func keyEquals(quoted []byte, name string) bool {
	if bytes.IndexByte(quoted, '\\') < 0 {
		return string(quoted[1:len(quoted)-1]) == name
	}
	return Unquote(quoted) == name
}

func SkipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// SkipString returns the index after the closing quote of the validated string at b[i]. It
// jumps from quote to quote (bytes.IndexByte is vectorised: the member lookups of every message
// skip long argument strings with it); a quote closes the string when an even number of
// backslashes precedes it, since in a valid string each backslash run is pairs of escaped
// backslashes, plus one more when it escapes the quote.
func SkipString(b []byte, i int) int {
	j := i + 1
	for j < len(b) {
		k := bytes.IndexByte(b[j:], '"')
		if k < 0 {
			break
		}
		q := j + k
		n := 0
		for p := q - 1; p > i && b[p] == '\\'; p-- {
			n++
		}
		if n%2 == 0 {
			return q + 1
		}
		j = q + 1
	}
	return len(b)
}

// SkipValue returns the index after the validated value starting at b[i].
func SkipValue(b []byte, i int) int {
	if i >= len(b) {
		return i
	}
	switch b[i] {
	case '"':
		return SkipString(b, i)
	case '{', '[':
		depth := 0
		for ; i < len(b); i++ {
			switch b[i] {
			case '"':
				i = SkipString(b, i) - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
		}
		return len(b)
	default:
		for i < len(b) && b[i] != ',' && b[i] != '}' && b[i] != ']' && b[i] != ' ' && b[i] != '\t' && b[i] != '\n' && b[i] != '\r' {
			i++
		}
		return i
	}
}

// MemberAt is where a member's key and value lie in an object, as offsets into the object.
type MemberAt struct {
	KeyStart   int // the key's opening quote
	ValStart   int
	ValEnd     int
	Found      bool
	AfterComma int // end of the member including a following comma and space (for removal), else ValEnd
}

// MemberSpan finds the top-level member name of obj, an object the decoder validated, as
// Member does, and says where its key and value lie so that a rewriter can splice over them.
func MemberSpan(obj []byte, name string) MemberAt {
	if len(obj) == 0 || obj[0] != '{' {
		return MemberAt{}
	}
	i := 1
	for {
		i = SkipSpace(obj, i)
		if i >= len(obj) || obj[i] != '"' {
			return MemberAt{}
		}
		ks := i
		ke := SkipString(obj, i)
		i = SkipSpace(obj, ke)
		i = SkipSpace(obj, i+1) // ':'
		vs := i
		ve := SkipValue(obj, i)
		i = SkipSpace(obj, ve)
		if keyEquals(obj[ks:ke], name) {
			m := MemberAt{KeyStart: ks, ValStart: vs, ValEnd: ve, Found: true, AfterComma: ve}
			if i < len(obj) && obj[i] == ',' {
				m.AfterComma = SkipSpace(obj, i+1)
			}
			return m
		}
		if i >= len(obj) || obj[i] != ',' {
			return MemberAt{}
		}
		i++
	}
}

// Elements returns the spans of the elements of arr, an array the decoder validated, as offsets
// into arr; nil when arr is not an array.
func Elements(arr []byte) [][2]int {
	if len(arr) < 2 || arr[0] != '[' {
		return nil
	}
	var out [][2]int
	i := SkipSpace(arr, 1)
	if i < len(arr) && arr[i] == ']' {
		return out
	}
	for i < len(arr) {
		s := i
		e := SkipValue(arr, i)
		out = append(out, [2]int{s, e})
		i = SkipSpace(arr, e)
		if i >= len(arr) || arr[i] != ',' {
			break
		}
		i = SkipSpace(arr, i+1)
	}
	return out
}

// StringMember is the top-level member name of obj, an object the decoder validated, unquoted;
// false when it is absent or not a string.
func StringMember(obj []byte, name string) (string, bool) {
	v, ok := Member(obj, name)
	if !ok || len(v) == 0 || v[0] != '"' {
		return "", false
	}
	return Unquote(v), true
}

// IsObject reports whether the validated value v is an object.
func IsObject(v []byte) bool { return len(v) > 0 && v[0] == '{' }
