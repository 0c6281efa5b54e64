package level1

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"net/url"
	"strings"
	"unicode/utf8"

	"mcpintercept/exchange"
)

// Kinds and transports a request is classified as.
const (
	KindMCP  = "mcp"
	KindHTTP = "http"

	TransportStreamable = "streamable-http"
	TransportSSEStream  = "sse-stream" // HTTP+SSE (2024-11-05): the GET that opens the stream
	TransportSSEPost    = "sse-post"   // HTTP+SSE: a POST to the endpoint the stream announced
)

// RequestInfo is what Level 1 knows about a request: its head only, never its body. It holds no
// credential: Authorization is reduced to presence and scheme, the session id to a hash, and
// secret-bearing headers are left out of Headers, so it can be logged and handed to policy as is.
type RequestInfo struct {
	Method, Path       string // HTTP method; path without query
	MCPMethod, MCPName string // Mcp-Method, Mcp-Name (decoded from =?base64?…?=)
	ProtocolVersion    string // MCP-Protocol-Version
	SessionHash        string // first 12 hex chars of SHA-256 of Mcp-Session-Id; "" if absent
	Accept             string
	ContentType        string
	Origin             string
	AuthPresent        bool
	AuthScheme         string // a well-known scheme name ("Bearer"), "other", or ""; never the value
	// Headers maps lower-cased names to first values, for policy. Credentials never enter it:
	// see sensitiveHeader.
	Headers   map[string]string
	Kind      string // KindMCP or KindHTTP
	Transport string // one of the Transport constants, or "" for plain HTTP
	// dupMCP names an MCP header that appeared more than once (servers disagree on which copy
	// counts); strict mode refuses such a request.
	dupMCP string
	// Err is a *MalformedError when a header MCP defines is invalid (an Mcp-Name whose
	// =?base64?…?= form does not decode); MCPName is then empty. A proxy must refuse such a request
	// rather than let a policy on names be evaded by an encoding the server reads differently.
	Err error
}

const (
	b64Prefix = "=?base64?"
	b64Suffix = "?="
)

// DecodeHeaderValue decodes the MCP 2026-07-28 form for header values that are not plain ASCII,
// "=?base64?{standard Base64 of the UTF-8 bytes}?=". The markers are case-sensitive, and a value
// wearing them is always encoded (clients encode look-alikes too), so a value that has the markers
// but does not decode to UTF-8 is an error. Any other value is returned as is.
func DecodeHeaderValue(v string) (string, error) {
	if len(v) < len(b64Prefix)+len(b64Suffix) || !strings.HasPrefix(v, b64Prefix) || !strings.HasSuffix(v, b64Suffix) {
		return v, nil
	}
	enc := v[len(b64Prefix) : len(v)-len(b64Suffix)]
	// encoding/base64 skips CR and LF; a decoder policy relies on must not be that forgiving.
	for i := 0; i < len(enc); i++ {
		if c := enc[i]; !('A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '+' || c == '/' || c == '=') {
			return "", &exchange.MalformedError{Msg: "invalid base64 header value"}
		}
	}
	codec := base64.StdEncoding
	if len(enc)%4 != 0 {
		codec = base64.RawStdEncoding // padding left off: unambiguous, so not worth refusing
	}
	dec, err := codec.Strict().DecodeString(enc)
	if err != nil {
		return "", &exchange.MalformedError{Msg: "invalid base64 header value"}
	}
	if !utf8.Valid(dec) {
		return "", &exchange.MalformedError{Msg: "base64 header value is not utf-8"}
	}
	return string(dec), nil
}

// Classify extracts MCP metadata from a request head.
//
// A request is MCP when it carries one of the MCP headers (Mcp-Method, MCP-Protocol-Version,
// Mcp-Session-Id); when it is a POST of JSON that accepts text/event-stream (Streamable HTTP before
// those headers existed); when it is a GET of …/sse accepting text/event-stream (HTTP+SSE); or when
// it is a POST of JSON to …/message(s) with a session id in the query (HTTP+SSE).
func Classify(h *exchange.Head) *RequestInfo { return classify(h, nil) }

// sessionMemo remembers the hash of the last session id seen on a connection: every request of a
// session carries the same id, and hashing it each time costs two allocations.
type sessionMemo struct{ id, hash string }

func (m *sessionMemo) hashOf(id string) string {
	if m != nil && m.hash != "" && m.id == id {
		return m.hash
	}
	sum := sha256.Sum256([]byte(id))
	hash := hex.EncodeToString(sum[:6])
	if m != nil {
		m.id, m.hash = id, hash
	}
	return hash
}

