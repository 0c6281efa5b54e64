package level2

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"mcpintercept/audit"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"mcpintercept/exchange"
	"mcpintercept/integrity"
	"mcpintercept/mcp"
	"mcpintercept/policy"
	"mcpintercept/tracing"
)

// Directions of a message, as policy (mcp.direction) and the flow log (direction) name them.
const (
	ClientToServer = "client_to_server"
	ServerToClient = "server_to_client"
)

// Evaluator is a compiled rule set (policy.Set).
type Evaluator interface {
	Evaluate(in *policy.Input) policy.Decision
	// Needs says what the rules read (which costly members, whether server messages, which
	// argument keys, which redactions), so that Level 2 builds and checks only that.
	Needs() policy.Needs
}

// Options are a route's Level 2 settings.
type Options struct {
	// MaxBody bounds a request body, a response body and one SSE event (0: DefaultMaxBody). A
	// request over it gets 413; a response over it is closed, or forwarded uninspected when
	// ForwardOversized is set; the record says which.
	MaxBody          int64
	ForwardOversized bool
}

// Flow is what the engine hands Level 2 for one connection.
type Flow struct {
	// Rules returns the rule set that judges this flow's messages now (nil: allow all).
	Rules    func() Evaluator
	Client   *policy.Client // policy's `client` and `conn` variables, built once per flow
	Conn     *policy.Conn
	FailOpen bool // the route's on_rule_error
	Options
	// Sessions is shared by every flow of the appliance (nil: no cross-connection memory).
	Sessions *Sessions
	// Record receives one Record per JSON-RPC message; it must not block. It may be called from
	// a goroutine of Level 2's own (the record of a blocked server request is written once the
	// server was answered).
	Record func(*Record)
	// ValidateArguments checks tools/call arguments against the input schema the server listed
	// for the tool (the route's validate_arguments); invalid arguments get JSON-RPC error -32602
	// naming the appliance, and the server never sees the call.
	ValidateArguments bool
	// Post sends one HTTP/1.1 request to this flow's server over a new upstream connection (the
	// bypass mark set, TLS re-originated as the flow's own upstream is) and reads its response;
	// a status other than 2xx is an error. Level 2 uses it to answer a blocked server→client
	// request on the client's behalf (a 2025-x server waits for an answer). target is the request
	// target (path and query); headers include Host. Nil: blocked server requests are dropped
	// unanswered and the record says so.
	Post func(ctx context.Context, target string, headers []exchange.Header, body []byte) error
	// Audit makes the route's durable audit records (nil: the route is not audited): an
	// authorization for each allowed tools/call, prompts/get, resources/read and server→client
	// request before it is forwarded, a record of every denial before it is answered, and each
	// call's outcome.
	Audit Auditor
	// Tools is the route's tool-integrity guard (nil: tool_pins off): every tools/list,
	// prompts/list and resources/templates/list result is judged by it — a quarantined
	// definition is hidden, its calls refused with CodeQuarantined — and its verdict fills
	// mcp.tool_pinned, mcp.tool_changed and mcp.tool_findings for the list filter and the call
	// check alike.
	Tools ToolGuard
	// UpstreamSPKI is "sha256:<hex>" of the upstream certificate's public key on terminate
	// routes ("" otherwise), recorded beside the pins.
	UpstreamSPKI string
	// Tracer makes one span per JSON-RPC request of this flow (nil: tracing off); Trace is the
	// flow's part of every span's attributes (route, tls, mechanism, client, process, server
	// address and port), filled by the engine once per connection.
	Tracer *tracing.Tracer
	Trace  tracing.Call
	// TraceInject: requests go upstream with the appliance's span as their parent (header, and
	// params._meta when the client put a trace context there).
	TraceInject bool
}

// ToolGuard is what Level 2 needs of the tool-integrity guard; *integrity.RouteGuard is it.
type ToolGuard interface {
	Observe(srv integrity.Server, viewer string, defs []integrity.Def, whole bool) ([]integrity.Verdict, []integrity.Event)
	Lookup(srv integrity.Server, viewer string, kind integrity.Kind, name string) (integrity.Verdict, bool)
	Forget(srv integrity.Server)
}

// Record is one JSON-RPC message as Level 2 saw it and judged it.
type Record struct {
	Time       time.Time
	Direction  string // ClientToServer or ServerToClient
	Kind       string // request, notification, response, error
	ID         string // the id as sent (a JSON string keeps its quotes)
	Method     string // for a response: the method of the request it answers, when known
	Name       string // tool, prompt or resource (URI scrubbed of credentials)
	Version    string
	Decision   policy.Action // allow, deny, rate_limited
	Rule       string
	Reason     string
	HTTPMethod string
	Path       string
	Status     int
	Err        string
	Duration   time.Duration
	// BytesUp and BytesDown are the HTTP exchange's bytes, on the record of its first
	// client→server message (0 on the others, so that sums over the log stay right).
	BytesUp, BytesDown int64
	// Caller is who the request's accepted bearer token names (records' iss and sub).
	Caller policy.Caller
	// TraceID and SpanID are the span of the request this record is about (a response's record
	// names its request's span); "" when tracing is off or the message has none (notifications).
	TraceID, SpanID string

	cursor bool            // a list request for a later page (params.cursor)
	rawID  json.RawMessage // the id as sent, to answer with
	key    string          // the id as responses correlate with it (idKey)

	auditSeq uint64        // the durable authorization awaiting its outcome (0: none)
	audit    *audit.Record // that authorization

	tv policy.ToolIntegrity // a tools/call's or prompts/get's tool-integrity verdict (checkTools)

	span   *openSpan // the request's span until it ends (Flow.Tracer set)
	pended bool      // remembered in the session's pending requests, with span
}

// stateKey is where the exchange keeps Level 2's per-exchange state.
type stateKey struct{}

// xstate is Level 2's view of one exchange, from request to response.
type xstate struct {
	start      time.Time
	session    string // hashed session key ("" none)
	legacy     bool   // 2024-11-05 HTTP+SSE POST (answered on the GET stream)
	version    string
	acceptSSE  bool // the client accepts text/event-stream
	acceptJSON bool
	clientInfo map[string]any
	initialize bool
	reqs       []*Record          // client→server messages of this exchange, in order
	byID       map[string]*Record // requests by id
	answered   bool               // answered locally
	answerCode int                // the JSON-RPC code of that local answer
	respCode   int                // the code of an error that replaced the server's whole answer
	messages   int                // records emitted or owed for this exchange
	server     string             // the server's identity: destination, SNI and Host
	endpoint   string             // 2024-11-05 GET stream: where its endpoint event says to POST
	eventCR    bool               // the last SSE block ended with a CR (an LF may follow it)
	body       requestBody        // the request steps' shared view of the body
	vars       evalVars           // the policy input, reused message after message
	// unknownTool: the server request being judged may belong to calls of several tools (a GET
	// stream, streamTool), so mcp.tool and mcp.name are unknown to its rules.
	unknownTool bool
	tools       integrity.Server // the server as tool integrity knows it (Flow.Tools set)
}

// schemaKey is where the tool schemas of this exchange's server and session are remembered: per
// session, or per server for a stateless one.
func (st *xstate) schemaKey() string { return st.server + "|" + st.session }

