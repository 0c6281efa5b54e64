package level2

import (
	"net/netip"
	"strconv"
	"strings"
	"time"

	"mcpintercept/exchange"
	"mcpintercept/integrity"
	"mcpintercept/mcp"
	"mcpintercept/policy"
)

// Tool integrity (tool_pins): every tools/list, prompts/list, resources/templates/list and
// server/discover result is handed to the route's guard (Flow.Tools), which pins each
// definition per server and judges it; a quarantined one is hidden from the list through the
// same filter as policy's, and a call that names it is refused with CodeQuarantined before the
// server sees it. The guard's verdict fills mcp.tool_findings, tool_pinned and tool_changed
// for the list probe and the call alike, so that a rule hides exactly the tools it refuses.

// Rules that records and error.data name for tool integrity.
const (
	ruleIntegrity  = "tool-integrity"
	ruleDivergence = "tool-divergence"
)

// kindToolIntegrity is the Record.Kind of a guard's event.
const kindToolIntegrity = "tool_integrity"

// serverKey is integrity.Server.Key of a request: "host:port/path". host is the TLS server
// name when the flow opened with a ClientHello naming one, else the Host header's name, else
// the original destination's address (lower case, IPv6 in brackets, no trailing dot); port the
// original destination's; path the request path without query and trailing slash ("/" when
// none is left).
func serverKey(c *policy.Conn, hostHeader, target string) string {
	host := ""
	if c != nil && c.Hello && c.SNI != "" {
		host = c.SNI
	}
	if host == "" {
		host = hostName(hostHeader)
	}
	var dst netip.AddrPort
	if c != nil {
		if a, err := netip.ParseAddr(c.OrigIP); err == nil {
			dst = netip.AddrPortFrom(a, c.OrigPort)
		} else if ap, err := netip.ParseAddrPort(c.OrigDst); err == nil {
			dst = ap
		}
	}
	if host == "" && dst.Addr().IsValid() {
		host = addrHost(dst.Addr())
	}
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	path := strings.TrimRight(pathOf(target), "/")
	if path == "" || path[0] != '/' {
		path = "/" + path
	}
	return host + ":" + strconv.Itoa(int(dst.Port())) + path
}

// hostName is the name of a Host header value, without its port: an IP literal in its
// canonical form (IPv6 in brackets), a name as sent ("" when none).
func hostName(h string) string {
	h = strings.TrimSpace(h)
	switch {
	case h == "":
		return ""
	case h[0] == '[':
		end := strings.IndexByte(h, ']')
		if end < 0 {
			return h
		}
		if a, err := netip.ParseAddr(h[1:end]); err == nil {
			return addrHost(a)
		}
		return h[:end+1]
	case strings.Count(h, ":") > 1:
		// An IPv6 address without brackets (malformed, but a peer may send it).
		if a, err := netip.ParseAddr(h); err == nil {
			return addrHost(a)
		}
		return "[" + h + "]"
	}
	if i := strings.IndexByte(h, ':'); i >= 0 {
		h = h[:i]
	}
	if a, err := netip.ParseAddr(h); err == nil {
		return addrHost(a)
	}
	return h
}

// addrHost writes an address as a URI host: IPv4 (or IPv4-mapped) plain, IPv6 in brackets.
func addrHost(a netip.Addr) string {
	a = a.Unmap()
	if a.Is6() {
		return "[" + a.String() + "]"
	}
	return a.String()
}

// toolServer is the guard's identity of the exchange's server. A 2024-11-05 POST to an
// endpoint takes the path of the GET stream that announced it: the lists come on that stream,
// the calls on the endpoint, and both must name one server.
func toolServer(s *conn, h *exchange.Head, st *xstate) integrity.Server {
	host, _ := h.Get("Host")
	target := h.Target
	if st.legacy {
		if p := s.f.Sessions.streamPath(st.session); p != "" {
			target = p
		}
	}
	return integrity.Server{Key: serverKey(s.f.Conn, host, target), SPKI: s.f.UpstreamSPKI}
}

