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
