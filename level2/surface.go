package level2

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"mcpintercept/exchange"
	"mcpintercept/integrity"
	"mcpintercept/mcp"
	"mcpintercept/policy"
	flowstage "mcpintercept/stage"
)

// Surface control: what the client is offered equals what policy lets it use. List results lose
// the entries a call to which policy would deny this client; server→client requests (sampling,
// elicitation, roots) are judged like client requests, with mcp.direction "server_to_client".

// listKind is one kind of entry a list result holds: the result member with the array, the entry
// member that names it, the request policy judges for it, and the kind of definition tool
// integrity pins it as ("" for resources, which define nothing).
type listKind struct {
	member, nameKey, probeMethod string
	def                          integrity.Kind
}

var (
	toolsKind     = listKind{"tools", "name", mcp.MethodToolsCall, integrity.KindTool}
	promptsKind   = listKind{"prompts", "name", mcp.MethodPromptsGet, integrity.KindPrompt}
	resourcesKind = listKind{"resources", "uri", mcp.MethodResourcesRead, ""}
	templatesKind = listKind{"resourceTemplates", "uriTemplate", mcp.MethodResourcesRead, integrity.KindTemplate}
)

// listMethods are the requests whose results are filtered; only responses to them (correlated by
// id) are rewritten, so a tools/call result that happens to hold a "tools" array is left alone.
var listMethods = map[string][]listKind{
	mcp.MethodToolsList:              {toolsKind},
	mcp.MethodPromptsList:            {promptsKind},
	mcp.MethodResourcesList:          {resourcesKind},
	mcp.MethodResourcesTemplatesList: {templatesKind},
	// 2026-07-28: what discovery returns is filtered the same way, wherever it lists entries.
	mcp.MethodServerDiscover: {toolsKind, promptsKind, resourcesKind, templatesKind},
}

// filtered is what filterList did to one result.
type filtered struct {
	out    []byte
	total  int
	hidden []string // names hidden, in order
	rules  []string // the rules that hid them, each once
	// quarantined counts the hidden entries tool integrity holds quarantined.
	quarantined int
}

