// Package level2 implements awareness Level 2: body stages over the JSON-RPC messages of an MCP
// exchange — the version model, SEP-2243 header checks, body policy, argument schemas,
// redaction, surface filtering, tool integrity (pinned definitions: a quarantined tool hidden
// from lists and its calls refused, integrity.go), server→client control, _meta metadata and
// denial errors that name the intermediary.
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
