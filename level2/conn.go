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
	// resp is what the response steps hand each other. A connection's response hooks run one at
	// a time (exchange's response loop, one goroutine per connection, one exchange after the
	// other), so one serves all its exchanges, and an exchange's state stays small.
	resp responseScratch
}

// responseScratch is the response steps' shared view of the body or event being judged
// (serverBody), of its message being judged (serverMessage), and what they leave for the end of
// the body (later).
type responseScratch struct {
	body  serverBody
	msg   serverMessage
	later []later
}

// maxBody bounds a request body, a response body and one SSE event of f.
func maxBody(f *Flow) int64 {
	if f.MaxBody > 0 {
		return f.MaxBody
	}
	return DefaultMaxBody
}