// filterList rebuilds the response message raw without the entries allowed refuses. When it
// hid something and the result carries caching hints, or addScope is set (mcp.Version.CachingHints), the
// result's cacheScope becomes "private": the page now depends on who asked. ttlMs, nextCursor
// and every other member are kept as sent. allowed is asked about every object entry whose name
// member is a string, kind by kind and in order (listDefs lists the same entries).
func filterList(raw []byte, kinds []listKind, addScope bool, allowed func(k *listKind, name string) (bool, string)) filtered {
	f := filtered{out: raw}
	rm := mcp.MemberSpan(raw, "result")
	if !rm.Found || !mcp.IsObject(raw[rm.ValStart:rm.ValEnd]) {
		return f
	}
	base := rm.ValStart
	result := raw[rm.ValStart:rm.ValEnd]
	var edits []edit
	for ki := range kinds {
		k := &kinds[ki]
		am := mcp.MemberSpan(result, k.member)
		if !am.Found {
			continue
		}
		arr := result[am.ValStart:am.ValEnd]
		if len(arr) == 0 || arr[0] != '[' {
			continue
		}
		els := mcp.Elements(arr)
		kept := make([][]byte, 0, len(els))
		hid := false
		for _, e := range els {
			entry := arr[e[0]:e[1]]
			f.total++
			name, ok := "", false
			if mcp.IsObject(entry) {
				name, ok = mcp.StringMember(entry, k.nameKey)
			}
			if ok {
				if yes, rule := allowed(k, name); !yes {
					hid = true
					f.hidden = append(f.hidden, name)
					if rule != "" && !contains(f.rules, rule) {
						f.rules = append(f.rules, rule)
					}
					continue
				}
			}
			kept = append(kept, entry)
		}
		if !hid {
			continue
		}
		var b bytes.Buffer
		b.Grow(len(arr))
		b.WriteByte('[')
		joinRaw(&b, kept)
		b.WriteByte(']')
		edits = append(edits, edit{base + am.ValStart, base + am.ValEnd, b.Bytes()})
	}
	if len(edits) == 0 {
		return f
	}
	cs := mcp.MemberSpan(result, "cacheScope")
	_, hasTTL := mcp.Member(result, "ttlMs")
	switch {
	case cs.Found:
		edits = append(edits, edit{base + cs.ValStart, base + cs.ValEnd, []byte(`"private"`)})
	case addScope || hasTTL:
		edits = append(edits, edit{base + 1, base + 1, []byte(`"cacheScope":"private",`)})
	}
	f.out = splice(raw, edits)
	return f
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// describeFiltered is the record's account of a filtered list.
func describeFiltered(method string, f filtered) string {
	names := f.hidden
	more := 0
	if len(names) > 8 {
		names, more = names[:8], len(names)-8
	}
	for i, n := range names {
		names[i] = mcp.RedactURI(n)
	}
	s := fmt.Sprintf("surface: %s hid %d of %d entries (%s", method, len(f.hidden), f.total, strings.Join(names, ", "))
	if more > 0 {
		s += fmt.Sprintf(", +%d more", more)
	}
	s += ")"
	if len(f.rules) > 0 {
		s += " by " + strings.Join(f.rules, ", ")
	}
	if f.quarantined > 0 {
		s += fmt.Sprintf("; %d quarantined by tool integrity", f.quarantined)
	}
	return s
}

// probe asks the rules whether a request this client has not sent would be allowed: a call to a
// listed tool, or a server→client request the client's capabilities would let through. No
// rate-limit token is spent (policy.Input.Probe).
type prober struct {
	s    *conn
	x    *exchange.Exchange
	st   *xstate
	rs   Evaluator
	msg  policy.Message
	http policy.Request
	ci   clientInfoOnly
	in   policy.Input
	// tools is mcp.tool_* of the entry being judged, when it is a definition.
	tools policy.ToolIntegrity
}

// clientInfoOnly is the Body of a probe: the client's info, nothing of a message.
type clientInfoOnly struct{ ci map[string]any }

func (clientInfoOnly) Arguments() map[string]any     { return nil }
func (clientInfoOnly) Result() any                   { return nil }
func (c *clientInfoOnly) ClientInfo() map[string]any { return c.ci }

func newProber(s *conn, x *exchange.Exchange, st *xstate, dir string) *prober {
	rs := s.rules()
	if rs == nil {
		return nil
	}
	p := &prober{s: s, x: x, st: st, rs: rs}
	p.msg = policy.Message{Direction: dir, Kind: mcp.KindRequest.String(), Version: st.version, Session: st.session}
	var known bool
	p.ci.ci, known = clientIdentity(s, st)
	p.msg.Body = &p.ci
	p.http = policy.Request{Method: x.Req.Method, Path: st.path}
	if info := mcp.InfoOf(x); info != nil {
		p.http.Headers = policy.HeaderMap(info.Headers)
	}
	p.in = policy.Input{Vars: policy.Vars{Client: s.f.Client, Conn: s.f.Conn, HTTP: &p.http, MCP: &p.msg, Auth: policy.AuthFrom(x.Get(policy.AuthKey{}))},
		FailOpen: s.f.FailOpen, Probe: true, ServerMessage: dir == ServerToClient}
	if dir == ServerToClient && !known {
		p.in.Vars.Unknown = unknownClient // as evaluate: a rule on an unknown client fails
	}
	return p
}

// allowed judges a call of k's probe method on name (a tool, prompt or resource), without a
// tool-integrity verdict: a definition's mcp.tool_* are present, empty.
func (p *prober) allowed(k *listKind, name string) (bool, string) { return p.judge(k, name, nil) }

// judge judges a call of k's probe method on name with v the guard's verdict on the entry
// (nil: none), which fills mcp.tool_* for a tool, prompt or template.
func (p *prober) judge(k *listKind, name string, v *integrity.Verdict) (bool, string) {
	p.msg.Method, p.msg.Name = k.probeMethod, name
	p.msg.Tools = nil
	if k.def != "" {
		p.tools = policy.ToolIntegrity{}
		if v != nil {
			p.tools = policy.ToolIntegrity{Findings: v.Findings, Pinned: v.Pinned, Changed: v.Changed}
		}
		p.msg.Tools = &p.tools
	}
	d := p.rs.Evaluate(&p.in)
	return d.Action == "" || d.Action == policy.ActionAllow, d.Rule
}

// ---- server→client requests ----

// elicitationMode is an elicitation request's mode ("form" when absent, as the spec defaults).
func elicitationMode(params []byte) string {
	if mcp.IsObject(params) {
		if m, ok := mcp.StringMember(params, "mode"); ok && m != "" {
			return m
		}
	}
	return "form"
}

// kindOf names a server request for the record: sampling, elicitation (form|url), roots.
func kindOf(method string, params []byte) string {
	k := mcp.Methods[method].Capability
	if k == "elicitation" {
		k += " (" + elicitationMode(params) + ")"
	}
	return k
}

// tool is the tool (or prompt, or resource) whose request the exchange carries: the context of
// a server→client request made while answering it.
func (st *xstate) tool() string {
	for _, r := range st.reqs {
		switch r.Method {
		case mcp.MethodToolsCall, mcp.MethodPromptsGet, mcp.MethodResourcesRead:
			return r.Name
		}
	}
	return ""
}

// unknownTool is what policy cannot establish when a server→client request on a GET stream may
// belong to more than one call: a rule reading its tool fails (on_rule_error) rather than guess.
var unknownTool = []string{"mcp.tool", "mcp.name"}

// streamTool is the tool (or prompt, or resource) a server→client request made on this exchange
// belongs to. On a POST's stream it is the exchange's own request (tool). On a GET stream (the
// 2024-11-05 HTTP+SSE stream that carries every call's messages, a 2025-x standalone or resumed
// stream) no call is named, so it is the session's pending call, as relatedPending reads it: one
// pending name is that name; calls of several different names pending make it ambiguous (a
// rule on mcp.tool is then a rule error, never the "no match" of an empty tool that would let
// a server ask for a tool the rule stops while a harmless call runs beside it).
func streamTool(s *conn, x *exchange.Exchange, st *xstate) (tool string, ambiguous bool) {
	if t := st.tool(); t != "" || x.Req.Method != "GET" || st.session == "" {
		return t, false
	}
	for _, p := range s.f.Sessions.PendingOf(s.owner, st.session) {
		switch p.Method {
		case mcp.MethodToolsCall, mcp.MethodPromptsGet, mcp.MethodResourcesRead:
			switch {
			case tool == "":
				tool = p.Name
			case tool != p.Name:
				return "", true
			}
		}
	}
	return tool, false
}

// serverRequestInput adds what policy reads of a server→client request.
func serverRequestInput(method string, params []byte, tool string) func(*policy.Message) {
	return func(m *policy.Message) {
		if tool != "" {
			m.Tool, m.Name = tool, tool
		}
		if method == mcp.MethodElicitationCreate {
			m.Mode = elicitationMode(params)
		}
	}
}

// postTimeout bounds the appliance's own answer to a server.
const postTimeout = 10 * time.Second

// answerServer answers a blocked server→client request to the server on the client's behalf
// (2025-x: a dropped request would leave the server waiting): a JSON-RPC error naming the
// appliance, POSTed with the client's session headers over a new connection (Flow.Post). The
// record r is written once the answer went out (or failed).
func answerServer(s *conn, ctx context.Context, x *exchange.Exchange, st *xstate, m *mcp.Message, r *Record, d policy.Decision) {
	body := mcp.DenialBody(m.ID, CodeDenied, "request denied by "+Intermediary+" policy", d.Rule, d.Reason, 0)
	if s.f.Post == nil {
		r.Err = "the server was not answered (no way to reach it from Level 2)"
		s.emit(r)
		return
	}
	target := x.Req.Target
	if st.endpoint != "" {
		target = st.endpoint
	}
	hdrs := []exchange.Header{
		{Name: "Content-Type", Value: "application/json"},
		{Name: "Accept", Value: "application/json, text/event-stream"},
	}
	cred, credRoute := flowstage.CredentialOf(x)
	for _, name := range []string{"Host", "Authorization", "Mcp-Session-Id", "MCP-Protocol-Version"} {
		if credRoute && (strings.EqualFold(name, "Authorization") || strings.EqualFold(name, cred.Name)) {
			// A credentials route: the server gets the credential the request went with, never
			// the client's own (its subject token on an exchange route).
			continue
		}
		if v, ok := x.Req.Get(name); ok {
			hdrs = append(hdrs, exchange.Header{Name: name, Value: v})
		}
	}
	if credRoute {
		hdrs = append(hdrs, cred)
	}
	post := s.f.Post
	record := s.f.Record
	select {
	case s.posts <- struct{}{}:
	default:
		// Too many answers already in flight on this connection: the request is still dropped
		// (never served to the client), but this one is not answered.
		r.Err = "answering the server skipped: too many answers in flight"
		if record != nil {
			record(r)
		}
		return
	}
	go func() {
		defer func() { <-s.posts }()
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), postTimeout)
		defer cancel()
		if err := post(pctx, target, hdrs, body); err != nil {
			r.Err = "answering the server failed: " + oneLine(err.Error())
		}
		if record != nil {
			record(r)
		}
	}()
}

