package mcp

import (
	"encoding/base64"
	"net/url"
	"strings"
	"unicode/utf8"
)

// The request headers MCP defines, as the specification spells them (field names are
// case-insensitive on the wire).
const (
	HeaderMethod          = "Mcp-Method"           // 2026-07-28: the JSON-RPC method of every request
	HeaderName            = "Mcp-Name"             // 2026-07-28: the tool, resource URI or prompt named by the body
	HeaderProtocolVersion = "MCP-Protocol-Version" // from 2025-06-18
	HeaderSessionID       = "Mcp-Session-Id"       // 2025-03-26 to 2025-11-25; a credential, never logged
)

// HeaderValueError is a header value that wears the =?base64?…?= markers but does not decode.
type HeaderValueError struct{ Msg string }

func (e *HeaderValueError) Error() string { return e.Msg }

const (
	b64Prefix = "=?base64?"
	b64Suffix = "?="
)

// DecodeHeaderValue decodes the MCP 2026-07-28 form for header values that are not plain ASCII,
// "=?base64?{standard Base64 of the UTF-8 bytes}?=". The markers are case-sensitive, and a value
// wearing them is always encoded (clients encode look-alikes too), so a value that has the markers
// but does not decode to UTF-8 is an error (*HeaderValueError). Any other value is returned as is.
func DecodeHeaderValue(v string) (string, error) {
	if len(v) < len(b64Prefix)+len(b64Suffix) || !strings.HasPrefix(v, b64Prefix) || !strings.HasSuffix(v, b64Suffix) {
		return v, nil
	}
	enc := v[len(b64Prefix) : len(v)-len(b64Suffix)]
	// encoding/base64 skips CR and LF; a decoder policy relies on must not be that forgiving.
	for i := 0; i < len(enc); i++ {
		if c := enc[i]; !('A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '+' || c == '/' || c == '=') {
			return "", &HeaderValueError{Msg: "invalid base64 header value"}
		}
	}
	codec := base64.StdEncoding
	if len(enc)%4 != 0 {
		codec = base64.RawStdEncoding // padding left off: unambiguous, so not worth refusing
	}
	dec, err := codec.Strict().DecodeString(enc)
	if err != nil {
		return "", &HeaderValueError{Msg: "invalid base64 header value"}
	}
	if !utf8.Valid(dec) {
		return "", &HeaderValueError{Msg: "base64 header value is not utf-8"}
	}
	return string(dec), nil
}

// RedactURI removes the userinfo, query and fragment of a URI-shaped name (one that starts with a
// scheme, as a resources/read Mcp-Name does), where credentials and signed tokens travel:
// "https://user:pw@host/x?sig=…#f" becomes "https://host/x". Anything else is returned as is. The
// rest is kept byte for byte rather than re-serialised, so a rule written against the URI as the
// client sent it still matches. A URI the parser rejects but that holds an "@" after its "//" loses
// everything up to the last "@": cutting too much is safer than leaking.
func RedactURI(s string) string {
	colon := schemeEnd(s)
	if colon < 0 {
		return s
	}
	if i := strings.IndexAny(s[colon:], "?#"); i >= 0 {
		s = s[:colon+i]
	}
	rest := s[colon+1:]
	if !strings.HasPrefix(rest, "//") {
		return s
	}
	auth := rest[2:]
	if strings.IndexByte(auth, '@') < 0 {
		return s
	}
	var at int
	if _, err := url.Parse(s); err != nil {
		at = strings.LastIndexByte(auth, '@')
	} else {
		end := strings.IndexByte(auth, '/')
		if end < 0 {
			end = len(auth)
		}
		if at = strings.LastIndexByte(auth[:end], '@'); at < 0 {
			return s // an @ in the path of a well-formed URI
		}
	}
	return s[:colon+3] + auth[at+1:]
}

// schemeEnd returns the index of the colon ending s's scheme (RFC 3986 §3.1), or -1.
func schemeEnd(s string) int {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z':
		case i > 0 && ('0' <= c && c <= '9' || c == '+' || c == '-' || c == '.'):
		case i > 0 && c == ':':
			return i
		default:
			return -1
		}
	}
	return -1
}

// PathOf returns the path of a request target: origin-form up to the query, the path part of an
// absolute-form target, "" for authority-form, "*" for asterisk-form. It is http.path at both
// levels: a rule on a path must not be bypassed by spelling the target in absolute form.
func PathOf(target string) string {
	if i := strings.IndexAny(target, "?#"); i >= 0 {
		target = target[:i]
	}
	if target == "" || target[0] == '/' || target == "*" {
		return target
	}
	if i := strings.Index(target, "://"); i > 0 {
		rest := target[i+3:]
		if j := strings.IndexByte(rest, '/'); j >= 0 {
			return rest[j:]
		}
		return "/"
	}
	return ""
}