// State returns Level 2's state of x, or nil when Level 2 did not see x.
func stateOf(x *exchange.Exchange) *xstate {
	s, _ := x.Get(stateKey{}).(*xstate)
	return s
}

// Recorded reports whether Level 2 wrote (or will write) records for x's JSON-RPC messages, in
// which case the per-HTTP-request record is redundant.
func Recorded(x *exchange.Exchange) bool {
	s := stateOf(x)
	return s != nil && s.messages > 0
}

// Stage returns the Level 2 stage for f: it reads every JSON-RPC message in both directions,
// decides on requests with f's rules, refuses header/body mismatches (SEP-2243), and records every
// message. It never answers on the server's behalf with a result: a refusal is a JSON-RPC error
// whose data names the appliance.
func (f *Flow) Stage() exchange.Stage {
	owner := NewOwner("")
	if f.Client != nil {
		owner = NewOwner(f.Client.Address)
	}
	return &stage{c: &conn{f: f, posts: make(chan struct{}, maxServerAnswers), owner: owner}}
}

// maxServerAnswers bounds the answers to refused server→client requests in flight per connection:
// each is a new upstream connection, and a hostile server must not make the appliance open one per
// request it invents.
const maxServerAnswers = 4

// stage is the exchange.Stage of one connection: its hooks run the steps of chain.go.
type stage struct {
	exchange.Base
	c *conn
}

func (s *stage) RequestHead(ctx context.Context, x *exchange.Exchange) exchange.Result {
	return s.c.requestHead(ctx, x)
}
func (s *stage) RequestBody(ctx context.Context, x *exchange.Exchange) exchange.Result {
	return s.c.requestBody_(ctx, x)
}
func (s *stage) ResponseHead(ctx context.Context, x *exchange.Exchange) exchange.Result {
	return s.c.responseHead(ctx, x)
}
func (s *stage) ResponseBody(ctx context.Context, x *exchange.Exchange) exchange.Result {
	return s.c.responseBody(ctx, x)
}
func (s *stage) Event(ctx context.Context, x *exchange.Exchange, ev *exchange.Event) exchange.Result {
	return s.c.event(ctx, x, ev)
}
func (s *stage) Done(x *exchange.Exchange) { s.c.done(x) }

// EndFlow ends the spans still open on this connection (server→client requests the client
// never answered here); the engine calls it once the connection's exchanges are over.
func (s *stage) EndFlow(at time.Time) { s.c.spans.endAll(at) }

// conn is Level 2's per-connection state: the flow's settings and what outlives one exchange.
type conn struct {
	f     *Flow
	posts chan struct{} // slots for answers to the server in flight
	audit stageAudit
	spans serverSpans // open spans of server→client requests (trace.go)
	// owner charges this flow's sessions to its client; ident is the client info the client
	// sent on this flow (identity.go).
	owner *Owner
	ident flowIdentity
}

func (s *conn) maxBody() int64 {
	if s.f.MaxBody > 0 {
		return s.f.MaxBody
	}
	return DefaultMaxBody
}

// ---- request side ----

func (s *conn) requestHead(_ context.Context, x *exchange.Exchange) exchange.Result {
	h := x.Req
	st := &xstate{start: time.Now()}
	x.Set(stateKey{}, st)
	if h.Count("Mcp-Session-Id") > 1 {
		// Servers disagree on which of two session ids counts (Go: the first; Node: both,
		// joined): the session, and so the client's identity, would be another for each.
		return refuseUnreadable(s, x, st, 400, "Mcp-Session-Id header repeated")
	}
	if v, ok := h.Get("Mcp-Session-Id"); ok && v != "" {
		st.session = hashKey(v)
	} else if s.f.Sessions.KnownEndpoint(s.owner, h.Target) || legacySession(h.Target) != "" {
		// 2024-11-05: a POST to an endpoint a GET stream announced (whatever the server calls
		// its session parameter: sessionId, the Go SDK's sessionid, …).
		st.session, st.legacy = legacyKey(h.Target), h.Method == "POST"
	}
	if v, ok := h.Get("MCP-Protocol-Version"); ok {
		st.version = v
	} else if v, _ := s.f.Sessions.Lookup(s.owner, st.session); v != "" {
		st.version = v
	}
	st.acceptSSE, st.acceptJSON = accepts(h)
	st.server = serverIdentity(s, h)
	if s.f.Tools != nil {
		st.tools = toolServer(s, h, st)
	}
	// Responses must be readable: ask the server for identity encoding (Level 2 may modify
	// messages; this changes no MCP semantics). A server that compresses anyway is decoded.
	if _, ok := h.Get("Accept-Encoding"); ok {
		x.DelRequestHeader("Accept-Encoding")
	}
	if !h.NoBody {
		x.WantRequestBody(s.maxBody())
	}
	return exchange.Continue
}

func (s *conn) requestBody_(ctx context.Context, x *exchange.Exchange) exchange.Result {
	st := stateOf(x)
	b := &st.body
	*b = requestBody{raw: x.RequestBody(), ctx: ctx}
	for _, step := range requestSteps {
		if res, done := step.run(s, x, st, b); done {
			if st.answered {
				auditDenials(s, x, st)
			}
			return res
		}
	}
	return exchange.Continue
}

// requestBody is what the request steps hand each other about one client→server body.
type requestBody struct {
	raw   []byte // the body as read (decoded from its Content-Encoding)
	msgs  []*mcp.Message
	batch bool
	decs  []policy.Decision // one per message, from the policy step
	out   [][]byte          // the messages as forwarded, from the transform step
	ctx   context.Context   // the exchange's
}

// readRequest decodes the body's Content-Encoding and decides whether it carries JSON-RPC at
// all: by its type however spelt, or by its bytes however padded. A body that is not JSON-RPC is
// plain HTTP, judged at Level 1 only: no supported server parses it as JSON.
func readRequest(s *conn, x *exchange.Exchange, st *xstate, b *requestBody) (exchange.Result, bool) {
	h := x.Req
	if ce, ok := h.Get("Content-Encoding"); ok && !isIdentity(ce) {
		dec, err := DecodeBody(ce, b.raw, s.maxBody())
		switch {
		case errors.Is(err, ErrUnsupportedEncoding):
			return refuseUnreadable(s, x, st, 415, "content-encoding "+ce+" cannot be inspected"), true
		case errors.Is(err, ErrBodyTooLarge):
			return refuseUnreadable(s, x, st, 413, "decoded body over the route's max_body"), true
		case err != nil:
			return refuseUnreadable(s, x, st, 400, "body does not decode as "+ce+": "+err.Error()), true
		}
		b.raw = dec
	}
	ctv, repeated := contentTypes(h)
	if repeated {
		// Servers disagree on which of two types counts (Go: the first; Node: both, joined).
		return refuseUnreadable(s, x, st, 400, "Content-Type header repeated"), true
	}
	ct := ParseContentType(ctv)
	if ct.ForeignCharset {
		return refuseUnreadable(s, x, st, 415, "charset "+ct.Charset+" cannot be inspected (JSON-RPC bodies are UTF-8)"), true
	}
	if enc := pythonEncoding(b.raw); enc != "" {
		// Python's json reads such bytes as UTF-16 or UTF-32 text, where Level 2 (a UTF-8
		// reader) would see no JSON at all.
		return refuseUnreadable(s, x, st, 415, "body in "+enc+" cannot be inspected (JSON-RPC bodies are UTF-8)"), true
	}
	if !ct.JSON && !namesJSON(ctv) && !looksJSON(b.raw) {
		return exchange.Continue, true
	}
	if blank(b.raw) {
		return exchange.Continue, true // no message in it: nothing to judge, nothing a server acts on
	}
	return exchange.Continue, false
}