// capabilities a 2026-07-28 request can carry in _meta, and the server→client request each one
// lets the server make (multi round-trip input requests).
var capabilityRequests = []struct{ capability, method, mode string }{
	{"sampling", mcp.MethodSamplingCreateMessage, ""},
	{"elicitation", mcp.MethodElicitationCreate, "form"},
	{"elicitation", mcp.MethodElicitationCreate, "url"},
	{"roots", mcp.MethodRootsList, ""},
}

// withholdCapabilities removes from a 2026-07-28 request's client capabilities what policy would
// refuse the server anyway (a sampling capability when sampling is blocked for this client and
// tool), so that the server does not ask (the spec forbids input requests for capabilities the
// client did not declare). It returns the new message and what it removed; raw when nothing.
func withholdCapabilities(raw []byte, m *mcp.Message, p *prober) ([]byte, []string) {
	switch m.Method {
	case mcp.MethodToolsCall, mcp.MethodPromptsGet, mcp.MethodResourcesRead:
	default:
		return raw, nil
	}
	pm := mcp.MemberSpan(raw, "params")
	if !pm.Found || !mcp.IsObject(raw[pm.ValStart:pm.ValEnd]) {
		return raw, nil
	}
	params := raw[pm.ValStart:pm.ValEnd]
	mm := mcp.MemberSpan(params, "_meta")
	if !mm.Found || !mcp.IsObject(params[mm.ValStart:mm.ValEnd]) {
		return raw, nil
	}
	meta := params[mm.ValStart:mm.ValEnd]
	cm := mcp.MemberSpan(meta, mcp.MetaClientCapabilities)
	if !cm.Found || !mcp.IsObject(meta[cm.ValStart:cm.ValEnd]) {
		return raw, nil
	}
	caps := meta[cm.ValStart:cm.ValEnd]
	base := pm.ValStart + mm.ValStart + cm.ValStart
	tool := m.Name()
	p.msg.Tool, p.msg.Name = tool, tool
	defer func() { p.msg.Tool, p.msg.Mode = "", "" }()
	refused := map[string]bool{}
	why := map[string]string{}
	for _, c := range capabilityRequests {
		if _, ok := mcp.Member(caps, c.capability); !ok {
			continue
		}
		p.msg.Method, p.msg.Mode = c.method, c.mode
		d := p.rs.Evaluate(&p.in)
		if d.Action != "" && d.Action != policy.ActionAllow {
			key := c.capability
			if c.mode != "" {
				key += "." + c.mode
			}
			refused[key], why[key] = true, d.Rule
		}
	}
	if len(refused) == 0 {
		return raw, nil
	}
	var removed []string
	note := func(k string) { removed = append(removed, k+" (rule "+why[k]+")") }
	newCaps := rebuildObject(caps, func(key string, val []byte) ([]byte, bool) {
		switch key {
		case "sampling", "roots":
			if refused[key] {
				note(key)
				return nil, false
			}
		case "elicitation":
			if !refused["elicitation.form"] && !refused["elicitation.url"] {
				break
			}
			_, hasForm := mcp.Member(val, "form")
			_, hasURL := mcp.Member(val, "url")
			// An elicitation capability without modes means form only (2025-11-25).
			formOn := hasForm || !hasURL
			formLeft := formOn && !refused["elicitation.form"]
			urlLeft := hasURL && !refused["elicitation.url"]
			switch {
			case !formLeft && !urlLeft:
				if formOn && refused["elicitation.form"] {
					note("elicitation.form")
				}
				if hasURL && refused["elicitation.url"] {
					note("elicitation.url")
				}
				return nil, false
			case formOn && !formLeft:
				note("elicitation.form")
				return rebuildObject(val, func(k string, v []byte) ([]byte, bool) { return v, k != "form" }), true
			case hasURL && !urlLeft:
				note("elicitation.url")
				return rebuildObject(val, func(k string, v []byte) ([]byte, bool) { return v, k != "url" }), true
			}
		}
		return val, true
	})
	if len(removed) == 0 {
		return raw, nil
	}
	return splice(raw, []edit{{base, base + len(caps), newCaps}}), removed
}

