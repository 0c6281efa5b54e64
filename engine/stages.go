package engine

import (
	"context"

	"mcpintercept/exchange"
	"mcpintercept/level1"
)

// The exchange stages of a connection, in the order they run (requests and responses alike),
// each under the awareness levels it serves. This list is the one place the chain is assembled:
// a new stage is its own package's constructor plus one line here (CoreDNS's plugin.cfg is the
// shape). Stages keep per-connection state: every connection gets a chain of its own.
var stageList = []stageFactory{
	// Classification from headers, with its guards (protocol switches, Host, unreadable or, on
	// strict routes, untrusted MCP headers): at every awareness level that reads HTTP.
	{name: "classify", levels: fromLevel(1), build: func(c *chainOf) exchange.Stage { return level1.NewClassifier(c.guards) }},
	// The bearer token's audience (and, with issuers, its signature and times), before any
	// policy or body stage: a refused token is never forwarded, and rules read its claims.
	{name: "token", levels: fromLevel(1), build: func(c *chainOf) exchange.Stage { return c.e.tokenStage(c) }},
	// Level 1 header policy. At Level 2 the body is the truth: rules judge the JSON-RPC
	// messages instead, and each message gets its own record.
	{name: "header-policy", levels: onlyLevel(1), build: func(c *chainOf) exchange.Stage { return level1.NewHeaderPolicy(c.e.level1Flow(c.f, c.tls)) }},
	// Level 2: the JSON-RPC messages of both directions, decoded, matched against the headers,
	// judged, checked, transformed and filtered (level2/chain.go lists its steps).
	{name: "level2", levels: fromLevel(2), build: func(c *chainOf) exchange.Stage { return c.e.level2Flow(c.f, c.route, c.tls, c.rec, c.audit).Stage() }},
	// Level 1 spans (Options.Tracer), after the policy so that a span starts only for a request
	// let through (a refused one gets its span at Done), before the audit and record stages,
	// whose records carry its ids. Level 2 makes its own, per JSON-RPC request.
	{name: "trace", levels: fromLevel(1), build: func(c *chainOf) exchange.Stage { return c.e.traceStage(c) }},
	// Level 1 audit, after the policy so that it records the decision: an allowed request's
	// record is durable before its first byte goes upstream. Level 2 writes its own records,
	// per JSON-RPC message, through the same flowAudit.
	{name: "audit", levels: onlyLevel(1), build: func(c *chainOf) exchange.Stage {
		if c.audit == nil {
			return nil
		}
		return &auditStage{fa: c.audit, ctx: c.ctx, idled: c.idled}
	}},
	// The record writer, last, so that its Done sees what every stage decided.
	{name: "record", levels: fromLevel(1), build: func(c *chainOf) exchange.Stage { return c.rec }},
}

// stageFactory is one entry of stageList.
type stageFactory struct {
	name   string
	levels func(level int) bool
	build  func(*chainOf) exchange.Stage
}

// chainOf is what a stage factory may use: the connection's flow, route and TLS disposition,
// Level 1's guards, the connection's record stage and audit writer (nil: not audited), the
// flow's context and whether the idle watch closed it.
type chainOf struct {
	e      *Engine
	f      *flow
	route  *Route
	tls    Disposition
	guards level1.Guards
	rec    *recordStage
	audit  *flowAudit
	ctx    context.Context
	idled  func() bool
}

func fromLevel(n int) func(int) bool { return func(l int) bool { return l >= n } }
func onlyLevel(n int) func(int) bool { return func(l int) bool { return l == n } }

// stagesFor builds the chain of one connection from stageList, for its route's level; a factory
// that returns nil has nothing to do on this connection.
func (e *Engine) stagesFor(c *chainOf) []exchange.Stage {
	level := c.route.Level
	if level < 1 {
		level = 1
	}
	if level >= 2 {
		c.rec.level = 2
	}
	out := make([]exchange.Stage, 0, len(stageList))
	for _, sf := range stageList {
		if !sf.levels(level) {
			continue
		}
		if s := sf.build(c); s != nil {
			out = append(out, s)
		}
	}
	return out
}