func classify(h *exchange.Head, memo *sessionMemo) *RequestInfo {
	info := &RequestInfo{
		Method: h.Method,
		Path:   PathOf(h.Target),
		// Sized for a small map (one group of 8): MCP requests rarely carry more non-secret
		// headers, and a larger hint costs three more allocations per request.
		Headers: make(map[string]string, min(len(h.Headers), 8)),
	}
	var haveMethod, haveName, haveVersion, haveSession, haveAccept, haveCT, haveOrigin bool
	acceptsSSE := false
	for _, hd := range h.Headers {
		name, v := lowerName(hd.Name), hd.Value
		switch name {
		case "mcp-method":
			if !haveMethod {
				info.MCPMethod, haveMethod = v, true
			} else {
				info.dupMCP = hd.Name
			}
		case "mcp-name":
			if !haveName {
				haveName = true
				dec, err := DecodeHeaderValue(v)
				if err != nil {
					info.Err = err
				} else {
					// A resource URI can carry credentials (userinfo, signed query strings); no
					// consumer of RequestInfo needs them, and logs and labels must not get them.
					info.MCPName = RedactURI(dec)
				}
				if info.MCPName != v {
					v = info.MCPName // Headers gets the same scrubbed name
				}
			} else {
				info.dupMCP = hd.Name
				continue
			}
		case "mcp-protocol-version":
			if !haveVersion {
				info.ProtocolVersion, haveVersion = v, true
			} else {
				info.dupMCP = hd.Name
			}
		case "mcp-session-id":
			if !haveSession {
				haveSession = true
				info.SessionHash = memo.hashOf(v)
			}
			continue
		case "accept":
			// Every line and every value counts: a client may split Accept over several lines,
			// and a server reads them all.
			acceptsSSE = acceptsSSE || acceptsEventStream(v)
			if !haveAccept {
				info.Accept, haveAccept = v, true
			} else {
				info.Accept += ", " + v
			}
			continue
		case "content-type":
			if !haveCT {
				info.ContentType, haveCT = v, true
			}
		case "origin":
			if !haveOrigin {
				info.Origin, haveOrigin = v, true
			}
		case "authorization":
			if !info.AuthPresent {
				info.AuthPresent = true
				info.AuthScheme = authScheme(v)
			}
			continue
		}
		if sensitiveHeader(name) {
			continue
		}
		if _, dup := info.Headers[name]; !dup {
			info.Headers[name] = v
		}
	}
	if haveAccept {
		info.Headers["accept"] = info.Accept
	}
	json := isJSON(info.ContentType)
	switch {
	case h.Method == "GET" && hasPathSuffix(info.Path, "/sse") && acceptsSSE:
		info.Kind, info.Transport = KindMCP, TransportSSEStream
	case h.Method == "POST" && json && (hasPathSuffix(info.Path, "/message") || hasPathSuffix(info.Path, "/messages")) && hasSessionQuery(h.Target):
		info.Kind, info.Transport = KindMCP, TransportSSEPost
	case haveMethod || haveVersion || haveSession || (h.Method == "POST" && json && acceptsSSE):
		info.Kind, info.Transport = KindMCP, TransportStreamable
	default:
		info.Kind = KindHTTP
	}
	return info
}

// lowerName returns the lower-cased header name, without allocating for the names MCP traffic
// carries.
func lowerName(name string) string {
	if n, ok := knownNames[name]; ok {
		return n
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; 'A' <= c && c <= 'Z' {
			return strings.ToLower(name)
		}
	}
	return name
}

// knownNames maps the spellings clients use for common headers to their lower-case form.
var knownNames = func() map[string]string {
	m := map[string]string{}
	for _, n := range []string{
		"Host", "User-Agent", "Accept", "Accept-Encoding", "Accept-Language", "Content-Type",
		"Content-Length", "Connection", "Keep-Alive", "Transfer-Encoding", "Upgrade", "Expect",
		"Origin", "Referer", "Cache-Control", "Pragma", "Date", "TE", "Trailer", "Via",
		"Authorization", "Cookie", "Last-Event-ID", "Last-Event-Id", "Traceparent", "Tracestate",
		"X-Forwarded-For", "X-Forwarded-Proto", "X-Forwarded-Host", "X-Request-Id", "X-Request-ID",
		"Mcp-Method", "Mcp-Name", "MCP-Method", "MCP-Name", "Mcp-Protocol-Version",
		"MCP-Protocol-Version", "Mcp-Session-Id", "MCP-Session-Id", "Sec-Fetch-Mode",
		"Sec-Fetch-Site", "Sec-Fetch-Dest",
	} {
		l := strings.ToLower(n)
		m[n], m[l] = l, l
	}
	return m
}()