// rebuildObject writes a validated object again with the members keep returns false for left
// out and the values it returns in place of the others (keys and values otherwise as sent).
func rebuildObject(obj []byte, keep func(key string, val []byte) ([]byte, bool)) []byte {
	var b bytes.Buffer
	b.Grow(len(obj))
	b.WriteByte('{')
	n := 0
	i := mcp.SkipSpace(obj, 1)
	for i < len(obj) && obj[i] == '"' {
		ks := i
		ke := mcp.SkipString(obj, i)
		i = mcp.SkipSpace(obj, ke)
		i = mcp.SkipSpace(obj, i+1)
		ve := mcp.SkipValue(obj, i)
		if v, ok := keep(keyText(obj[ks:ke]), obj[i:ve]); ok {
			if n > 0 {
				b.WriteByte(',')
			}
			b.Write(obj[ks:ke])
			b.WriteByte(':')
			b.Write(v)
			n++
		}
		i = mcp.SkipSpace(obj, ve)
		if i >= len(obj) || obj[i] != ',' {
			break
		}
		i = mcp.SkipSpace(obj, i+1)
	}
	b.WriteByte('}')
	return b.Bytes()
}

// inputRequest is one entry of an input_required result's inputRequests.
type inputRequest struct {
	key    string
	method string
	params []byte
}

