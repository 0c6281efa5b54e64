package auth

import (
	"context"
	"encoding/base64"
	"net"
	"net/url"
	"strconv"
	"strings"
)

// Credentials are the places of one request a server may read an access
// token from: MCP clients use only Authorization (MCP authorization: "MUST
// use the Authorization request header"), but a server's framework may also
// read the URI query (RFC 6750 §2.3) or a cookie, and a token there would
// reach it unjudged.
type Credentials struct {
	Authorization []string // every Authorization value, in order
	Target        string   // the request target as received (origin- or absolute-form)
	Cookies       []string // every Cookie value, in order
}

// Empty reports whether the request carries nothing CheckRequest would read
// (the common case, checked without allocating).
func (cr Credentials) Empty() bool {
	return len(cr.Authorization) == 0 && len(cr.Cookies) == 0 && !strings.Contains(cr.Target, "?")
}

// CheckRequest judges every token carrier of one request:
//   - a token in the query (access_token, in any spelling a server would
//     read as that name) is refused: MCP forbids tokens in the URI, so no
//     client of its sends one, and it would be logged by every proxy on the
//     way;
//   - Authorization is judged by Check (Bearer and DPoP, any other scheme
//     refused);
//   - a cookie value that any server could read as a JWT is judged as a
//     bearer token would be and refused when it fails; other cookie values
//     (session ids: the server's own state, set by it for its origin) pass.
//     A cookie never makes the request's credential: auth.present and the
//     caller in records come from Authorization alone, so a rule that wants
//     a checked token refuses a request whose only credential is a cookie.
func (c *Checker) CheckRequest(ctx context.Context, cr Credentials, canonical string) (Result, error) {
	base := Result{Present: len(cr.Authorization) > 0}
	if tokenInQuery(cr.Target) {
		return refuse(base, KindCarrier, "access_token in the request URI: MCP forbids tokens in the query; send it in Authorization")
	}
	r, err := c.Check(ctx, cr.Authorization, canonical)
	if err != nil {
		return r, err
	}
	for _, tok := range cookieJWTs(cr.Cookies) {
		if len(tok) > c.maxHeader {
			return refuse(base, KindOversized, "cookie token over %d bytes", c.maxHeader)
		}
		cr, err := c.checkBearer(ctx, Result{Present: true, Scheme: "bearer"}, tok, canonicalize(canonical))
		if err != nil {
			cr.Present, cr.Scheme = base.Present, r.Scheme
			cr.Reason = "cookie: " + cr.Reason
			return cr, err
		}
	}
	return r, nil
}

// tokenInQuery reports whether a request target's query names access_token
// as any server would read it: parameters split on '&' and ';' (older Go and
// Python split on both), past a '#' too (a target has no fragment; a server
// that splits on '?' alone reads it as query), '+' and %XX decoded, the
// name compared case-insensitively, with PHP's mangling (' ', '.' and '['
// read as '_') and an array suffix ("access_token[]") undone.
func tokenInQuery(target string) bool {
	_, q, ok := strings.Cut(target, "?")
	if !ok {
		return false
	}
	for q != "" {
		var part string
		if i := strings.IndexAny(q, "&;#"); i >= 0 {
			part, q = q[:i], q[i+1:]
		} else {
			part, q = q, ""
		}
		name, _, _ := strings.Cut(part, "=")
		if isAccessToken(name) {
			return true
		}
	}
	return false
}

func isAccessToken(raw string) bool {
	name := strings.ReplaceAll(raw, "+", " ")
	if d, err := url.PathUnescape(name); err == nil {
		name = d
	} else {
		name = lenientUnescape(name)
	}
	name = strings.ToLower(strings.TrimLeft(name, " "))
	if n, _, found := strings.Cut(name, "["); found && n == "access_token" {
		return true
	}
	mangled := strings.Map(func(r rune) rune {
		if r == ' ' || r == '.' || r == '[' {
			return '_'
		}
		return r
	}, name)
	return name == "access_token" || mangled == "access_token"
}