// sensitiveHeader reports names whose values may be credentials; they never reach Headers, and so
// never reach policy or logs.
func sensitiveHeader(lower string) bool {
	switch lower {
	case "authorization", "proxy-authorization", "cookie", "set-cookie", "mcp-session-id":
		return true
	case "host", "user-agent", "accept", "content-type", "content-length", "mcp-method",
		"mcp-name", "mcp-protocol-version", "origin", "accept-encoding", "connection":
		return false
	}
	for _, s := range sensitiveParts {
		if strings.Contains(lower, s) {
			return true
		}
	}
	return false
}

// sensitiveParts catches custom credential headers (X-Api-Key, X-Auth-Token, Private-Token, …).
var sensitiveParts = []string{"token", "secret", "api-key", "apikey", "api_key", "auth", "password", "credential", "session"}

// authSchemes are the scheme names AuthScheme may report. Anything else is "other": a client that
// sends a bare credential with no scheme must not have its credential logged as the scheme.
var authSchemes = []string{
	"Basic", "Bearer", "Digest", "DPoP", "Negotiate", "NTLM", "HOBA", "Mutual", "Token",
	"AWS4-HMAC-SHA256", "SCRAM-SHA-1", "SCRAM-SHA-256", "vapid", "GNAP", "PrivateToken",
}

func authScheme(v string) string {
	sp := strings.IndexAny(v, " \t")
	if sp <= 0 {
		return "other"
	}
	for _, s := range authSchemes {
		if equalFold(v[:sp], s) {
			return s
		}
	}
	return "other"
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

func hasPathSuffix(path, suffix string) bool {
	path = strings.TrimSuffix(path, "/")
	return len(path) >= len(suffix) && equalFold(path[len(path)-len(suffix):], suffix)
}

// hasSessionQuery reports a sessionId (TypeScript SDK) or session_id (Python SDK) query parameter.
func hasSessionQuery(target string) bool {
	i := strings.IndexByte(target, '?')
	if i < 0 {
		return false
	}
	q := target[i+1:]
	for q != "" {
		var kv string
		if j := strings.IndexByte(q, '&'); j >= 0 {
			kv, q = q[:j], q[j+1:]
		} else {
			kv, q = q, ""
		}
		if strings.HasPrefix(kv, "sessionId=") || strings.HasPrefix(kv, "session_id=") {
			return true
		}
	}
	return false
}

// isJSON accepts application/json and any +json media type, ignoring parameters.
func isJSON(ct string) bool {
	if i := strings.IndexByte(ct, ';'); i >= 0 {
		ct = ct[:i]
	}
	ct = strings.TrimSpace(ct)
	return equalFold(ct, "application/json") || (len(ct) > 5 && equalFold(ct[len(ct)-5:], "+json"))
}

// acceptsEventStream reports whether one Accept field value admits text/event-stream: the media
// range text/event-stream, text/* or */*, with any q-value but 0 (RFC 9110 §12.5.1: q=0 means
// "not acceptable").
func acceptsEventStream(v string) bool {
	return acceptsRange(v, "text/event-stream", "text/*", "*/*")
}

// acceptsRange reports whether one Accept field value lists one of ranges with a q-value other
// than 0.
func acceptsRange(v string, ranges ...string) bool {
	ok := false
	forEachToken(v, func(t string) {
		if ok {
			return
		}
		mt, params, _ := strings.Cut(t, ";")
		mt = strings.TrimSpace(mt)
		listed := false
		for _, r := range ranges {
			listed = listed || equalFold(mt, r)
		}
		if !listed {
			return
		}
		for params != "" {
			var p string
			p, params, _ = strings.Cut(params, ";")
			k, val, _ := strings.Cut(p, "=")
			if equalFold(strings.TrimSpace(k), "q") && qZero(strings.TrimSpace(val)) {
				return
			}
		}
		ok = true
	})
	return ok
}

// Accepts reports whether any Accept line of h admits one of the media ranges (q=0 excluded), the
// one reading of Accept that Level 1 and Level 2 share.
func Accepts(h *exchange.Head, ranges ...string) bool {
	for _, hd := range h.Headers {
		if equalFold(hd.Name, "Accept") && acceptsRange(hd.Value, ranges...) {
			return true
		}
	}
	return false
}

// qZero reports a q-value of 0 ("0", "0.", "0.000").
func qZero(q string) bool {
	if q == "" || q[0] != '0' {
		return false
	}
	for i := 1; i < len(q); i++ {
		if q[i] != '.' && q[i] != '0' {
			return false
		}
	}
	return true
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