// inputRequests returns the input requests of a 2026-07-28 input_required result (also when a
// tasks/get result carries them), in the order sent; ok reports an input_required result.
func inputRequests(result []byte) ([]inputRequest, bool) {
	if !mcp.IsObject(result) {
		return nil, false
	}
	rt, _ := mcp.StringMember(result, "resultType")
	ir, has := mcp.Member(result, "inputRequests")
	if rt != "input_required" && !(has && mcp.IsObject(ir)) {
		return nil, false
	}
	var out []inputRequest
	if !has || !mcp.IsObject(ir) {
		return out, true
	}
	i := mcp.SkipSpace(ir, 1)
	for i < len(ir) && ir[i] == '"' {
		ke := mcp.SkipString(ir, i)
		key := keyText(ir[i:ke])
		i = mcp.SkipSpace(ir, ke)
		i = mcp.SkipSpace(ir, i+1)
		ve := mcp.SkipValue(ir, i)
		v := ir[i:ve]
		req := inputRequest{key: key}
		if mcp.IsObject(v) {
			req.method, _ = mcp.StringMember(v, "method")
			req.params, _ = mcp.Member(v, "params")
		}
		out = append(out, req)
		i = mcp.SkipSpace(ir, ve)
		if i >= len(ir) || ir[i] != ',' {
			break
		}
		i = mcp.SkipSpace(ir, i+1)
	}
	return out, true
}

// isRetry reports a multi round-trip retry: a request carrying inputResponses or requestState.
func isRetry(m *mcp.Message) bool {
	if _, ok := m.Param("inputResponses"); ok {
		return true
	}
	_, ok := m.Param("requestState")
	return ok
}

// rawID is a JSON id for an error response (the id as sent).
func rawID(m *mcp.Message) json.RawMessage { return m.ID }

