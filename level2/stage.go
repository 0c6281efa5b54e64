package level2

import (
	"context"
	"encoding/json"
	"time"

	"mcpintercept/audit"
	"mcpintercept/exchange"
	"mcpintercept/integrity"
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

// Flow is what Level 2 gets of one connection (FlowOf builds it from the chain's stage.Conn).
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
	// address and port), filled once per connection (tracestage.Base).
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
	// Credential is what a credentials route adds to the request upstream (a client→server
	// message's record only).
	Credential policy.Credential
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

// Stage returns the Level 2 stage for f: it reads every JSON-RPC message in both directions,
// decides on requests with f's rules, refuses header/body mismatches (SEP-2243), and records every
// message. It never answers on the server's behalf with a result: a refusal is a JSON-RPC error
// whose data names the appliance.
func (f *Flow) Stage() exchange.Stage {
	owner := NewOwner("")
	if f.Client != nil {
		owner = NewOwner(f.Client.Address)
	}
	return &stage{c: &conn{f: f, posts: make(chan struct{}, maxServerAnswers), owner: owner, max: maxBody(f)}}
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
