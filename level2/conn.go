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
	max   int64 // the flow's MaxBody (maxBody)
}

// maxBody bounds a request body, a response body and one SSE event of f.
func maxBody(f *Flow) int64 {
	if f.MaxBody > 0 {
		return f.MaxBody
	}
	return DefaultMaxBody
}
