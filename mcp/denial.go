package mcp

import (
	"encoding/json"
	"time"
)

// JSON-RPC error codes. The appliance's own (policy) codes lie outside the range JSON-RPC reserves
// (-32768…-32000) so that no client mistakes an intermediary's refusal for a server's protocol
// error; HeaderMismatch is the code the MCP spec itself defines for SEP-2243.
const (
	// CodeInvalidParams is JSON-RPC's invalid params (arguments that do not match the schema).
	CodeInvalidParams = -32602
	// CodeDenied: a rule denied the request (error.data names the appliance, rule and reason).
	CodeDenied = -31000
	// CodeRateLimited: a rate_limit rule's bucket was empty; error.data.retry_after_ms says when.
	CodeRateLimited = -31001
	// CodeTooLarge: the body exceeded the route's max_body.
	CodeTooLarge = -31002
	// CodeUnreadable: the body could not be inspected (an encoding the appliance cannot decode,
	// JSON a strict parser refuses: duplicate or case-variant keys, bad UTF-8, too deep).
	CodeUnreadable = -31003
	// CodeAuditUnavailable: an audited request's authorization record could not be made durable
	// and the route fails closed.
	CodeAuditUnavailable = -31004
	// CodeTokenRefused: the bearer token failed the appliance's check (audience, signature, expiry).
	CodeTokenRefused = -31005
	// CodeQuarantined: the tool's (prompt's, template's) definition is quarantined: it changed
	// since it was pinned, is not pinned on an enforce route, or servers showed clients
	// different ones (tool_pins).
	CodeQuarantined = -31006
	// CodeCredentialUnavailable: the route adds a credential (inject or token exchange) and
	// could not get one; nothing was forwarded. (-31007 is the federation's uncertain outcome.)
	CodeCredentialUnavailable = -31008
	// CodeHeaderMismatch is MCP's HeaderMismatch (SEP-2243): Mcp-Method, Mcp-Name or
	// MCP-Protocol-Version disagree with the body.
	CodeHeaderMismatch = -32020
)

// Intermediary is how error.data names the appliance.
const Intermediary = "mcpintercept"

// Denial is error.data of every error the appliance writes: who answered, and why.
type Denial struct {
	Intermediary string `json:"intermediary"`
	Rule         string `json:"rule,omitempty"`
	Reason       string `json:"reason"`
	RetryAfterMS int64  `json:"retry_after_ms,omitempty"`
}

// DenialBody is the appliance's JSON-RPC error response for id (nil: null), naming itself, the
// rule and the reason; retry > 0 adds retry_after_ms.
func DenialBody(id json.RawMessage, code int, message, rule, reason string, retry time.Duration) []byte {
	d := Denial{Intermediary: Intermediary, Rule: rule, Reason: reason}
	if retry > 0 {
		d.RetryAfterMS = retry.Milliseconds()
	}
	return EncodeError(id, code, message, d)
}
