package mcp

import "strings"

// ValidTraceparent reports whether s is a W3C Trace Context traceparent a record may carry
// (version-traceid-parentid-flags, lowercase hex, ids not all zero, version ff refused, version 00
// with nothing after the flags). Requests carry it as the traceparent header or, per MCP's
// convention, as params._meta.traceparent.
func ValidTraceparent(s string) bool {
	if len(s) > 256 {
		return false
	}
	parts := strings.Split(s, "-")
	if len(parts) < 4 || len(parts[0]) != 2 || len(parts[1]) != 32 || len(parts[2]) != 16 || len(parts[3]) != 2 {
		return false
	}
	if parts[0] == "ff" || (parts[0] == "00" && len(parts) != 4) {
		return false
	}
	for _, p := range parts[:4] {
		for i := 0; i < len(p); i++ {
			if c := p[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
				return false
			}
		}
	}
	return strings.Trim(parts[1], "0") != "" && strings.Trim(parts[2], "0") != ""
}