// decodeRequest decodes the body as the most lenient server reads it (a BOM and Unicode spaces
// around the JSON stripped; it is forwarded as the client sent it), strictly, and refuses a key
// a server reads as one a rule reads but spelt so that the rule misses it.
func decodeRequest(s *conn, x *exchange.Exchange, st *xstate, b *requestBody) (exchange.Result, bool) {
	allowBatch := batchAllowed(st.version, x.Req)
	msgs, batch, err := mcp.Decode(trimLenient(b.raw), mcp.DecodeOptions{MaxSize: int(s.maxBody()), AllowBatch: allowBatch})
	if err != nil {
		if errors.Is(err, mcp.ErrTooLarge) {
			return refuseUnreadable(s, x, st, 413, "JSON-RPC body over the route's max_body"), true
		}
		return refuseUnreadable(s, x, st, 400, "JSON-RPC body refused: "+err.Error()), true
	}
	if why, bad := clientResultCaseVariant(msgs); bad {
		return refuseUnreadable(s, x, st, 400, "JSON-RPC body refused: "+why), true
	}
	if rs := s.rules(); rs != nil {
		for _, m := range msgs {
			if why, bad := argumentCaseVariant(m, rs); bad {
				return refuseUnreadable(s, x, st, 400, "JSON-RPC body refused: "+why), true
			}
		}
	}
	b.msgs, b.batch = msgs, batch
	return exchange.Continue, false
}

// correlateRequest starts the record of every message, indexes the requests by id (for their
// responses) and takes the version and client info the messages carry.
func correlateRequest(s *conn, x *exchange.Exchange, st *xstate, b *requestBody) (exchange.Result, bool) {
	for _, m := range b.msgs {
		r := newRecord(s, x, st, m, ClientToServer)
		st.reqs = append(st.reqs, r)
		st.messages++
		if m.Kind == mcp.KindRequest {
			if st.byID == nil {
				st.byID = make(map[string]*Record, len(b.msgs))
			}
			k := idKey(m)
			if st.byID[k] != nil {
				// Two requests with one id: their responses could not be told apart, so a result
				// could be judged as the other request's.
				return refuseUnreadable(s, x, st, 400, "JSON-RPC body refused: duplicate request id "+r.ID+" in a batch"), true
			}
			st.byID[k] = r
		}
		if _, ok := m.Param("cursor"); ok {
			r.cursor = true
		}
		ci := clientInfoOf(m) // decoded once: the exchange's, the flow's
		if m.Method == "initialize" {
			st.initialize = true
			st.clientInfo = ci
		}
		if pv := m.ProtocolVersion(); pv != "" && m.Method != "initialize" {
			st.version = pv
		}
		if st.clientInfo == nil && m.Kind == mcp.KindRequest {
			// 2026-07-28 carries clientInfo in each request's _meta: keep it for what the
			// server asks of the client in this exchange (input requests, withheld capabilities).
			st.clientInfo = ci
		}
		s.ident.note(ci)
	}
	for _, r := range st.reqs {
		if r.Version == "" {
			r.Version = st.version
		}
	}
	return exchange.Continue, false
}

// matchHeaders is SEP-2243: the headers are the client's claim, the body is the truth; a
// request whose MCP headers disagree with its body is refused with HTTP 400 and -32020.
func matchHeaders(s *conn, x *exchange.Exchange, st *xstate, b *requestBody) (exchange.Result, bool) {
	why := headerMismatch(x.Req, b.msgs, b.batch)
	if why == "" {
		return exchange.Continue, false
	}
	for _, r := range st.reqs {
		r.Decision, r.Rule, r.Reason = policy.ActionDeny, "header-mismatch", why
	}
	var id json.RawMessage
	if !b.batch && len(b.msgs) == 1 {
		id = b.msgs[0].ID
	}
	body := errorBody(id, CodeHeaderMismatch, "header mismatch: "+why, "header-mismatch", why, 0)
	st.answered, st.answerCode = true, CodeHeaderMismatch
	x.Answer(400, []exchange.Header{{Name: "Content-Type", Value: "application/json"}}, body,
		exchange.Verdict{Decision: exchange.Deny, Status: 400, Rule: "header-mismatch", Reason: why})
	return exchange.Stop, true
}

// judgeRequests is policy, message by message: the first refusal refuses the body (a batch is
// one HTTP message; forwarding part of it would change what the client sent).
func judgeRequests(s *conn, x *exchange.Exchange, st *xstate, b *requestBody) (exchange.Result, bool) {
	var denied *Record
	var dec policy.Decision
	b.decs = make([]policy.Decision, len(b.msgs))
	for i, m := range b.msgs {
		r := st.reqs[i]
		d := evaluate(s, x, st, m, r, ClientToServer, nil, nil)
		b.decs[i] = d
		r.Decision, r.Rule, r.Reason = d.Action, d.Rule, d.Reason
		if d.Action != policy.ActionAllow && denied == nil {
			denied, dec = r, d
		}
	}
	if denied != nil {
		return refuse(s, x, st, b.msgs, b.batch, denied, dec), true
	}
	return exchange.Continue, false
}

// checkArguments is the route's validate_arguments: tools/call arguments against the input
// schema the server listed.
func checkArguments(s *conn, x *exchange.Exchange, st *xstate, b *requestBody) (exchange.Result, bool) {
	if !s.f.ValidateArguments {
		return exchange.Continue, false
	}
	return validateArguments(s, x, st, b.msgs, b.batch)
}

// transform applies what the allowed messages' decisions ask for (redaction, _meta).
func transform(s *conn, x *exchange.Exchange, st *xstate, b *requestBody) (exchange.Result, bool) {
	b.out = transformRequests(s, x, st, b.msgs, b.batch, b.decs)
	return exchange.Continue, false
}

// rememberRequests keeps, in the appliance's session memory, what a response on another
// connection will need: the 2024-11-05 client's info, and every request still to be answered.
func rememberRequests(s *conn, x *exchange.Exchange, st *xstate, b *requestBody) (exchange.Result, bool) {
	if st.legacy && st.initialize && st.session != "" {
		// 2024-11-05: the session is the endpoint URL's, known now; no response will carry an
		// Mcp-Session-Id, so the client's info is kept for its GET stream here.
		s.f.Sessions.SetClientInfo(s.owner, st.session, st.clientInfo)
	}
	if st.session != "" {
		// The answer may come on another connection: the 2024-11-05 GET stream, or a stream of
		// the same session (a client matches a response to any of its outstanding requests).
		for i, r := range st.reqs {
			if r.Kind == mcp.KindRequest.String() {
				p := Pending{Method: r.Method, Name: r.Name, ID: r.ID, Cursor: r.cursor, span: r.span}
				if i < len(b.msgs) {
					// Its progress notifications may come on any stream (inCall).
					p.Progress = progressKey(b.msgs[i])
				}
				s.f.Sessions.AddPending(s.owner, st.session, r.key, p)
				r.pended = true
			}
		}
	}
	return exchange.Continue, false
}

