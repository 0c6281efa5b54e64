package level2

import (
	"strconv"
	"time"

	"mcpintercept/mcp"
)

// The JSON-RPC error codes Level 2 answers with, and the name error.data gives the appliance,
// are mcp's (mcp/denial.go); these names stay for Level 2's callers.
const (
	CodeDenied         = mcp.CodeDenied
	CodeRateLimited    = mcp.CodeRateLimited
	CodeTooLarge       = mcp.CodeTooLarge
	CodeUnreadable     = mcp.CodeUnreadable
	CodeTokenRefused   = mcp.CodeTokenRefused
	CodeQuarantined    = mcp.CodeQuarantined
	CodeHeaderMismatch = mcp.CodeHeaderMismatch
	Intermediary       = mcp.Intermediary
)

// denialData is error.data of every error Level 2 writes (mcp.DenialBody): who answered, and why.
type denialData = mcp.Denial

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
		b = append(b, mcp.DenialBody(m.ID, code, message, rule, reason, retry)...)
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
