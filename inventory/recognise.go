package inventory

import (
	"bytes"
	"encoding/json"
	"strings"

	"mcpintercept/mcp"
)

// MaxHead is the most of a flow's first bytes Recognise reads (and the engine hands it): the
// request line, the headers and the start of the body of a typical first MCP request.
const MaxHead = 4096

// Head is what Recognise found in the first request of a flow nobody inspected.
type Head struct {
	Method    string // the HTTP method
	Path      string // the request path, without query
	Host      string // the Host header's name (lower case, no port); "" when absent
	Version   string // MCP-Protocol-Version, else initialize's params.protocolVersion
	MCPMethod string // Mcp-Method, else the JSON-RPC body's method
	// Why is what made the request MCP: "header Mcp-Session-Id", "accept", "json-rpc initialize".
	Why string
}

// bodyMethods are the HTTP methods whose first request can be recognised as MCP: Streamable
// HTTP POSTs its messages and GETs (or DELETEs) with the session's headers.
var bodyMethods = []string{"POST", "GET", "DELETE"}

// Recognise reports whether b (the first bytes a client sent, at most MaxHead of them are read;
// a prefix that stops anywhere is fine) is an HTTP/1.x request that is MCP: it carries one of
// MCP's headers (Mcp-Session-Id, MCP-Protocol-Version, Mcp-Method); or it is a POST that accepts
// both application/json and text/event-stream (Streamable HTTP's requirement); or its body's
// first JSON-RPC message is a request or notification of a method MCP defines. It never reads
// past b and allocates little: it runs on the flow's goroutine.
func Recognise(b []byte) (Head, bool) {
	if len(b) > MaxHead {
		b = b[:MaxHead]
	}
	var h Head
	// The request line.
	sp := bytes.IndexByte(b, ' ')
	if sp <= 0 || sp > 7 {
		return h, false
	}
	method := string(b[:sp])
	known := false
	for _, m := range bodyMethods {
		if method == m {
			known = true
			break
		}
	}
	if !known {
		return h, false
	}
	eol := bytes.IndexByte(b, '\n')
	if eol < 0 {
		return h, false
	}
	line := strings.TrimSuffix(string(b[:eol]), "\r")
	parts := strings.Split(line, " ")
	if len(parts) != 3 || !strings.HasPrefix(parts[2], "HTTP/1.") || parts[1] == "" {
		return h, false
	}
	h.Method, h.Path = method, clip(mcp.PathOf(parts[1]), maxField)
	// The headers, as far as b holds whole lines.
	rest := b[eol+1:]
	var session, acceptJSON, acceptSSE, chunked, ended bool
	var contentType string
	for len(rest) > 0 {
		i := bytes.IndexByte(rest, '\n')
		if i < 0 {
			break // a cut line: not read
		}
		ln := bytes.TrimSuffix(rest[:i], []byte{'\r'})
		rest = rest[i+1:]
		if len(ln) == 0 {
			ended = true
			break
		}
		colon := bytes.IndexByte(ln, ':')
		if colon <= 0 {
			continue
		}
		name := string(bytes.TrimSpace(ln[:colon]))
		value := string(bytes.TrimSpace(ln[colon+1:]))
		switch strings.ToLower(name) {
		case "host":
			if h.Host == "" {
				h.Host = clip(hostName(value), maxField)
			}
		case "mcp-session-id":
			session = session || value != ""
		case "mcp-protocol-version":
			if h.Version == "" {
				h.Version = clip(value, maxVersion)
			}
		case "mcp-method":
			if h.MCPMethod == "" {
				h.MCPMethod = clip(value, maxField)
			}
		case "accept":
			acceptJSON = acceptJSON || hasMediaType(value, "application/json")
			acceptSSE = acceptSSE || hasMediaType(value, "text/event-stream")
		case "content-type":
			contentType = strings.ToLower(value)
		case "transfer-encoding":
			chunked = chunked || strings.Contains(strings.ToLower(value), "chunked")
		}
	}
	switch {
	case session:
		h.Why = "header Mcp-Session-Id"
	case h.Version != "":
		h.Why = "header MCP-Protocol-Version"
	case h.MCPMethod != "":
		h.Why = "header Mcp-Method"
	case method == "POST" && acceptJSON && acceptSSE:
		h.Why = "accept"
	}
	if ended && method == "POST" && (contentType == "" || strings.HasPrefix(contentType, "application/json")) {
		body := rest
		if chunked {
			// The first chunk's size line.
			if i := bytes.IndexByte(body, '\n'); i >= 0 {
				body = body[i+1:]
			} else {
				body = nil
			}
		}
		if rpc, ok := firstMessage(body); ok && rpc.jsonrpc == "2.0" && isMCPMethod(rpc.method) {
			if h.MCPMethod == "" {
				h.MCPMethod = rpc.method
			}
			if h.Version == "" && rpc.method == mcp.MethodInitialize {
				h.Version = clip(rpc.version, maxVersion)
			}
			if h.Why == "" {
				h.Why = "json-rpc " + rpc.method
			}
		}
	}
	return h, h.Why != ""
}

const (
	maxField   = 256 // a host, a path or a method kept in the table
	maxVersion = 32
)

// clip bounds s to n bytes (on a rune boundary when it can).
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n]
	for i := 0; i < 4 && len(s) > 0 && s[len(s)-1]&0xC0 == 0x80; i++ {
		s = s[:len(s)-1]
	}
	if len(s) > 0 && s[len(s)-1] >= 0xC0 {
		s = s[:len(s)-1]
	}
	return s
}

