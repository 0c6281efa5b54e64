package level2

import (
	"encoding/json"
	"strconv"
	"time"

	"mcpintercept/mcp"
)

// JSON-RPC error codes Level 2 answers with. The policy codes lie outside the range JSON-RPC
// reserves (-32768…-32000) so that no client mistakes an intermediary's refusal for a server's
// protocol error; HeaderMismatch is the code the MCP spec itself defines for SEP-2243.
const (
	// CodeDenied: a rule denied the request (error.data names the appliance, rule and reason).
	CodeDenied = -31000
	// CodeRateLimited: a rate_limit rule's bucket was empty; error.data.retry_after_ms says when.
	CodeRateLimited = -31001
	// CodeTooLarge: the body exceeded the route's max_body.
	CodeTooLarge = -31002
	// CodeUnreadable: the body could not be inspected (an encoding the appliance cannot decode,
	// JSON a strict parser refuses: duplicate or case-variant keys, bad UTF-8, too deep).
	CodeUnreadable = -31003
	// CodeTokenRefused: the bearer token failed the appliance's check (audience, signature, expiry).
	CodeTokenRefused = -31005
	// CodeQuarantined: the tool's (prompt's, template's) definition is quarantined: it changed
	// since it was pinned, is not pinned on an enforce route, or servers showed clients
	// different ones (tool_pins).
	CodeQuarantined = -31006
	// CodeHeaderMismatch is MCP's HeaderMismatch (SEP-2243): Mcp-Method, Mcp-Name or
	// MCP-Protocol-Version disagree with the body.
	CodeHeaderMismatch = -32020
)

// Intermediary is how error.data names the appliance.
const Intermediary = "mcpintercept"

// denialData is error.data of every error Level 2 writes: who answered, and why.
type denialData struct {
	Intermediary string `json:"intermediary"`
	Rule         string `json:"rule,omitempty"`
	Reason       string `json:"reason"`
	RetryAfterMS int64  `json:"retry_after_ms,omitempty"`
}

// errorBody is a JSON-RPC error response for id (nil: null) naming the appliance.
func errorBody(id json.RawMessage, code int, message, rule, reason string, retry time.Duration) []byte {
	d := denialData{Intermediary: Intermediary, Rule: rule, Reason: reason}
	if retry > 0 {
		d.RetryAfterMS = retry.Milliseconds()
	}
	return mcp.EncodeError(id, code, message, d)
}

// batchErrorBody answers every request of a refused batch with the same error, in order (a
// notification gets no answer, as JSON-RPC says).
func batchErrorBody(msgs []*mcp.Message, code int, message, rule, reason string, retry time.Duration) []byte {
	b := []byte{'['}
	n := 0
	for _, m := range msgs {
		if m.Kind != mcp.KindRequest {
			continue
		}
		if n > 0 {
			b = append(b, ',')
		}
		b = append(b, errorBody(m.ID, code, message, rule, reason, retry)...)
		n++
	}
	return append(b, ']')
}

// sseEvent frames one JSON-RPC message as an SSE `message` event.
func sseEvent(data []byte) []byte {
	b := make([]byte, 0, len(data)+32)
	b = append(b, "event: message\ndata: "...)
	b = append(b, data...)
	return append(b, "\n\n"...)
}

func retryAfterHeader(retry time.Duration) string {
	secs := int64((retry + time.Second - 1) / time.Second)
	return strconv.FormatInt(max(secs, 1), 10)
}
