package level2

import "mcpintercept/exchange"

// The steps Level 2 runs over one client→server body, in order. Each step sees what the earlier
// ones found (requestBody) and either lets the chain go on, or ends it: with Continue (nothing
// more to judge: the body is forwarded as it came) or with Stop (the step answered the request
// or refused it). A new check on requests is one function and one line here.
var requestSteps = []requestStep{
	{"read", readRequest},               // Content-Encoding, type, charset: JSON-RPC at all?
	{"decode", decodeRequest},           // strict decode, case-variant keys
	{"correlate", correlateRequest},     // records, ids, version, client info
	{"trace", traceRequests},            // a span per request (Flow.Tracer)
	{"header-match", matchHeaders},      // SEP-2243: Mcp-* headers against the body
	{"tool-integrity", checkTools},      // tool_pins: a quarantined tool's or prompt's calls refused
	{"policy", judgeRequests},           // the rules, message by message
	{"argument-schema", checkArguments}, // validate_arguments
	{"transform", transform},            // redaction, _meta
	{"trace-inject", injectTrace},       // trace_propagation: inject (header, _meta)
	{"audit", authorize},                // durable authorization records (audit: true)
	{"session", rememberRequests},       // what other connections' responses need
}

// A requestStep is one named step of requestSteps.
type requestStep struct {
	name string
	run  func(s *conn, x *exchange.Exchange, st *xstate, b *requestBody) (res exchange.Result, done bool)
}

// The response side runs in the same order for a JSON body (ResponseBody) and for each SSE event
// (Event): read the bytes (encoding, type, framing), decode them strictly, then judge message by
// message (responses: pair with the request, policy, surface control, redaction), then write
// back what changed.

// The steps over each server→client message of a response body or an SSE event
// (judgeMessages), in order, until one ends the message's chain (returns true). A response or
// error answers a client request (answerSteps); a server→client request or notification is a
// message of its own (serverSteps).
var answerSteps = []messageStep{
	{"pair", pairResponse},                  // its request: this exchange's, or the session's pending
	{"result-members", checkResultMembers},  // case-variant members of its method's result type
	{"version", learnVersion},               // initialize: the session's protocol version
	{"policy", judgeResponse},               // the rules, as its request's method and name
	{"audit", auditAnswer},                  // the call's authorization ends
	{"elicitation", checkErrorElicitations}, // -32042: its URL elicitations judged
	{"surface", controlSurface},             // lists filtered, tool integrity, input requests
	{"redact", redactMessage},               // redact rules on the result or error
}

var serverSteps = []messageStep{
	{"record", recordServerMessage},      // its record
	{"list-changed", forgetChangedLists}, // schemas and tool integrity judge the next list afresh
	{"surface", serverRequestFacts},      // the tool a server request is for, its kind
	{"trace", startServerSpan},           // a span per server request
	{"policy", judgeServerMessage},       // the rules, then as part of its calls (inCall)
	{"audit", auditServerRequest},        // an allowed request's authorization, durable
	{"verdict", recordVerdict},           // the decision on the record
	{"trace-end", endServerSpan},         // a dropped request's span ends
	{"drop", dropBlocked},                // a blocked message dropped, the server answered
	{"redact", redactMessage},            // redact rules on its params
	{"emit", emitServerMessage},          // its record written
}

// A messageStep is one named step of answerSteps or serverSteps: done ends the message's chain.
type messageStep struct {
	name string
	run  func(s *conn, x *exchange.Exchange, st *xstate, sm *serverMessage) (done bool)
}
