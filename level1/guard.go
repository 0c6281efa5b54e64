package level1

import (
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"

	"mcpintercept/exchange"
	"mcpintercept/policy"
)

// MinTrustedMCPVersion is the first MCP protocol version whose servers check the Mcp-* headers
// against the body. Before it the headers are only the client's claim: a request can name one
// tool in Mcp-Name and call another in its body, and the server runs the body.
const MinTrustedMCPVersion = "2026-07-28"

// upgradeVerdict refuses a protocol switch the route does not allow. After a 101 (or a 2xx to
// CONNECT) both directions are opaque and nothing more can be judged, so every protocol asked for
// must be allowed, and h2c never is: its streams would carry MCP past Level 1 unseen.
func upgradeVerdict(protos []string, allow []string) (exchange.Verdict, bool) {
	deny := func(reason string) (exchange.Verdict, bool) {
		return exchange.Verdict{Decision: policy.ActionDeny, Status: http.StatusForbidden, Reason: reason}, false
	}
	if len(protos) == 0 {
		return deny("protocol upgrade without a protocol is not allowed")
	}
	for _, p := range protos {
		switch {
		case p == "h2c":
			return deny("protocol upgrade to h2c is never allowed through Level 1 (its HTTP/2 streams could not be inspected)")
		case slices.Contains(allow, p):
		case p == "connect":
			return deny("CONNECT is not allowed on this route (allow_upgrade)")
		default:
			return deny("protocol upgrade to " + p + " is not allowed on this route (allow_upgrade)")
		}
	}
	return exchange.Verdict{}, true
}

// hostVerdict ties the request to the server name the connection was opened for (the SNI of a
// terminated TLS flow): a client must not choose a route by one name and address another (RFC
// 9110 §15.5.20, 421 Misdirected Request). The Host header and an absolute-form target's
// authority must both name it.
func hostVerdict(h *exchange.Head, expected string) (exchange.Verdict, bool) {
	host, ok := h.Get("Host")
	if !ok {
		if h.Proto == "HTTP/1.0" && !strings.Contains(h.Target, "://") {
			return exchange.Verdict{}, true
		}
		if h.Proto != "HTTP/1.0" {
			return exchange.Verdict{Decision: policy.ActionDeny, Status: http.StatusBadRequest, Reason: "missing Host header"}, false
		}
	}
	misdirected := func(name string) (exchange.Verdict, bool) {
		return exchange.Verdict{Decision: policy.ActionDeny, Status: http.StatusMisdirectedRequest,
			Reason: "misdirected request: host " + name + " is not the server name this connection was opened for"}, false
	}
	if ok && !SameHost(host, expected) {
		return misdirected(host)
	}
	if i := strings.Index(h.Target, "://"); i > 0 {
		auth := h.Target[i+3:]
		if j := strings.IndexAny(auth, "/?#"); j >= 0 {
			auth = auth[:j]
		}
		if k := strings.LastIndexByte(auth, '@'); k >= 0 {
			auth = auth[k+1:]
		}
		if !SameHost(auth, expected) {
			return misdirected(auth)
		}
	}
	return exchange.Verdict{}, true
}

// SameHost reports whether the host part of authority (a Host header value: port and IPv6
// brackets allowed) names host: case-insensitively, ignoring a trailing dot, and comparing IP
// addresses as addresses.
func SameHost(authority, host string) bool {
	a, b := hostPart(authority), hostPart(host)
	if a == "" || b == "" {
		return false
	}
	if ia, err := netip.ParseAddr(a); err == nil {
		ib, err := netip.ParseAddr(b)
		return err == nil && ia.Unmap() == ib.Unmap()
	}
	return strings.EqualFold(a, b)
}

// hostPart strips the port, IPv6 brackets and a trailing dot.
func hostPart(s string) string {
	s = strings.TrimSpace(s)
	if h, _, err := net.SplitHostPort(s); err == nil {
		s = h
	} else if strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]") {
		s = s[1 : len(s)-1]
	}
	return strings.TrimSuffix(s, ".")
}

// strictVerdict enforces StrictMCPHeaders: on such a route the Mcp-* headers are what policy
// judges, so a request must carry them, once each, at a version whose servers hold the body to
// them.
func strictVerdict(h *exchange.Head, info *RequestInfo) (exchange.Verdict, bool) {
	refuse := func(reason string) (exchange.Verdict, bool) {
		return exchange.Verdict{Decision: policy.ActionDeny, Status: http.StatusBadRequest, Reason: reason}, false
	}
	if info.dupMCP != "" {
		return refuse("duplicate " + info.dupMCP + " header (strict_mcp_headers)")
	}
	if v := info.ProtocolVersion; v != "" || hasHeader(h, "mcp-protocol-version") {
		if !validDate(v) {
			return refuse("malformed MCP-Protocol-Version (strict_mcp_headers)")
		}
		if v < MinTrustedMCPVersion {
			return refuse("MCP-Protocol-Version " + v + " is older than " + MinTrustedMCPVersion +
				": servers before " + MinTrustedMCPVersion + " do not validate Mcp-* headers against the body, so the headers cannot be trusted (strict_mcp_headers)")
		}
	}
	if info.MCPMethod == "" && (info.Kind == KindMCP || (h.Method == "POST" && isJSON(info.ContentType))) {
		return refuse("this route requires the Mcp-Method header (strict_mcp_headers; clients before protocol " + MinTrustedMCPVersion + " do not send it)")
	}
	return exchange.Verdict{}, true
}

func hasHeader(h *exchange.Head, name string) bool {
	_, ok := h.Get(name)
	return ok
}

// validDate accepts YYYY-MM-DD, the form of MCP protocol versions, which then compare as strings.
func validDate(v string) bool {
	if len(v) != 10 || v[4] != '-' || v[7] != '-' {
		return false
	}
	for i := 0; i < len(v); i++ {
		if i != 4 && i != 7 && (v[i] < '0' || v[i] > '9') {
			return false
		}
	}
	return true
}
