package level2

import "mcpintercept/exchange"

// The steps over a request's head (RequestHead), and over a response's head (ResponseHead),
// in order; a step ends the chain as a request step does.
var requestHeadSteps = []headStep{
	{"session", openSession},  // Mcp-Session-Id or the 2024-11-05 endpoint; the version
	{"peer", notePeer},        // what the client accepts; the server it asks
	{"body", wantRequestBody}, // identity encoding asked of the server; the body read
}

var responseHeadSteps = []headStep{
	{"session", responseSession}, // Mcp-Session-Id repeated refused; initialize's session
	{"body", wantResponse},       // how the body is read: events, JSON, or not at all
}

// A headStep is one named step of requestHeadSteps or responseHeadSteps.
type headStep struct {
	name string
	run  func(s *conn, x *exchange.Exchange, st *xstate) (res exchange.Result, done bool)
}

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

// The steps over one server→client body: a JSON response body (responseSteps) or one SSE event
// of a response stream (eventSteps). Each reads the bytes its own way, then the messages are
// judged one by one (judgeBody: answerSteps or serverSteps below), then what changed is written
// back. A step ends the chain as a request step does.
var responseSteps = []bodyStep{
	{"read", readResponse},     // Content-Encoding, charset, type: JSON-RPC at all?
	{"decode", decodeResponse}, // strict decode; refused: the client gets the appliance's error
	{"judge", judgeBody},       // each message's steps
	{"write", writeResponse},   // the changed body
}

var eventSteps = []bodyStep{
	{"framing", checkFraming},  // bare CR line ends refused; events without data pass
	{"endpoint", openEndpoint}, // 2024-11-05: the endpoint event opens the session
	{"decode", decodeEvent},    // strict decode; refused: the event dropped
	{"judge", judgeBody},       // each message's steps
	{"write", writeEvent},      // the changed event, or none
}

// A bodyStep is one named step of responseSteps or eventSteps.
type bodyStep struct {
	name string
	run  func(s *conn, x *exchange.Exchange, st *xstate, b *serverBody) (res exchange.Result, done bool)
}

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

// The steps once the exchange is over (Done), in order.
var doneSteps = []doneStep{
	{"audit", auditUnended},    // calls the exchange failed after dispatch: outcome uncertain
	{"trace", endRequestSpans}, // the spans of requests answered here, or not at all
	{"records", writeRecords},  // the client→server messages' records, with the outcome
}

// A doneStep is one named step of doneSteps.
type doneStep struct {
	name string
	run  func(s *conn, x *exchange.Exchange, st *xstate)
}