// surface applies surface control to an allowed result: a list loses what this client may not
// use (and its schemas are learnt for validate_arguments), an input_required result is judged
// request by request. It returns the new message when it changed.
func surface(s *conn, x *exchange.Exchange, st *xstate, m *mcp.Message, req *Record) ([]byte, bool) {
	if req.Method == mcp.MethodToolsList && s.f.ValidateArguments {
		s.f.Sessions.toolSchemas().learn(st.schemaKey(), !req.cursor, toolSchemas(m.Result))
	}
	kinds, isList := listMethods[req.Method]
	if isList {
		var vs []integrity.Verdict // one per listDefs entry, with a guard
		quarantined := false
		if s.f.Tools != nil {
			vs = observeList(s, x, st, m, req, kinds)
			for i := range vs {
				quarantined = quarantined || vs[i].Quarantined
			}
		}
		p := newProber(s, x, st, ClientToServer)
		if p == nil && !quarantined {
			return nil, false
		}
		var f filtered
		if vs == nil {
			f = filterList(m.Raw, kinds, mcp.Version(st.version).CachingHints(), p.allowed)
		} else {
			f = filterJudged(m.Raw, kinds, mcp.Version(st.version).CachingHints(), vs, p)
		}
		if len(f.hidden) == 0 {
			return nil, false
		}
		appendReason(req, describeFiltered(req.Method, f))
		return f.out, true
	}
	irs, ok := inputRequests(m.Result)
	if !ok {
		return nil, false
	}
	// 2026-07-28 multi round-trip: every input request is a server→client request, judged and
	// recorded as one; a blocked one turns the whole result into an error for the client (the
	// server cannot be answered for it: the client would retry with its answers).
	tool := req.Name
	var blocked *policy.Decision
	var blockedKey string
	for _, ir := range irs {
		im := &mcp.Message{Kind: mcp.KindRequest, Method: ir.method, Params: ir.params}
		r := &Record{Time: time.Now(), Direction: ServerToClient, Kind: "input_request", ID: ir.key, Method: ir.method,
			Name: mcp.RedactURI(tool), Version: st.version, HTTPMethod: x.Req.Method, Path: st.path}
		d := evaluate(s, x, st, im, r, ServerToClient, nil, serverRequestInput(ir.method, ir.params, tool))
		r.Decision, r.Rule = d.Action, d.Rule
		r.Reason = kindOf(ir.method, ir.params) + " input request " + oneLine(ir.key) + " (input_required of " + req.Method + "): " + d.Reason
		if kindOf(ir.method, ir.params) == "" {
			r.Reason = "input request " + oneLine(ir.key) + " (" + ir.method + "): " + d.Reason
		}
		if d.Action != policy.ActionAllow && blocked == nil {
			blocked, blockedKey = &d, ir.key
			r.Reason += "; the client gets an error instead of the input_required result"
		}
		st.messages++
		s.emit(r)
	}
	if blocked == nil {
		return nil, false
	}
	req.Decision, req.Rule = blocked.Action, blocked.Rule
	req.Reason = "input_required result withheld: input request " + oneLine(blockedKey) + " denied: " + blocked.Reason
	return mcp.DenialBody(m.ID, CodeDenied, "input request denied by "+Intermediary+" policy", blocked.Rule, blocked.Reason, 0), true
}

// controlSurface is the response step of surface, on an allowed result.
func controlSurface(s *conn, x *exchange.Exchange, st *xstate, sm *serverMessage) bool {
	if sm.m.Kind != mcp.KindResponse {
		return false
	}
	if o, ok := surface(s, x, st, sm.m, sm.rec); ok {
		sm.out, sm.changed = o, true
	}
	return false
}

// serverRequestFacts is the response step that gives policy what surface control knows of a
// server→client request: the tool it is made for (streamTool) and an elicitation's mode; the
// record names that tool and the request's kind.
func serverRequestFacts(s *conn, x *exchange.Exchange, st *xstate, sm *serverMessage) bool {
	m := sm.m
	if m.Kind != mcp.KindRequest {
		return false
	}
	tool, ambiguous := streamTool(s, x, st)
	st.unknownTool = ambiguous
	sm.extra = serverRequestInput(m.Method, m.Params, tool)
	if mcp.Methods[m.Method].Capability != "" { // sampling, elicitation, roots
		sm.kind = kindOf(m.Method, m.Params)
		if tool != "" {
			sm.rec.Name = mcp.RedactURI(tool)
		}
	}
	return false
}
