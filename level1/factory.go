package level1

import (
	"mcpintercept/exchange"
	"mcpintercept/policy"
	"mcpintercept/stage"
)

// Names of Level 1's stages in the chain; ClassifyName is also the key of its options.
const (
	ClassifyName     = "classify"
	HeaderPolicyName = "header-policy"
)

// ClassifyStage is the classifier of a chain: every request's headers classified, with its guards
// (protocol switches, Host, unreadable or, on strict routes, untrusted MCP headers), at every
// level that reads HTTP.
func ClassifyStage() stage.Factory {
	return stage.Factory{Name: ClassifyName, Levels: stage.FromLevel(1), New: func(c *stage.Conn) exchange.Stage {
		return NewClassifier(GuardsOf(c))
	}}
}

// GuardsOf is the classifier's guards on c: the route's options, and the host its requests must
// name. With DNS steering the client reached the flow by a name, and a request must not name
// another host (421), in plaintext as in TLS; on a terminated flow the route was chosen by the
// SNI (or, without one, by the destination), and a request must not name another host inside
// that TLS session.
func GuardsOf(c *stage.Conn) Guards {
	var g Guards
	if o, _ := stage.Get[*RouteOptions](c.Options, ClassifyName); o != nil {
		g.RouteOptions = *o
	}
	if c.Host != "" {
		g.ExpectedHost = c.Host
	} else if c.TLS == "terminate" {
		g.ExpectedHost = c.SNI
		if g.ExpectedHost == "" {
			g.ExpectedHost = c.Orig.Addr().Unmap().String()
		}
	}
	return g
}

// HeaderPolicyStage is Level 1's header policy in a chain, at Level 1 only: at Level 2 the body is
// the truth, and rules judge the JSON-RPC messages instead.
func HeaderPolicyStage() stage.Factory {
	return stage.Factory{Name: HeaderPolicyName, Levels: stage.OnlyLevel(1), New: func(c *stage.Conn) exchange.Stage {
		return NewHeaderPolicy(FlowOf(c))
	}}
}

// FlowOf is what the header policy needs of c: its rule set as current at each request, and the
// CEL variables client and conn; nil when the route names no rule set.
func FlowOf(c *stage.Conn) *Flow {
	if c.Rules == nil {
		return nil
	}
	return &Flow{
		Rules: func() RuleSet {
			if rs := c.Rules(); rs != nil {
				return rs
			}
			return nil
		},
		Client:     c.ClientVars,
		Conn:       c.ConnVars,
		FailOpen:   c.FailOpen,
		RuleErrors: func(d *policy.Decision) { c.RuleErrors(d) },
	}
}
