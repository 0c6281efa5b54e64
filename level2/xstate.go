package level2

import (
	"time"

	"mcpintercept/exchange"
	"mcpintercept/integrity"
)

// stateKey is where the exchange keeps Level 2's per-exchange state.
type stateKey struct{}

// xstate is Level 2's view of one exchange, from request to response: small parts, each what
// some steps share. What outlives the exchange is the connection's (conn) or the session's
// (Sessions).
type xstate struct {
	start time.Time
	path  string // http.path of the request (pathOf)
	peerState
	callState
	answerState
	eventCR bool // the last SSE block ended with a CR (an LF may follow it)
	// unknownTool: the server request being judged may belong to calls of several tools (a GET
	// stream, streamTool), so mcp.tool and mcp.name are unknown to its rules.
	unknownTool bool
	body        requestBody // the request steps' shared view of the body
	vars        evalVars    // the policy input, reused message after message
}

// peerState is who one exchange is between: the client's session, version and identity, and the
// server.
type peerState struct {
	session    string // hashed session key ("" none)
	legacy     bool   // 2024-11-05 HTTP+SSE POST (answered on the GET stream)
	version    string
	acceptSSE  bool // the client accepts text/event-stream
	acceptJSON bool
	clientInfo map[string]any
	initialize bool
	server     string           // the server's identity: destination, SNI and Host
	endpoint   string           // 2024-11-05 GET stream: where its endpoint event says to POST
	tools      integrity.Server // the server as tool integrity knows it (Flow.Tools set)
}

// callState is the exchange's client→server messages as records.
type callState struct {
	reqs     []*Record          // client→server messages of this exchange, in order
	byID     map[string]*Record // requests by id
	messages int                // records emitted or owed for this exchange
}

// answerState is how the appliance answered the exchange, when it did.
type answerState struct {
	answered   bool // answered locally
	answerCode int  // the JSON-RPC code of that local answer
	respCode   int  // the code of an error that replaced the server's whole answer
}

// schemaKey is where the tool schemas of this exchange's server and session are remembered: per
// session, or per server for a stateless one.
func (st *xstate) schemaKey() string { return st.server + "|" + st.session }

// State returns Level 2's state of x, or nil when Level 2 did not see x.
func stateOf(x *exchange.Exchange) *xstate {
	s, _ := x.Get(stateKey{}).(*xstate)
	return s
}