// hostName is a Host value's name: lower case, without port, brackets or a trailing dot.
func hostName(v string) string {
	v = strings.ToLower(strings.TrimSpace(v))
	if strings.HasPrefix(v, "[") {
		if i := strings.IndexByte(v, ']'); i > 0 {
			return v[1:i]
		}
		return ""
	}
	if i := strings.LastIndexByte(v, ':'); i >= 0 && strings.Count(v, ":") == 1 {
		v = v[:i]
	}
	return strings.TrimSuffix(v, ".")
}

// hasMediaType reports whether an Accept value lists mt itself (not a wildcard: a curl POST with
// */* is no MCP client).
func hasMediaType(v, mt string) bool {
	for _, r := range strings.Split(v, ",") {
		r, _, _ = strings.Cut(r, ";")
		if strings.EqualFold(strings.TrimSpace(r), mt) {
			return true
		}
	}
	return false
}

// isMCPMethod: a method MCP defines (a request or a notification either side may send first).
func isMCPMethod(m string) bool {
	_, ok := mcp.Methods[m]
	return ok
}

// rpcHead is what firstMessage reads of a JSON-RPC message.
type rpcHead struct {
	jsonrpc, method, version string
}

// firstMessage reads the top-level jsonrpc and method members and params.protocolVersion of the
// body's first message (the first element of a batch), token by token, so that a body cut short
// still gives what came before the cut.
func firstMessage(body []byte) (rpcHead, bool) {
	var r rpcHead
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return r, false
	}
	if tok == json.Delim('[') {
		if tok, err = dec.Token(); err != nil {
			return r, false
		}
	}
	if tok != json.Delim('{') {
		return r, false
	}
	// Walk the message's members; depth counts the nesting below the message object.
	type frame struct {
		object  bool
		wantKey bool
		key     string
	}
	stack := []frame{{object: true, wantKey: true}}
	path := func() (string, string) { // the member's key, and its parent's key
		top := stack[len(stack)-1]
		parent := ""
		if len(stack) >= 2 {
			parent = stack[len(stack)-2].key
		}
		return top.key, parent
	}
	for steps := 0; steps < 512 && len(stack) > 0; steps++ {
		tok, err := dec.Token()
		if err != nil {
			break // the end of what was read, or not JSON from here on
		}
		top := &stack[len(stack)-1]
		if top.object && top.wantKey {
			if d, ok := tok.(json.Delim); ok && d == '}' {
				stack = stack[:len(stack)-1]
				if len(stack) > 0 {
					stack[len(stack)-1].wantKey = stack[len(stack)-1].object
				}
				continue
			}
			k, ok := tok.(string)
			if !ok {
				break
			}
			top.key, top.wantKey = k, false
			continue
		}
		switch v := tok.(type) {
		case json.Delim:
			switch v {
			case '{', '[':
				if len(stack) >= 8 {
					return r, r.method != ""
				}
				stack = append(stack, frame{object: v == '{', wantKey: v == '{'})
				continue
			case '}', ']':
				stack = stack[:len(stack)-1]
			}
		case string:
			key, parent := path()
			switch {
			case len(stack) == 1 && key == "jsonrpc":
				r.jsonrpc = v
			case len(stack) == 1 && key == "method":
				r.method = clip(v, maxField)
			case len(stack) == 2 && parent == "params" && key == "protocolVersion":
				r.version = v
			}
		}
		if len(stack) > 0 {
			stack[len(stack)-1].wantKey = stack[len(stack)-1].object
		}
	}
	return r, r.method != ""
}

// More reports whether the first bytes of a flow, head, may be the start of an MCP request of
// which Recognise would see more in the next read: the start of a request line of a method
// Recognise reads, or a POST whose body has not begun (or is short of its first bytes). Anything
// else, TLS, SSH or another protocol, is released to the splice after the first read.
func More(head []byte) bool {
	if len(head) >= MaxHead {
		return false
	}
	started := false
	for _, m := range bodyMethods {
		mt := m + " "
		if len(head) < len(mt) {
			if strings.HasPrefix(mt, string(head)) {
				return true
			}
			continue
		}
		if string(head[:len(mt)]) == mt {
			started = true
			break
		}
	}
	if !started {
		return false
	}
	end := bytes.Index(head, []byte("\r\n\r\n"))
	if end < 0 {
		return true // the headers go on
	}
	if !bytes.HasPrefix(head, []byte("POST ")) {
		return false
	}
	body := len(head) - end - 4
	return body < moreBody(head[:end])
}

// moreBody is how much of a POST's body Recognise wants: its first bytes hold the message's
// jsonrpc, method and (for initialize) params.protocolVersion.
func moreBody(headers []byte) int {
	const want = 1024
	for _, ln := range bytes.Split(headers, []byte("\n")) {
		name, value, ok := bytes.Cut(ln, []byte(":"))
		if !ok {
			continue
		}
		switch strings.ToLower(string(bytes.TrimSpace(name))) {
		case "content-length":
			n := 0
			for _, c := range bytes.TrimSpace(value) {
				if c < '0' || c > '9' || n > want {
					break
				}
				n = n*10 + int(c-'0')
			}
			return min(n, want)
		case "transfer-encoding":
			return want
		}
	}
	return 0 // no body announced
}
