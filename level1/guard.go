package level1

import (
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"mcpintercept/exchange"
	"mcpintercept/mcp"
)

// RouteOptions are a route's Level 1 settings: the guards of the classifier. A new guard is a
// field here and its check in Guards.verdict.
type RouteOptions struct {
	// AllowUpgrade lists the protocols (lower-case Upgrade tokens; "connect" for CONNECT) a
	// request may switch the connection to. Any other Upgrade or CONNECT is refused with 403
	// before it reaches the upstream: after a switch nothing can be judged. h2c is refused even
	// when listed, and so is a request carrying HTTP2-Settings (the HTTP/2 connection preface is
	// refused by the exchange's framing).
	AllowUpgrade []string
	// StrictMCPHeaders refuses with 400: a JSON POST or MCP request without Mcp-Method; a request
	// whose MCP-Protocol-Version is malformed or older than 2026-07-28 (mcp.Version.ServerChecksHeaders: its server does
	// not check the headers against the body, so a policy on them can be lied to); and a request
	// repeating an Mcp-* header.
	StrictMCPHeaders bool
	// HTTPMethods, when set, are the request methods let through; any other is refused with 403
	// before it reaches the server (http_methods).
	HTTPMethods []string
}

// Guards are the checks the classification stage makes before any policy: what no rule should
// have to judge. The route's options, and the host the connection was opened for.
type Guards struct {
	RouteOptions
	// ExpectedHost, when set, is the server name the connection was opened for (a terminated
	// flow's SNI, or its destination address without one). A request whose Host (or
	// absolute-form target) names another host is refused with 421 Misdirected Request; an
	// HTTP/1.1 request without Host gets 400.
	ExpectedHost string
}

// verdict runs the guards on a request head; false refuses the request with the verdict.
func (g *Guards) verdict(h *exchange.Head, info *mcp.Info) (exchange.Verdict, bool) {
	if len(g.HTTPMethods) > 0 && !slices.Contains(g.HTTPMethods, h.Method) {
		return exchange.Verdict{Decision: exchange.Deny, Status: http.StatusForbidden,
			Reason: "method " + strconv.Quote(h.Method) + " is not allowed on this route (http_methods)"}, false
	}
	if protos, upgrade := h.UpgradeProtocols(); upgrade {
		if v, ok := upgradeVerdict(protos, g.AllowUpgrade); !ok {
			return v, false
		}
	}
	if g.ExpectedHost != "" {
		if v, ok := hostVerdict(h, g.ExpectedHost); !ok {
			return v, false
		}
	}
	if info.Err == nil && g.StrictMCPHeaders {
		if v, ok := strictVerdict(h, info); !ok {
			return v, false
		}
	}
	return exchange.Verdict{}, true
}

// upgradeVerdict refuses a protocol switch the route does not allow. After a 101 (or a 2xx to
// CONNECT) both directions are opaque and nothing more can be judged, so every protocol asked for
// must be allowed, and h2c never is: its streams would carry MCP past Level 1 unseen.
func upgradeVerdict(protos []string, allow []string) (exchange.Verdict, bool) {
	deny := func(reason string) (exchange.Verdict, bool) {
		return exchange.Verdict{Decision: exchange.Deny, Status: http.StatusForbidden, Reason: reason}, false
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
			return exchange.Verdict{Decision: exchange.Deny, Status: http.StatusBadRequest, Reason: "missing Host header"}, false
		}
	}
	misdirected := func(name string) (exchange.Verdict, bool) {
		return exchange.Verdict{Decision: exchange.Deny, Status: http.StatusMisdirectedRequest,
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
func strictVerdict(h *exchange.Head, info *mcp.Info) (exchange.Verdict, bool) {
	refuse := func(reason string) (exchange.Verdict, bool) {
		return exchange.Verdict{Decision: exchange.Deny, Status: http.StatusBadRequest, Reason: reason}, false
	}
	// The first version whose servers check the Mcp-* headers against the body: before it a
	// request can name one tool in Mcp-Name and call another in its body, and the server runs the
	// body.
	const trusted = string(mcp.V20260728)
	if info.DupHeader != "" {
		return refuse("duplicate " + info.DupHeader + " header (strict_mcp_headers)")
	}
	if v := info.Version(); v != "" || hasHeader(h, mcp.HeaderProtocolVersion) {
		if !v.Dated() {
			return refuse("malformed MCP-Protocol-Version (strict_mcp_headers)")
		}
		if !v.ServerChecksHeaders() {
			return refuse("MCP-Protocol-Version " + string(v) + " is older than " + trusted +
				": servers before " + trusted + " do not validate Mcp-* headers against the body, so the headers cannot be trusted (strict_mcp_headers)")
		}
	}
	if info.MCPMethod == "" && (info.Kind == mcp.KindMCP || (h.Method == "POST" && isJSON(info.ContentType))) {
		return refuse("this route requires the Mcp-Method header (strict_mcp_headers; clients before protocol " + trusted + " do not send it)")
	}
	return exchange.Verdict{}, true
}

func hasHeader(h *exchange.Head, name string) bool {
	_, ok := h.Get(name)
	return ok
}
