// Package level2 implements awareness Level 2: JSON-RPC and SSE codec, the MCP version model, body
// policy, capability filtering and denial errors that name the intermediary.
package level2
