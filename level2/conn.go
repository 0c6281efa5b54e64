package level2

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

// rules is the rule set that judges now, or nil (allow all).
func (s *conn) rules() Evaluator {
	if s.f.Rules == nil {
		return nil
	}
	return s.f.Rules()
}