// refuse answers a denied request with a JSON-RPC error (HTTP 200, or an SSE event when the client
// accepts only a stream), naming the appliance, the rule and the reason. The server never sees it.
func refuse(s *conn, x *exchange.Exchange, st *xstate, msgs []*mcp.Message, batch bool, denied *Record, d policy.Decision) exchange.Result {
	code, msg := CodeDenied, "denied by "+Intermediary+" policy"
	if d.Action == policy.ActionRateLimited {
		code, msg = CodeRateLimited, "rate limited by "+Intermediary+" policy"
	}
	return refuseWith(s, x, st, msgs, batch, denied, d, code, msg)
}

// refuseWith answers like refuse, with the given JSON-RPC code and message.
func refuseWith(s *conn, x *exchange.Exchange, st *xstate, msgs []*mcp.Message, batch bool, denied *Record, d policy.Decision, code int, msg string) exchange.Result {
	for _, r := range st.reqs {
		if r != denied && r.Decision == policy.ActionAllow {
			r.Decision, r.Rule = denied.Decision, denied.Rule
			r.Reason = "batch refused: " + denied.Method + " " + denied.Name + " denied"
		}
	}
	var body []byte
	switch {
	case batch:
		body = batchErrorBody(msgs, code, msg, d.Rule, d.Reason, d.RetryAfter)
	case msgs[0].Kind == mcp.KindRequest:
		body = errorBody(msgs[0].ID, code, msg, d.Rule, d.Reason, d.RetryAfter)
	default:
		// A notification or a response has no id to answer: refuse at the HTTP level, still
		// with a JSON-RPC body so that no client reads it as an old server.
		body = errorBody(nil, code, msg, d.Rule, d.Reason, d.RetryAfter)
	}
	status := 200
	if st.legacy || (!batch && msgs[0].Kind != mcp.KindRequest) {
		// A 2024-11-05 client reads answers on its GET stream and only the POST's status here:
		// a 200 would leave it waiting for an answer that never comes on the stream.
		status = 403
	}
	hdrs := []exchange.Header{{Name: "Content-Type", Value: "application/json"}}
	if status == 200 && st.acceptSSE && !st.acceptJSON {
		hdrs[0].Value = "text/event-stream"
		body = sseEvent(body)
	}
	if d.RetryAfter > 0 {
		hdrs = append(hdrs, exchange.Header{Name: "Retry-After", Value: retryAfterHeader(d.RetryAfter)})
	}
	st.answered, st.answerCode = true, code
	x.Answer(status, hdrs, body, exchange.Verdict{Decision: exchange.Decision(d.Action), Status: status, Rule: d.Rule, Reason: d.Reason, RetryAfter: d.RetryAfter})
	return exchange.Stop
}

// refuseUnreadable answers a body Level 2 cannot inspect; it is never forwarded uninspected.
func refuseUnreadable(s *conn, x *exchange.Exchange, st *xstate, status int, why string) exchange.Result {
	why = redactTextAll(why, s.rules()) // a decoder's detail may quote a key or value a rule hides
	code := CodeUnreadable
	if status == 413 {
		code = CodeTooLarge
	}
	r := &Record{Time: st.start, Direction: ClientToServer, Decision: policy.ActionDeny, Rule: "level2", Reason: why,
		HTTPMethod: x.Req.Method, Path: pathOf(x.Req.Target), Version: st.version,
		Caller: policy.CallerFrom(x.Get(policy.CallerKey{}))}
	if s.f.Tracer != nil {
		// No message to name: the span is the HTTP request's, its error the refusal's code.
		c := s.f.Trace
		c.HTTPMethod, c.Path, c.ProtocolVersion, c.SessionID = r.HTTPMethod, r.Path, st.version, st.session
		if sp := s.f.Tracer.Start(headerParent(x.Req), tracing.KindClient, c, st.start); sp != nil {
			r.span, r.TraceID, r.SpanID = &openSpan{sp: sp}, sp.TraceID(), sp.SpanID()
		}
	}
	st.reqs = append(st.reqs, r)
	st.messages++
	st.answered, st.answerCode = true, code
	x.Answer(status, []exchange.Header{{Name: "Content-Type", Value: "application/json"}},
		errorBody(nil, code, "request refused by "+Intermediary, "level2", why, 0),
		exchange.Verdict{Decision: exchange.Deny, Status: status, Rule: "level2", Reason: why})
	return exchange.Stop
}

// ---- response side ----

func (s *conn) responseHead(_ context.Context, x *exchange.Exchange) exchange.Result {
	st := stateOf(x)
	if st == nil || st.answered {
		return exchange.Continue
	}
	h := x.Resp
	if h.Count("Mcp-Session-Id") > 1 {
		// A client would take the first (Go) or both joined (fetch) as its session: Level 2
		// could not tell which session, and so which client, the stream's requests go to.
		s.emit(&Record{Time: time.Now(), Direction: ServerToClient, Decision: policy.ActionDeny, Rule: "level2",
			HTTPMethod: x.Req.Method, Path: pathOf(x.Req.Target), Reason: "response refused: Mcp-Session-Id header repeated"})
		x.Abort("level2: Mcp-Session-Id header repeated in the response")
		return exchange.Stop
	}
	if st.initialize {
		if v, ok := h.Get("Mcp-Session-Id"); ok && v != "" {
			st.session = hashKey(v)
			s.f.Sessions.SetClientInfo(s.owner, st.session, st.clientInfo)
		}
	}
	ctv, _ := contentTypes(h)
	ct := ParseContentType(ctv)
	switch {
	case h.NoBody:
	case !ct.SSE && namesEventStream(ctv):
		// A client that looks for "event-stream" anywhere in the type would read this as a
		// stream Level 2 did not frame as one: refuse rather than forward it uninspected.
		x.Abort("level2: a response type naming event-stream that is not text/event-stream (" + oneLine(ctv) + ")")
		return exchange.Stop
	case ct.SSE:
		if ce, ok := h.Get("Content-Encoding"); ok && !isIdentity(ce) {
			x.Abort("level2: an encoded event stream (" + ce + ") cannot be inspected")
			return exchange.Stop
		}
		x.WantEvents(int(s.maxBody()))
	case ct.JSON || ct.MediaType == "" || namesJSON(ctv):
		// JSON, a JSON-like type (application/json-rpc) or none at all: clients parse those, so
		// Level 2 reads them too (a body that is not JSON then goes through as it came).
		o := exchange.OverflowClose
		if s.f.ForwardOversized {
			o = exchange.OverflowForward
		}
		x.WantResponseBody(s.maxBody(), o)
	}
	return exchange.Continue
}