// lenientUnescape decodes every valid %XX and keeps the rest as written, as
// Python's unquote and Node's querystring do with a malformed escape.
func lenientUnescape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+3], 16, 8); err == nil {
				b.WriteByte(byte(v))
				i += 2
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// maxCookieTokens bounds the cookie values judged per request: each may
// cost a JWS parse.
const maxCookieTokens = 8

// cookieJWTs are the cookie values of a request that some server could read
// as a JWT: each pair of every Cookie header (split on ';' and ','), its
// value (or the whole pair when it has no '='), trimmed, unquoted and
// %-decoded, that has a JWS's three parts of which the first decodes
// (padded or not, either base64 alphabet) to a JSON object. More than
// maxCookieTokens of them are returned as one unparseable value, refused.
func cookieJWTs(values []string) []string {
	var out []string
	for _, v := range values {
		for _, pair := range strings.FieldsFunc(v, func(r rune) bool { return r == ';' || r == ',' }) {
			val := pair
			if _, after, ok := strings.Cut(pair, "="); ok {
				val = after
			}
			val = strings.Trim(val, " \t")
			if len(val) >= 2 && val[0] == '"' && val[len(val)-1] == '"' {
				val = val[1 : len(val)-1]
			}
			if strings.Contains(val, "%") {
				val = lenientUnescape(val)
			}
			if !jwtLike(val) {
				continue
			}
			if len(out) == maxCookieTokens {
				return []string{"too.many.tokens"}
			}
			out = append(out, val)
		}
	}
	return out
}

// jwtLike: three dot-separated parts, the first a base64 JSON object.
func jwtLike(s string) bool {
	if strings.Count(s, ".") != 2 {
		return false
	}
	head := strings.TrimRight(s[:strings.IndexByte(s, '.')], "=")
	for _, enc := range []*base64.Encoding{base64.RawURLEncoding, base64.RawStdEncoding} {
		if b, err := enc.DecodeString(head); err == nil {
			return strings.HasPrefix(strings.TrimLeft(string(b), " \t\r\n"), "{")
		}
	}
	return false
}

// TargetAuthority is the scheme and authority of an absolute-form request
// target (RFC 9112 §3.2.2), user info removed; ok is false for any other
// form. A server that receives absolute-form MUST use this authority and
// ignore Host. The authority ends at a backslash too, as WHATWG URL ends a
// special scheme's (new URL("http://a\\@b/") has host a). AmbiguousTarget
// says when parsers may read another authority at all.
func TargetAuthority(target string) (scheme, authority string, ok bool) {
	scheme, rest, ok := splitTarget(target)
	if !ok {
		return "", "", false
	}
	if j := strings.IndexAny(rest, "/?#\\"); j >= 0 {
		rest = rest[:j]
	}
	if k := strings.LastIndexByte(rest, '@'); k >= 0 {
		rest = rest[k+1:]
	}
	return scheme, rest, true
}

// splitTarget is an absolute-form target's scheme, lower case, and what
// follows "://".
func splitTarget(target string) (scheme, rest string, ok bool) {
	i := strings.Index(target, "://")
	if i <= 0 || strings.ContainsAny(target[:i], "/?#") {
		return "", "", false
	}
	return strings.ToLower(target[:i]), target[i+3:], true
}

// AmbiguousTarget is why parsers may read another server from an
// absolute-form target than TargetAuthority does ("" when none, and for
// any other form): a backslash anywhere (WHATWG URL reads it as "/" in a
// special scheme, RFC 3986 parsers as a byte of the authority or path) or
// user info (parsers find its end at the first or the last "@", and at a
// backslash or not). No honest client sends either: RFC 9110 §4.2.4 forbids
// user info in an http(s) URI sent, and RFC 3986 has no backslash.
func AmbiguousTarget(target string) string {
	_, rest, ok := splitTarget(target)
	switch {
	case !ok:
		return ""
	case strings.IndexByte(target, '\\') >= 0:
		return "has a backslash"
	}
	if j := strings.IndexAny(rest, "/?#"); j >= 0 {
		rest = rest[:j]
	}
	if strings.IndexByte(rest, '@') >= 0 {
		return "has user info"
	}
	return ""
}

// SameAuthority reports whether two authorities (Host values, or a
// target's) name the same server under scheme: host compared
// case-insensitively without a trailing dot (IP addresses as addresses),
// ports compared with the scheme's default filled in. An authority that
// does not parse names no server: false.
func SameAuthority(scheme, a, b string) bool {
	ha, pa, oka := splitAuthority(scheme, a)
	hb, pb, okb := splitAuthority(scheme, b)
	return oka && okb && pa == pb && ha == hb
}

func splitAuthority(scheme, a string) (string, int, bool) {
	host, port := a, defaultPort(strings.ToLower(scheme))
	if h, p, err := net.SplitHostPort(a); err == nil {
		n, err := strconv.Atoi(p)
		if err != nil || n <= 0 || n > 65535 {
			return "", 0, false
		}
		host, port = h, n
	} else if strings.HasPrefix(a, "[") && strings.HasSuffix(a, "]") {
		host = a[1 : len(a)-1]
	} else if strings.ContainsAny(a, ":[]") {
		return "", 0, false
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if host == "" {
		return "", 0, false
	}
	if ip := net.ParseIP(host); ip != nil {
		host = ip.String()
	}
	return host, port, true
}

// TokenInQuery reports whether a request target carries an access token in its query
// (access_token, as servers' query parsers read it).
func TokenInQuery(target string) bool { return tokenInQuery(target) }
