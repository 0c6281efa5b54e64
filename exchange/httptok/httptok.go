// Package httptok holds the HTTP token rules that framing (exchange) and the MCP header
// vocabulary (mcp) must apply alike: ASCII case folding of names and tokens, and the splitting of
// comma-separated header lists. Two copies drift (the trimming of a list element once differed
// between them); one copy cannot. It imports nothing.
package httptok

import "strings"

// EqualFold compares ASCII case-insensitively without allocating. Header names, tokens and media
// types are ASCII: Unicode folding (strings.EqualFold) would let "ſ" stand for "s".
func EqualFold(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		x, y := a[i], b[i]
		if x == y {
			continue
		}
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if 'A' <= y && y <= 'Z' {
			y += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}

// ForEachToken calls fn for each non-empty element of a comma-separated list, trimmed of OWS
// (space and tab only, as RFC 9110 defines it).
func ForEachToken(v string, fn func(string)) {
	for v != "" {
		var t string
		if i := strings.IndexByte(v, ','); i >= 0 {
			t, v = v[:i], v[i+1:]
		} else {
			t, v = v, ""
		}
		t = strings.Trim(t, " \t")
		if t != "" {
			fn(t)
		}
	}
}
