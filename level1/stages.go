package level1

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"time"

	"mcpintercept/exchange"
	"mcpintercept/mcp"
	"mcpintercept/policy"
)

// Limits bound one head or chunk line (exchange.Limits).
type Limits = exchange.Limits

// RuleSet is a compiled rule set (policy.Set).
type RuleSet interface {
	Evaluate(in *policy.Input) policy.Decision
}

// Flow is what Level 1's header policy gets of one flow (FlowOf builds it from stage.Conn): where its rules come from and the CEL
// variables that do not change while it lasts. Level 1 builds the rest (http, mcp) per request.
type Flow struct {
	// Rules returns the rule set to judge the next request by (a reload may swap it under an
	// open flow); nil, or a nil result, applies none: everything is allowed.
	Rules func() RuleSet
	// Client and Conn are the CEL variables `client` and `conn`.
	Client *policy.Client
	Conn   *policy.Conn
	// FailOpen skips deny and rate_limit rules that fail to evaluate (route on_rule_error: open).
	FailOpen bool
	// RuleErrors, when set, is told of every decision some rule failed to evaluate in (metrics
	// and a rate-limited log line).
	RuleErrors func(d *policy.Decision)
}

// Classifier is the Level 1 stage that classifies a request from its head (Classify; mcp.InfoOf
// reads the result) and refuses, with a plain-text 403, 421 or 400, what no policy should have to
// judge: a protocol switch the route does not allow (after a switch nothing can be judged), a
// Host other than the connection's, an MCP header it cannot read, and on strict routes requests
// whose MCP headers cannot be trusted.
type Classifier struct {
	exchange.Base
	g       Guards
	session sessionMemo // request side only
}

// NewClassifier returns a Classifier for one connection.
func NewClassifier(g Guards) *Classifier { return &Classifier{g: g} }

// RequestHead implements exchange.Stage.
func (c *Classifier) RequestHead(_ context.Context, x *exchange.Exchange) exchange.Result {
	h := x.Req
	info := classify(h, &c.session)
	mcp.SetInfo(x, info)
	if v, ok := c.g.verdict(h, info); !ok {
		return refuse(x, v)
	}
	if info.Err != nil {
		// An MCP header this proxy cannot read could carry a name policy would refuse.
		return refuse(x, exchange.Verdict{Decision: exchange.Deny, Status: http.StatusBadRequest,
			Reason: "invalid MCP header: " + info.Err.Error()})
	}
	return exchange.Continue
}

// HeaderPolicy is the Level 1 stage that judges each request by the flow's rule set, with the
// CEL variables client, conn (from the Flow), http and mcp (from the request head), and refuses
// with a plain-text 403 (deny) or 429 with Retry-After (rate_limited). It never writes a
// JSON-RPC body.
type HeaderPolicy struct {
	exchange.Base
	f *Flow
	// in is the policy input, reused request after request: request hooks run one at a time,
	// and Evaluate keeps nothing of it.
	in   policy.Input
	http policy.Request
	msg  policy.Message
}

// NewHeaderPolicy returns a HeaderPolicy for one connection; a nil f allows everything.
func NewHeaderPolicy(f *Flow) *HeaderPolicy { return &HeaderPolicy{f: f} }

// RequestHead implements exchange.Stage.
func (p *HeaderPolicy) RequestHead(_ context.Context, x *exchange.Exchange) exchange.Result {
	if x.Req.Count("Mcp-Session-Id") > 1 {
		// mcp.session is the first value, as Go servers read it; Node's joins both: a rule
		// would judge another session than the one the server resumes. (Level 2 refuses it
		// itself, with a JSON-RPC body.)
		return refuse(x, exchange.Verdict{Decision: exchange.Deny, Status: http.StatusBadRequest, Reason: "Mcp-Session-Id header repeated"})
	}
	if p.f == nil || p.f.Rules == nil {
		return exchange.Continue
	}
	rs := p.f.Rules()
	if rs == nil {
		return exchange.Continue
	}
	info := mcp.InfoOf(x)
	if info == nil {
		info = Classify(x.Req)
	}
	p.http = policy.Request{Method: info.Method, Path: info.Path, Headers: policy.HeaderMap(info.Headers)}
	p.msg = policy.Message{Version: info.ProtocolVersion, Method: info.MCPMethod, Name: info.MCPName, Session: info.SessionHash}
	p.in = policy.Input{Vars: policy.Vars{Client: p.f.Client, Conn: p.f.Conn, HTTP: &p.http, MCP: &p.msg, Auth: policy.AuthFrom(x.Get(policy.AuthKey{}))}, FailOpen: p.f.FailOpen}
	d := rs.Evaluate(&p.in)
	if len(d.Errors) > 0 && p.f.RuleErrors != nil {
		p.f.RuleErrors(&d)
	}
	v := VerdictOf(d)
	if v.Decision == exchange.Allow {
		x.Verdict = v
		return exchange.Continue
	}
	return refuse(x, v)
}

// VerdictOf maps a policy decision to Level 1's answer: allow lets the request through (its
// reason names the fields rules needed and the request lacked), deny is 403, rate_limited 429;
// anything else fails closed as a deny.
func VerdictOf(d policy.Decision) exchange.Verdict {
	v := exchange.Verdict{Decision: exchange.Decision(d.Action), Rule: d.Rule, Reason: d.Reason, RetryAfter: d.RetryAfter}
	switch d.Action {
	case policy.ActionAllow, "":
		v.Decision = exchange.Allow
		if len(d.Absent) > 0 {
			// The shadow rules' marks stay: a dry run must be visible whatever fields were absent.
			v.Reason = "fields absent: " + strings.Join(d.Absent, ", ")
			for _, h := range d.Shadow {
				v.Reason += "; " + h.String()
			}
		}
	case policy.ActionRateLimited:
		v.Status = http.StatusTooManyRequests
	default:
		v.Decision, v.Status = exchange.Deny, http.StatusForbidden
	}
	return v
}

// refuse answers the request with v's status and a plain-text body naming the intermediary
// (Level 1 never writes a JSON-RPC body); a 429 says when to retry.
func refuse(x *exchange.Exchange, v exchange.Verdict) exchange.Result {
	status := v.Status
	if status < 400 || status > 599 {
		status = http.StatusForbidden
		if v.Decision == exchange.RateLimited {
			status = http.StatusTooManyRequests
		}
	}
	v.Status = status
	headers := exchange.PlainTextHeaders
	if status == http.StatusTooManyRequests {
		secs := max(int64((v.RetryAfter+time.Second-1)/time.Second), 1)
		headers = []exchange.Header{headers[0], {Name: "Retry-After", Value: strconv.FormatInt(secs, 10)}}
	}
	x.Answer(status, headers, exchange.PlainText(v.Reason), v)
	return exchange.Stop
}

// equalFold is exchange's ASCII case-insensitive comparison (one definition for the pipeline).
func equalFold(a, b string) bool { return exchange.EqualFold(a, b) }
