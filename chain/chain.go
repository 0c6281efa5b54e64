// Package chain is the one ordered list of the stages every HTTP-aware connection runs through
// (CoreDNS's plugin.cfg is the shape): requests and responses alike pass them in this order,
// each under the awareness levels it serves. A new stage is its own package's constructor and
// options type, plus one line here; the route carries the stage's options (stage.Options, filled
// by the appliance from the configuration). The engine runs the list it is given
// (engine.Options.Stages) and adds its record writer last.
package chain

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"mcpintercept/audit/auditstage"
	"mcpintercept/auth/tokenstage"
	"mcpintercept/credentials"
	"mcpintercept/integrity"
	"mcpintercept/level1"
	"mcpintercept/level2"
	"mcpintercept/stage"
	"mcpintercept/tracing"
	"mcpintercept/tracing/tracestage"
)

// Deps is what the stages share across the connections of one appliance.
type Deps struct {
	// Registry is where the stages' own series register (nil: unregistered).
	Registry prometheus.Registerer
	// Sessions is Level 2's memory of MCP sessions across connections (nil: a new one).
	Sessions *level2.Sessions
	// Tools is the tool-integrity guard; routes with tool_pins use it (nil: none checks).
	Tools *integrity.Guard
	// Tracer makes the spans of every flow (nil: tracing off).
	Tracer *tracing.Tracer
}

// Stages is the chain, in order.
func Stages(d Deps) []stage.Factory {
	aud := auditstage.New(d.Registry)
	cred := credentials.New(d.Registry)
	return []stage.Factory{
		// Classification from headers, with its guards: at every level that reads HTTP.
		level1.ClassifyStage(),
		// A credentials route's placeholder removed, and any other credential refused or
		// stripped, before anything reads the request's credential (the token check, rules,
		// records): they see what the client itself holds.
		cred.Factory(),
		// The bearer token's audience (and, with issuers, its signature and times), before any
		// policy or body stage: a refused token is never forwarded, and rules read its claims.
		tokenstage.Factory(d.Registry),
		// Level 1 header policy; at Level 2 rules judge the JSON-RPC messages instead.
		level1.HeaderPolicyStage(),
		// Level 2: the JSON-RPC messages of both directions (level2/chain.go lists its steps),
		// each judged and recorded; its audit records go through the flow's audit writer.
		level2.Factory(level2.Deps{Sessions: d.Sessions, Tools: d.Tools, Tracer: d.Tracer,
			Audit: func(c *stage.Conn) level2.Auditor {
				if w := aud.Writer(c); w != nil {
					return w
				}
				return nil
			}}),
		// Level 1 spans, after the policy (a refused request gets its span at Done), before the
		// audit and record stages, whose records carry its ids.
		tracestage.Factory(d.Tracer),
		// Level 1 audit, after the policy so that it records the decision.
		aud.Factory(),
		// The route's real credential added last, once every stage judged the request: nothing
		// is exchanged for a refused request, and no stage or record sees the value.
		cred.OutFactory(),
	}
}

// ConnSpan is the span of a flow that carried no HTTP the appliance read (nil: tracing off).
func ConnSpan(d Deps) func(c *stage.Conn, start time.Time, decision, rule, reason string) (traceID, spanID string) {
	return tracestage.ConnSpan(d.Tracer)
}
