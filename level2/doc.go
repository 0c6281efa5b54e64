// Package level2 implements awareness Level 2: body stages over the JSON-RPC messages of an MCP
// exchange — the version model, SEP-2243 header checks, body policy, argument schemas,
// redaction, surface filtering, tool integrity (pinned definitions: a quarantined tool hidden
// from lists and its calls refused, integrity.go), server→client control, _meta metadata and
// denial errors that name the intermediary.
//
// The stage is named steps (Envoy's decoder and encoder filters): chain.go is the ordered list of
// every step of both sides — the request's head and body, the response's head, its JSON body or
// each SSE event, each server→client message (a response or error: answerSteps; a server request
// or notification: serverSteps), and the end of the exchange. A step is a func of its concern's
// file over the state it needs: the connection's (conn, conn.go: the Flow, its sessions' owner,
// audit, open spans), the exchange's (xstate, xstate.go: peer, calls, answer), and what the steps
// of one body hand each other (requestBody, serverBody, serverMessage). A new step is a func and
// a line in chain.go.
//
// It reads messages with the strict codec of package mcp (mcp.Decode, mcp.Message, the
// navigation helpers over validated JSON, mcp.EncodeError), so that Level 2 reads a body exactly
// as the strictest peer would; what any lenient peer would still act on is detected here
// (lenient.go) and judged or refused. Beside the stages:
//
//   - (The incremental text/event-stream parser is HTTP framing and lives in package exchange:
//     exchange.SSEParser, exchange.Event, exchange.EncodeEvent; a stage gets parsed events from
//     its Event hook after x.WantEvents.)
//   - ParseContentType / DecodeBody / EncodeBody: media types and bounded Content-Encoding
//     decoding (gzip, deflate, br), so that a compressed body is no bypass.
package level2