// viewer names who was shown a list, for the guard's divergence check: the client's address
// and its session ("10.200.1.2 session ab12cd34"), or the address alone.
func viewerOf(s *conn, st *xstate) string {
	addr := ""
	if s.f.Client != nil {
		addr = s.f.Client.Address
	}
	if st.session == "" {
		return addr
	}
	return addr + " session " + st.session
}

// defMethods are the requests that name a definition the guard judges, with its kind.
var defMethods = map[string]struct {
	kind integrity.Kind
	noun string
}{
	mcp.MethodToolsCall:  {integrity.KindTool, "tool"},
	mcp.MethodPromptsGet: {integrity.KindPrompt, "prompt"},
}

// listDefs are the definitions of a list result raw (a whole response message) in the order
// filterList judges its entries: of each kind with a definition kind, every object entry whose
// name member is a string.
func listDefs(raw []byte, kinds []listKind) []integrity.Def {
	rm := mcp.MemberSpan(raw, "result")
	if !rm.Found || !mcp.IsObject(raw[rm.ValStart:rm.ValEnd]) {
		return nil
	}
	result := raw[rm.ValStart:rm.ValEnd]
	var defs []integrity.Def
	for _, k := range kinds {
		if k.def == "" {
			continue
		}
		am := mcp.MemberSpan(result, k.member)
		if !am.Found {
			continue
		}
		arr := result[am.ValStart:am.ValEnd]
		if len(arr) == 0 || arr[0] != '[' {
			continue
		}
		els := mcp.Elements(arr)
		if defs == nil {
			defs = make([]integrity.Def, 0, len(els))
		}
		for _, e := range els {
			entry := arr[e[0]:e[1]]
			if !mcp.IsObject(entry) {
				continue
			}
			if name, ok := mcp.StringMember(entry, k.nameKey); ok {
				defs = append(defs, integrity.Def{Kind: k.def, Name: name, Raw: entry})
			}
		}
	}
	return defs
}

// wholeList reports a list result that is complete: a first page (no cursor in the request)
// and the last one (no nextCursor, or an empty or null one, in the result), so that a pinned
// definition it lacks was removed.
func wholeList(req *Record, result []byte) bool {
	if req.cursor {
		return false
	}
	v, ok := mcp.Member(result, "nextCursor")
	if !ok {
		return true
	}
	s := string(v)
	return s == "null" || s == `""`
}

// observeList hands a list result's definitions to the guard and records its events. It
// returns one verdict per listDefs entry, never nil (surface tells a guarded list by it).
func observeList(s *conn, x *exchange.Exchange, st *xstate, m *mcp.Message, req *Record, kinds []listKind) []integrity.Verdict {
	defs := listDefs(m.Raw, kinds)
	vs, evs := s.f.Tools.Observe(st.tools, viewerOf(s, st), defs, wholeList(req, m.Result))
	recordEvents(s, x, st, req.Method, evs)
	if len(vs) < len(defs) || vs == nil {
		// A guard that judged fewer definitions than it was given: the rest pass this filter
		// unjudged (their calls are still looked up).
		vs = append(vs, make([]integrity.Verdict, len(defs)-len(vs))...)
		if vs == nil {
			vs = []integrity.Verdict{}
		}
	}
	return vs[:len(defs)]
}

// filterJudged is filterList with the guard's verdicts vs (one per listDefs entry): a
// quarantined definition is hidden, every other entry is judged by p (nil: kept) with its
// verdict in mcp.tool_*. The entries come in listDefs order: the i-th definition is the i-th
// entry of a kind that defines something.
func filterJudged(raw []byte, kinds []listKind, addScope bool, vs []integrity.Verdict, p *prober) filtered {
	i, q := 0, 0
	f := filterList(raw, kinds, addScope, func(k *listKind, name string) (bool, string) {
		var v *integrity.Verdict
		if k.def != "" && i < len(vs) {
			v = &vs[i]
			i++
		}
		if v != nil && v.Quarantined {
			q++
			return false, ruleIntegrity
		}
		if p == nil {
			return true, ""
		}
		return p.judge(k, name, v)
	})
	f.quarantined = q
	return f
}