func (s *conn) responseBody(_ context.Context, x *exchange.Exchange) exchange.Result {
	st := stateOf(x)
	if st == nil {
		return exchange.Continue
	}
	body := x.ResponseBody()
	encoded := false
	if ce, ok := x.Resp.Get("Content-Encoding"); ok && !isIdentity(ce) {
		dec, err := DecodeBody(ce, body, s.maxBody())
		if err != nil {
			return refuseResponse(s, x, st, "response body does not decode as "+oneLine(ce)+": "+decodeProblem(err))
		}
		body, encoded = dec, true
	}
	ctv, _ := contentTypes(x.Resp)
	if enc := pythonEncoding(body); enc != "" {
		return refuseResponse(s, x, st, "response body in "+enc+" cannot be inspected (JSON-RPC bodies are UTF-8)")
	}
	if !ParseContentType(ctv).JSON && !namesJSON(ctv) && !looksJSON(body) {
		return exchange.Continue // not JSON by its type or its bytes: no client reads it as JSON-RPC
	}
	if blank(body) {
		// An empty answer (202 to a notification or a legacy POST, however typed) carries no
		// message: it passes as it came.
		return exchange.Continue
	}
	msgs, batch, err := mcp.Decode(trimLenient(body), mcp.DecodeOptions{MaxSize: int(s.maxBody()), AllowBatch: true})
	if err != nil {
		// The strict decoder refused what a lenient client would read (a duplicate key, a lone
		// surrogate): forwarding it would let the server past every response rule.
		return refuseResponse(s, x, st, "response refused: "+decodeProblem(err))
	}
	out, changed := responses(s, context.Background(), x, st, msgs, false)
	if changed {
		kept := compact(out)
		switch {
		case len(kept) == 0:
			// Every message was a server request policy blocks (dropped, the server answered):
			// the client's requests of this exchange get an error naming the appliance instead
			// of an answer the server never gave.
			x.SetResponseBody(unanswered(s, st, msgs))
		case batch:
			x.SetResponseBody(joinBatch(kept))
		default:
			x.SetResponseBody(kept[0])
		}
		if encoded {
			x.DelResponseHeader("Content-Encoding")
		}
	}
	return exchange.Continue
}

func (s *conn) event(ctx context.Context, x *exchange.Exchange, ev *exchange.Event) exchange.Result {
	st := stateOf(x)
	if st == nil {
		return exchange.Continue
	}
	cr := st.eventCR
	st.eventCR = len(ev.Raw) > 0 && ev.Raw[len(ev.Raw)-1] == '\r'
	if bareCR(ev.Raw, cr) {
		// Peers split this stream into different events (the Go SDK ends lines at LF only): what
		// one of them dispatches cannot be judged for both.
		s.emit(&Record{Time: time.Now(), Direction: ServerToClient, Decision: policy.ActionDeny, Rule: "level2",
			HTTPMethod: x.Req.Method, Path: pathOf(x.Req.Target), Reason: "event stream refused: a bare CR line end, which peers frame differently"})
		x.Abort("level2: an SSE line ended by a bare CR (peers frame it differently)")
		return exchange.Stop
	}
	if !ev.HasData {
		return exchange.Continue
	}
	data := []byte(ev.Data)
	if ev.Type == "endpoint" && !looksJSON(data) {
		// 2024-11-05: the stream announces where to POST; its session id ties the POSTs
		// (other connections) to this stream. An endpoint event whose data is JSON is judged
		// below like any other: the Go SDK's legacy client decodes every event after the first.
		// Only the first endpoint event of a GET stream opens a session: any other would let a
		// server open sessions without bound (and evict the client's), and a later one is read
		// differently by clients (the TypeScript SDK moves its POSTs there, the Go SDK ignores
		// it), so it is dropped.
		if x.Req.Method != "GET" {
			return exchange.Continue
		}
		if st.endpoint != "" {
			ev.Drop()
			s.emit(&Record{Time: time.Now(), Direction: ServerToClient, Decision: policy.ActionDeny, Rule: "level2",
				HTTPMethod: x.Req.Method, Path: pathOf(x.Req.Target), Reason: "event dropped: a second endpoint event on the stream"})
			return exchange.Continue
		}
		if ep := endpointTarget(x.Req.Target, ev.Data); ep != "" {
			st.session, st.legacy, st.endpoint = legacyKey(ep), true, ep
			s.f.Sessions.Open(s.owner, st.session)
			if s.f.Tools != nil {
				// Its POSTs name this stream's server to tool integrity (toolServer).
				s.f.Sessions.setStreamPath(s.owner, st.session, x.Req.Target)
			}
		}
		return exchange.Continue
	}
	if !looksJSON(data) {
		return exchange.Continue
	}
	msgs, batch, err := mcp.Decode(trimLenient(data), mcp.DecodeOptions{MaxSize: int(s.maxBody()), AllowBatch: true})
	if err != nil {
		// JSON the strict decoder refuses (a duplicate key, a lone surrogate) is what a lenient
		// client would still read: the event is dropped, never forwarded past the response rules.
		ev.Drop()
		s.emit(&Record{Time: time.Now(), Direction: ServerToClient, Decision: policy.ActionDeny, Rule: "level2",
			HTTPMethod: x.Req.Method, Path: pathOf(x.Req.Target), Reason: "event dropped: not strict JSON-RPC: " + decodeProblem(err)})
		return exchange.Continue
	}
	out, changed := responses(s, ctx, x, st, msgs, true)
	if changed {
		kept := out[:0:0]
		for _, o := range out {
			if o != nil {
				kept = append(kept, o)
			}
		}
		switch {
		case len(kept) == 0:
			// A blocked server→client request: the client never sees it (the server was
			// answered on its behalf).
			ev.Drop()
		case batch:
			ev.Replace(encodeEvent(ev, joinBatch(kept)))
		default:
			ev.Replace(encodeEvent(ev, kept[0]))
		}
	}
	return exchange.Continue
}

