package level2

import (
	"time"

	"mcpintercept/exchange"
	"mcpintercept/integrity"
)

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