// recordEvents writes one record per guard event: direction server_to_client, kind
// tool_integrity, the list method and the definition's name; deny when the event quarantined
// the definition; rule tool-integrity (tool-divergence for a divergence); the event's one-line
// detail as the reason (hashes and field names, never a definition's text).
func recordEvents(s *conn, x *exchange.Exchange, st *xstate, method string, evs []integrity.Event) {
	for i := range evs {
		ev := &evs[i]
		r := &Record{Time: time.Now(), Direction: ServerToClient, Kind: kindToolIntegrity, Method: method,
			Name: ev.Name, Version: st.version, HTTPMethod: x.Req.Method, Path: st.path,
			Decision: policy.ActionAllow, Rule: ruleIntegrity, Reason: detailLine(ev.Detail),
			Caller: policy.CallerFrom(x.Get(policy.CallerKey{}))}
		if ev.DefKind == integrity.KindTemplate {
			r.Name = mcp.RedactURI(ev.Name)
		}
		if ev.Quarantined {
			r.Decision = policy.ActionDeny
		}
		if ev.Kind == integrity.EventDivergence {
			r.Rule = ruleDivergence
		}
		if r.Reason == "" {
			r.Reason = string(ev.DefKind) + " " + ev.Kind
		}
		st.messages++
		s.emit(r)
	}
}

// maxDetail bounds an event's detail in a record (it names a definition, which a server
// chose, and two hashes).
const maxDetail = 1024

// detailLine is an event's detail as one line: control characters become spaces (a name can
// hold anything a server sent), cut to maxDetail bytes at a character boundary.
func detailLine(d string) string {
	if len(d) > maxDetail {
		cut := maxDetail
		for cut > 0 && d[cut]&0xC0 == 0x80 {
			cut--
		}
		d = d[:cut] + "…"
	}
	return strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return ' '
		}
		return r
	}, d)
}

// checkTools is the request step of tool integrity: a tools/call or prompts/get whose
// definition the guard holds quarantined is refused with CodeQuarantined (the server never
// sees it); every other one takes the guard's verdict into policy (mcp.tool_findings,
// tool_pinned, tool_changed). A definition the guard knows nothing of is as Lookup says:
// quarantined on an enforce route, unpinned and allowed on a learn route.
func checkTools(s *conn, x *exchange.Exchange, st *xstate, b *requestBody) (exchange.Result, bool) {
	g := s.f.Tools
	if g == nil {
		return exchange.Continue, false
	}
	var viewer string
	for i, m := range b.msgs {
		if m.Kind != mcp.KindRequest {
			continue
		}
		dm, ok := defMethods[m.Method]
		if !ok {
			continue
		}
		name := m.Name()
		if name == "" {
			continue // no definition named: the server refuses it as invalid params
		}
		if viewer == "" {
			viewer = viewerOf(s, st)
		}
		v, _ := g.Lookup(st.tools, viewer, dm.kind, name)
		r := st.reqs[i]
		r.tv = policy.ToolIntegrity{Findings: v.Findings, Pinned: v.Pinned, Changed: v.Changed}
		if !v.Quarantined {
			continue
		}
		why := v.Reason
		if why == "" {
			why = dm.noun + " " + name + " is quarantined"
		}
		r.Decision, r.Rule, r.Reason = policy.ActionDeny, ruleIntegrity, why
		d := policy.Decision{Action: policy.ActionDeny, Rule: ruleIntegrity, Reason: why}
		return refuseWith(s, x, st, b.msgs, b.batch, r, d, CodeQuarantined, dm.noun+" quarantined by "+Intermediary), true
	}
	return exchange.Continue, false
}

// integrityCall reports a request that carries mcp.tool_* to policy (defMethods, without a
// map lookup on every message).
func integrityCall(method string) bool {
	return method == mcp.MethodToolsCall || method == mcp.MethodPromptsGet
}