// responses records and judges server→client messages; it returns the messages' bytes, changed
// where policy replaced a response with an error, filtered a list, or redacted something. In a
// stream, a nil entry is a message to drop (a blocked server→client request, answered to the
// server on the client's behalf).
func responses(s *conn, ctx context.Context, x *exchange.Exchange, st *xstate, msgs []*mcp.Message, stream bool) ([][]byte, bool) {
	out := make([][]byte, len(msgs))
	changed := false
	for i, m := range msgs {
		out[i] = m.Raw
		switch m.Kind {
		case mcp.KindResponse, mcp.KindError:
			key := idKey(m)
			req := st.byID[key]
			if req != nil && st.session != "" {
				s.f.Sessions.TakePending(s.owner, st.session, key) // answered here
			}
			if req == nil {
				// Not answering a request of this exchange: one of the session's requests made on
				// another connection (the 2024-11-05 GET stream, a resumed stream), or a response
				// to nothing this client asked. A client matches a response to any request it
				// has outstanding, so one Level 2 cannot pair with its request is never passed
				// on: it would skip that request's response rules (list filtering, redaction).
				r := newRecord(s, x, st, m, ServerToClient)
				st.messages++
				defer s.emit(r)
				p, ok := s.f.Sessions.TakePending(s.owner, st.session, key)
				if !ok && len(m.ID) > 0 {
					r.Decision, r.Rule = policy.ActionDeny, "level2"
					r.Reason = "response dropped: it answers no outstanding request of this client"
					out[i], changed = nil, true
					continue
				}
				r.Method, r.Name, r.cursor = p.Method, p.Name, p.Cursor
				if p.span != nil {
					r.span, r.TraceID, r.SpanID = p.span, p.span.sp.TraceID(), p.span.sp.SpanID()
				}
				req = r
			}
			if req.span != nil {
				defer endResponseSpan(req, m) // once policy, surface control and redaction had their say
			}
			if o, bad := refuseResultMembers(s, m, req); bad {
				out[i], changed = o, true // judged by its request's method (result_members.go)
				continue
			}
			if st.initialize && m.Kind == mcp.KindResponse {
				if v := resultString(m.Result, "protocolVersion"); v != "" {
					st.version = v
					s.f.Sessions.SetVersion(s.owner, st.session, v)
				}
			}
			d := evaluate(s, x, st, m, req, ServerToClient, req, nil)
			if m.Kind == mcp.KindError && m.Error != nil {
				// The record gets the message as the client sees it: redacted first.
				req.Err = fmt.Sprintf("server error %d: %s", m.Error.Code, oneLine(redactText(m.Error.Message, d.Redactions)))
			}
			if d.Action != policy.ActionAllow && m.Kind == mcp.KindResponse {
				// Policy on a result: the client gets an error naming the appliance instead,
				// never a made-up result.
				out[i] = errorBody(m.ID, CodeDenied, "result withheld by "+Intermediary+" policy", d.Rule, d.Reason, 0)
				changed = true
				req.Decision, req.Rule, req.Reason = d.Action, d.Rule, "result withheld: "+d.Reason
				auditOutcome(s, req, "denied", 0, req.Reason)
				continue
			}
			if m.Kind == mcp.KindError && m.Error != nil {
				auditOutcome(s, req, "error", m.Error.Code, "")
			} else {
				auditOutcome(s, req, "result", 0, "")
			}
			if m.Kind != mcp.KindResponse {
				if o, ok := errorElicitations(s, x, st, m, req); ok {
					out[i], changed = o, true // a URL elicitation policy blocks (elicit_error.go)
					continue
				}
				if o, ok := redact(s, out[i], d, "error", req); ok {
					out[i], changed = o, true
				}
				continue
			}
			if o, ok := surface(s, x, st, m, req); ok {
				out[i], changed = o, true
			}
			if o, ok := redact(s, out[i], d, "result", req); ok {
				out[i], changed = o, true
			}
		default:
			// A server→client request (sampling, elicitation, roots, ping) or notification.
			r := newRecord(s, x, st, m, ServerToClient)
			st.messages++
			if m.Kind == mcp.KindNotification && m.Method == "notifications/tools/list_changed" {
				s.f.Sessions.toolSchemas().forget(st.schemaKey())
			}
			if m.Kind == mcp.KindNotification && s.f.Tools != nil && listChanged[m.Method] {
				// The next list is judged afresh (pins and quarantines stay).
				s.f.Tools.Forget(st.tools)
			}
			var extra func(*policy.Message)
			kind := ""
			if m.Kind == mcp.KindRequest {
				tool, ambiguous := streamTool(s, x, st)
				st.unknownTool = ambiguous
				extra = serverRequestInput(m.Method, m.Params, tool)
				if serverRequestKinds[m.Method] != "" {
					kind = kindOf(m.Method, m.Params)
					if tool != "" {
						r.Name = mcp.RedactURI(tool)
					}
				}
			}
			var sp *openSpan
			if m.Kind == mcp.KindRequest && s.f.Tracer != nil {
				sp = startSpan(s, st, r, m, ServerToClient, traceParent(m, func() tracing.Parent { return exchangeParent(x, st) }), r.Time)
			}
			d := evaluate(s, x, st, m, r, ServerToClient, nil, extra)
			st.unknownTool = false
			d = inCall(s, x, st, m, d) // a redact (or deny) rule on the call covers its stream
			if d.Action == policy.ActionAllow && m.Kind == mcp.KindRequest {
				if err := authorizeServerRequest(s, ctx, x, st, m, r); err != nil {
					d = policy.Decision{Action: policy.ActionDeny, Rule: "audit", Reason: "audit unavailable: " + oneLine(err.Error())}
				}
			}
			r.Decision, r.Rule, r.Reason = d.Action, d.Rule, d.Reason
			if kind != "" {
				r.Reason = kind + " request from the server: " + r.Reason
			}
			if sp != nil {
				if d.Action != policy.ActionAllow {
					sp.end(r, CodeDenied, 0, false, time.Now()) // dropped: the server got the appliance's error
				} else if len(m.ID) > 0 {
					s.spans.add(idKey(m), sp) // ended by the client's answer, or with the flow
				}
			}
			if d.Action != policy.ActionAllow {
				// In a stream, a JSON body or a batch alike: the client never gets a blocked
				// server message.
				out[i], changed = nil, true
				if m.Kind == mcp.KindRequest {
					if d.Rule != "audit" {
						auditServerDenial(s, x, st, m, r)
					}
					r.Reason += "; dropped, the server was answered with JSON-RPC error " + fmt.Sprint(CodeDenied)
					answerServer(s, ctx, x, st, m, r, d)
					continue
				}
				r.Reason += "; dropped"
			} else if o, ok := redact(s, out[i], d, "params", r); ok {
				out[i], changed = o, true
			}
			s.emit(r)
		}
	}
	return out, changed
}

// surface applies surface control to an allowed result: a list loses what this client may not
// use (and its schemas are learnt for validate_arguments), an input_required result is judged
// request by request. It returns the new message when it changed.
func surface(s *conn, x *exchange.Exchange, st *xstate, m *mcp.Message, req *Record) ([]byte, bool) {
	if req.Method == "tools/list" && s.f.ValidateArguments {
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
			Name: mcp.RedactURI(tool), Version: st.version, HTTPMethod: x.Req.Method, Path: pathOf(x.Req.Target)}
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
	return errorBody(m.ID, CodeDenied, "input request denied by "+Intermediary+" policy", blocked.Rule, blocked.Reason, 0), true
}

// redact applies the redact rules of d to msg (scope: the member patterns scan). It notes on r
// what was redacted (rules and paths, never values).
func redact(s *conn, msg []byte, d policy.Decision, scope string, r *Record) ([]byte, bool) {
	if len(d.Redactions) == 0 {
		return nil, false
	}
	out, hits, n := redactJSON(msg, d.Redactions, scope)
	if n == 0 {
		return nil, false
	}
	appendReason(r, describeHits(hits, n))
	if r.Decision == "" || r.Decision == policy.ActionAllow {
		r.Rule = hits[0].rule
	}
	return out, true
}

func appendReason(r *Record, s string) {
	if r.Reason == "" || r.Reason == policy.ReasonNoMatch {
		r.Reason = s
		return
	}
	r.Reason += "; " + s
}

// refuseResponse replaces a response body Level 2 cannot read with a JSON-RPC error naming the
// appliance (never the server's bytes uninspected, never a made-up result).
func refuseResponse(s *conn, x *exchange.Exchange, st *xstate, why string) exchange.Result {
	why = redactTextAll(why, s.rules())
	unreadableResponse(s, x, st, why)
	st.respCode = CodeUnreadable
	var id json.RawMessage
	if len(st.reqs) == 1 && st.reqs[0].ID != "" {
		id = json.RawMessage(st.reqs[0].rawID)
	}
	x.SetResponseBody(errorBody(id, CodeUnreadable, "response refused by "+Intermediary, "level2", why, 0))
	x.DelResponseHeader("Content-Encoding")
	x.SetResponseHeader("Content-Type", "application/json")
	return exchange.Continue
}

