package level1

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"mcpintercept/exchange"
	"mcpintercept/mcp"
)

// Classify extracts MCP metadata from a request head. The Info it returns holds an Mcp-Name that
// does not decode as an *exchange.MalformedError in Err (the exchange answers those with 400).
//
// A request is MCP when it carries one of the MCP headers (Mcp-Method, MCP-Protocol-Version,
// Mcp-Session-Id); when it is a POST of JSON that accepts text/event-stream (Streamable HTTP before
// those headers existed); when it is a GET of …/sse accepting text/event-stream (HTTP+SSE); or when
// it is a POST of JSON to …/message(s) with a session id in the query (HTTP+SSE).
func Classify(h *exchange.Head) *mcp.Info { return classify(h, nil) }

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

func classify(h *exchange.Head, memo *sessionMemo) *mcp.Info {
	info := &mcp.Info{
		Method: h.Method,
		Path:   mcp.PathOf(h.Target),
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
				info.DupHeader = hd.Name
			}
		case "mcp-name":
			if !haveName {
				haveName = true
				dec, err := mcp.DecodeHeaderValue(v)
				if err != nil {
					info.Err = &exchange.MalformedError{Msg: err.Error()}
				} else {
					// A resource URI can carry credentials (userinfo, signed query strings); no
					// consumer of Info needs them, and logs and labels must not get them.
					info.MCPName = mcp.RedactURI(dec)
				}
				if info.MCPName != v {
					v = info.MCPName // Headers gets the same scrubbed name
				}
			} else {
				info.DupHeader = hd.Name
				continue
			}
		case "mcp-protocol-version":
			if !haveVersion {
				info.ProtocolVersion, haveVersion = v, true
			} else {
				info.DupHeader = hd.Name
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
			acceptsSSE = acceptsSSE || mcp.AcceptsEventStream(v)
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
		info.Kind, info.Transport = mcp.KindMCP, mcp.TransportSSEStream
	case h.Method == "POST" && json && (hasPathSuffix(info.Path, "/message") || hasPathSuffix(info.Path, "/messages")) && hasSessionQuery(h.Target):
		info.Kind, info.Transport = mcp.KindMCP, mcp.TransportSSEPost
	case haveMethod || haveVersion || haveSession || (h.Method == "POST" && json && acceptsSSE):
		info.Kind, info.Transport = mcp.KindMCP, mcp.TransportStreamable
	default:
		info.Kind = mcp.KindHTTP
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
