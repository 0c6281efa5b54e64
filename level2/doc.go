// Package level2 implements awareness Level 2: JSON-RPC and SSE codec, the MCP version model, body
// policy, capability filtering and denial errors that name the intermediary.
//
// Its leaves are pure functions over bytes, with no I/O and no dependency on the engine, Level 1
// or policy, so that the exchange pipeline's body stage can call them:
//
//   - Decode / DecodeMessage: a strict JSON-RPC 2.0 decoder. Level 2 must read a body exactly as
//     the strictest peer would, because a peer that reads it differently (case-insensitive or
//     duplicate keys, go-sdk #805) is a smuggling hole; EncodeError writes the error answer.
//   - (The incremental text/event-stream parser is HTTP framing and lives in package exchange:
//     exchange.SSEParser, exchange.Event, exchange.EncodeEvent; a stage gets parsed events from
//     its Event hook after x.WantEvents.)
//   - ParseContentType / DecodeBody / EncodeBody: media types and bounded Content-Encoding
//     decoding (gzip, deflate, br), so that a compressed body is no bypass.
package level2