func unreadableResponse(s *conn, x *exchange.Exchange, st *xstate, why string) {
	for _, r := range st.reqs {
		if r.Err == "" {
			r.Err = why
		}
	}
}

// Done writes the records of the exchange's client→server messages, with the outcome.
func (s *conn) done(x *exchange.Exchange) {
	st := stateOf(x)
	if st == nil {
		return
	}
	auditUnended(s, x, st)
	endRequestSpans(s, x, st)
	for i, r := range st.reqs {
		r.Status = x.Status
		r.Duration = x.Duration
		if i == 0 {
			r.BytesUp, r.BytesDown = x.BytesUp, x.BytesDown
		}
		if r.Err == "" && x.Err != "" {
			r.Err = x.Err
		}
		if r.Err == "" && x.Uninspected != "" {
			r.Err = x.Uninspected
		}
		s.emit(r)
	}
	st.reqs = nil
}

// rules is the rule set that judges now, or nil (allow all).
func (s *conn) rules() Evaluator {
	if s.f.Rules == nil {
		return nil
	}
	return s.f.Rules()
}

func (s *conn) emit(r *Record) {
	if s.f.Record != nil {
		s.f.Record(r)
	}
}

// ---- policy ----

// evaluate judges one message. For a response, req is the request it answers (its method and
// name are the response's as far as rules are concerned).
// extra adds facts of surface control (the tool a server request was made for, an elicitation's
// mode).
func evaluate(s *conn, x *exchange.Exchange, st *xstate, m *mcp.Message, r *Record, dir string, req *Record, extra func(*policy.Message)) policy.Decision {
	rs := s.rules()
	if rs == nil {
		return policy.Decision{Action: policy.ActionAllow}
	}
	// A server message no rule is written for cannot be denied; the costly members (arguments,
	// result, client info) are decoded only if some rule reads them (policy.Body, lazily).
	if dir == ServerToClient && !rs.Needs().ServerMessages {
		return policy.Decision{Action: policy.ActionAllow, Reason: policy.ReasonNoMatch}
	}
	v := &st.vars
	v.msg = policy.Message{Direction: dir, Kind: m.Kind.String(), Method: r.Method, Name: r.Name, ID: r.ID,
		Version: st.version, Session: st.session}
	v.body = messageBody{s: s, st: st, m: m, dir: dir}
	v.msg.Body = &v.body
	if m.Kind == mcp.KindError && m.Error != nil {
		v.rpcErr = policy.RPCError{Code: m.Error.Code, Message: m.Error.Message}
		v.msg.Error = &v.rpcErr
	}
	if extra != nil {
		extra(&v.msg)
	}
	if dir == ClientToServer && m.Kind == mcp.KindRequest && integrityCall(m.Method) {
		// Present on every call of a tool or prompt, empty on a route without tool_pins.
		v.tools = r.tv
		v.msg.Tools = &v.tools
	}
	if dir == ClientToServer && (m.Kind == mcp.KindRequest) && isRetry(m) {
		v.msg.Retry = true
	}
	v.http = policy.Request{Method: x.Req.Method, Path: pathOf(x.Req.Target)}
	if info := mcp.InfoOf(x); info != nil {
		v.http.Headers = policy.HeaderMap(info.Headers)
	}
	v.in = policy.Input{Vars: policy.Vars{Client: s.f.Client, Conn: s.f.Conn, HTTP: &v.http, MCP: &v.msg, Auth: policy.AuthFrom(x.Get(policy.AuthKey{}))},
		FailOpen: s.f.FailOpen, ServerMessage: dir == ServerToClient}
	if dir == ServerToClient && rs.Needs().ClientInfo {
		// The client this message goes to cannot be told: a rule on its info fails rather
		// than read a guess (or nothing, which would look like a client that sent none).
		if _, known := clientIdentity(s, st); !known {
			v.in.Vars.Unknown = unknownClient
		}
	}
	if dir == ServerToClient && st.unknownTool {
		v.in.Vars.Unknown = append(slices.Clip(v.in.Vars.Unknown), unknownTool...)
	}
	d := rs.Evaluate(&v.in)
	if d.Action == "" {
		d.Action = policy.ActionAllow
	}
	if d.Action == policy.ActionAllow && d.Reason == "" {
		d.Reason = policy.ReasonNoMatch
	}
	return d
}

// evalVars is the policy input of one evaluation, kept on the exchange and reused message after
// message: nothing of it is allocated per message. An exchange's evaluations run on one goroutine
// at a time (the request side, then the response side).
type evalVars struct {
	in     policy.Input
	http   policy.Request
	msg    policy.Message
	rpcErr policy.RPCError
	tools  policy.ToolIntegrity
	body   messageBody
}

// messageBody gives policy the members of m that cost a decode, when a rule reads them.
type messageBody struct {
	s   *conn
	st  *xstate
	m   *mcp.Message
	dir string
}

func (b *messageBody) Arguments() map[string]any {
	if b.m.Kind != mcp.KindRequest && b.m.Kind != mcp.KindNotification {
		return nil
	}
	return b.m.Arguments()
}

func (b *messageBody) Result() any {
	if b.m.Kind != mcp.KindResponse {
		return nil
	}
	return mcp.DecodeValue(b.m.Result)
}

// ClientInfo is the info of the client, only ever as the client sent it: a client message's own
// (initialize, _meta), else the client's identity for this exchange, session or flow. A
// server→client message's own _meta is never read: the server does not name the client.
func (b *messageBody) ClientInfo() map[string]any {
	if b.dir != ServerToClient && b.m.Kind != mcp.KindRequest && b.m.Kind != mcp.KindNotification {
		return nil
	}
	if b.dir != ServerToClient {
		if ci := b.m.ClientInfo(); ci != nil {
			return ci
		}
	}
	if b.s == nil {
		return b.st.clientInfo
	}
	ci, _ := clientIdentity(b.s, b.st)
	return ci
}

// newRecord starts the record of m.
func newRecord(s *conn, x *exchange.Exchange, st *xstate, m *mcp.Message, dir string) *Record {
	r := &Record{
		Time: time.Now(), Direction: dir, Kind: m.Kind.String(), ID: m.IDText(), rawID: m.ID, Method: m.Method,
		Version: st.version, HTTPMethod: x.Req.Method, Path: pathOf(x.Req.Target), Decision: policy.ActionAllow,
		Caller: policy.CallerFrom(x.Get(policy.CallerKey{})),
	}
	if len(m.ID) > 0 {
		r.key = idKey(m)
	}
	if dir == ClientToServer {
		r.Time = st.start
	}
	if n := m.Name(); n != "" {
		r.Name = mcp.RedactURI(n)
	}
	if m.Kind == mcp.KindResponse || m.Kind == mcp.KindError {
		if req := st.byID[idKey(m)]; req != nil {
			r.Method, r.Name = req.Method, req.Name
		}
	}
	return r
}

// ---- SEP-2243 ----

// headerMismatch compares the MCP headers a request carries with its body; "" when they agree.
func headerMismatch(h *exchange.Head, msgs []*mcp.Message, batch bool) string {
	// A repeated MCP header is a claim with two values; servers disagree on which counts.
	for _, name := range []string{"Mcp-Method", "Mcp-Name", "MCP-Protocol-Version"} {
		n := 0
		for _, hd := range h.Headers {
			if exchange.EqualFold(hd.Name, name) {
				n++
			}
		}
		if n > 1 {
			return name + " header repeated"
		}
	}
	hm, hasM := h.Get("Mcp-Method")
	hn, hasN := h.Get("Mcp-Name")
	hv, hasV := h.Get("MCP-Protocol-Version")
	if !hasM && !hasN && !hasV {
		return ""
	}
	if batch || len(msgs) != 1 {
		if hasM || hasN {
			return "Mcp-Method/Mcp-Name on a batch"
		}
		return ""
	}
	m := msgs[0]
	if hasM && (m.Kind == mcp.KindRequest || m.Kind == mcp.KindNotification) && hm != m.Method {
		return fmt.Sprintf("Mcp-Method header %q does not match body method %q", hm, m.Method)
	}
	if hasN {
		name, err := mcp.DecodeHeaderValue(hn)
		if err != nil {
			// Worded as Level 1 refuses the same header: a framing error of the request.
			return "Mcp-Name header does not decode: " + (&exchange.MalformedError{Msg: err.Error()}).Error()
		}
		if name != m.Name() {
			return fmt.Sprintf("Mcp-Name header %q does not match body name %q", mcp.RedactURI(name), mcp.RedactURI(m.Name()))
		}
	}
	if hasV && m.Method != "initialize" {
		if pv := m.ProtocolVersion(); pv != "" && pv != hv {
			return fmt.Sprintf("MCP-Protocol-Version header %q does not match _meta protocolVersion %q", hv, pv)
		}
	}
	return ""
}

// batchAllowed: JSON-RPC batches exist only in MCP 2025-03-26 (mcp.Version.BatchesAllowed). A
// request that carries MCP-Protocol-Version is at least 2025-06-18 (the header came with it) unless
// it says 2025-03-26; one without it and without a known session version comes from a 2025-03-26
// (or older) client.
func batchAllowed(version string, h *exchange.Head) bool {
	if version != "" {
		return mcp.Version(version).BatchesAllowed()
	}
	_, has := h.Get(mcp.HeaderProtocolVersion)
	return !has
}

// ---- helpers ----

func hashKey(v string) string {
	sum := sha256.Sum256([]byte(v))
	return hex.EncodeToString(sum[:6])
}

// legacyKey is the session key of a 2024-11-05 endpoint: the target (path and query) the client
// POSTs to, which is what ties its POSTs to the GET stream that announced it.
func legacyKey(target string) string { return hashKey("ep:" + target) }

// legacySession returns the session parameter of a 2024-11-05 POST target (sessionId, sessionid,
// session_id, in any case), for a POST whose GET stream this appliance did not see.
func legacySession(target string) string {
	i := strings.IndexByte(target, '?')
	if i < 0 {
		return ""
	}
	q, err := url.ParseQuery(target[i+1:])
	if err != nil {
		return ""
	}
	for k, v := range q {
		if (strings.EqualFold(k, "sessionid") || strings.EqualFold(k, "session_id")) && len(v) > 0 && v[0] != "" {
			return v[0]
		}
	}
	return ""
}

// pathOf is http.path, read as Level 1 reads it (mcp.PathOf).
func pathOf(target string) string { return mcp.PathOf(target) }

// accepts reads the request's Accept lines the way Level 1 does (mcp.Accepts).
func accepts(h *exchange.Head) (sse, json bool) {
	return mcp.Accepts(h.Headers, "text/event-stream", "text/*", "*/*"),
		mcp.Accepts(h.Headers, "application/json", "application/*", "*/*")
}

func isIdentity(ce string) bool {
	ce = strings.TrimSpace(ce)
	return ce == "" || strings.EqualFold(ce, "identity")
}

// decodeProblem describes why a server's bytes did not decode without quoting them: a reason goes
// to the client and the record, and what the server sent may hold a value a rule redacts.
func decodeProblem(err error) string {
	var je *mcp.JSONError
	if errors.As(err, &je) {
		return fmt.Sprintf("json: %v at offset %d", je.Err, je.Offset)
	}
	return oneLine(err.Error())
}

// compact returns the non-nil entries of out (nil: a message dropped).
func compact(out [][]byte) [][]byte {
	kept := make([][]byte, 0, len(out))
	for _, o := range out {
		if o != nil {
			kept = append(kept, o)
		}
	}
	return kept
}

// unanswered is the body for a JSON response whose every message was dropped: an error naming the
// appliance for each request of the exchange the body did not answer (a batch when several), or
// nothing when the exchange carried no request.
func unanswered(s *conn, st *xstate, msgs []*mcp.Message) []byte {
	answered := make(map[string]bool, len(msgs))
	for _, m := range msgs {
		if m.Kind == mcp.KindResponse || m.Kind == mcp.KindError {
			answered[idKey(m)] = true
		}
	}
	const why = "the server answered with a server request that policy blocks"
	st.respCode = CodeDenied
	var parts [][]byte
	for _, r := range st.reqs {
		if r.Kind != mcp.KindRequest.String() || answered[r.key] {
			continue
		}
		if r.Err == "" {
			r.Err = why
		}
		parts = append(parts, errorBody(r.rawID, CodeDenied, "response refused by "+Intermediary+": "+why, "level2", why, 0))
	}
	switch len(parts) {
	case 0:
		return []byte{}
	case 1:
		return parts[0]
	}
	return joinBatch(parts)
}

func joinBatch(parts [][]byte) []byte {
	return append(append([]byte{'['}, bytes.Join(parts, []byte{','})...), ']')
}

// encodeEvent re-frames ev with data d, keeping its type and id.
func encodeEvent(ev *exchange.Event, d []byte) []byte {
	e := *ev
	e.Data = string(d)
	return exchange.EncodeEvent(e)
}

func resultString(result json.RawMessage, key string) string {
	if v, ok := mcp.Member(result, key); ok {
		var s string
		if json.Unmarshal(v, &s) == nil {
			return s
		}
	}
	return ""
}

func oneLine(s string) string {
	s = strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f {
			return ' '
		}
		return r
	}, s)
	if len(s) > 160 {
		s = s[:160]
	}
	return s
}

// idKey correlates a response with its request: the string id "1" and the number 1 are different
// ids (keyed apart), a string id is compared unescaped, as the server decoded it, and a number by
// its value (1, 1.0 and 1e0 are one id: the peers read them so; Decode refused the others).
func idKey(m *mcp.Message) string { return jsonKey(m.ID) }

// jsonKey is the key of a JSON-RPC id or progress token v (a string or a number) as the peers
// match it: numbers by value as float64 peers read them, and a string that JavaScript reads as an
// integer is that integer — the TypeScript SDK finds the request a response answers, and the
// call a progress notification belongs to, by Number(v) ("1" answers 1 there, and so here).
func jsonKey(v []byte) string {
	if len(v) > 0 && v[0] == '"' {
		t := mcp.Unquote(v)
		if f, ok := jsNumber(t); ok && f == math.Trunc(f) && math.Abs(f) < mcp.MaxExactID {
			return "n:" + strconv.FormatInt(int64(f), 10)
		}
		return "s:" + t
	}
	if n, ok := mcp.NumericID(v); ok {
		return "n:" + strconv.FormatInt(n, 10)
	}
	return "n:" + string(v)
}
