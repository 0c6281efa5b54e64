package level2

import (
	"errors"

	"mcpintercept/exchange"
	"mcpintercept/mcp"
)

// decodeRequest decodes the body as the most lenient server reads it (a BOM and Unicode spaces
// around the JSON stripped; it is forwarded as the client sent it), strictly, and refuses a key
// a server reads as one a rule reads but spelt so that the rule misses it.
func decodeRequest(s *conn, x *exchange.Exchange, st *xstate, b *requestBody) (exchange.Result, bool) {
	allowBatch := batchAllowed(st.version, x.Req)
	msgs, batch, err := mcp.Decode(b.trimmed, mcp.DecodeOptions{MaxSize: int(s.max), AllowBatch: allowBatch})
	if err != nil {
		if errors.Is(err, mcp.ErrTooLarge) {
			return refuseUnreadable(s, x, st, 413, "JSON-RPC body over the route's max_body"), true
		}
		return refuseUnreadable(s, x, st, 400, "JSON-RPC body refused: "+err.Error()), true
	}
	if why, bad := clientResultCaseVariant(msgs); bad {
		return refuseUnreadable(s, x, st, 400, "JSON-RPC body refused: "+why), true
	}
	if rs := s.rules(); rs != nil {
		for _, m := range msgs {
			if why, bad := argumentCaseVariant(m, rs); bad {
				return refuseUnreadable(s, x, st, 400, "JSON-RPC body refused: "+why), true
			}
		}
	}
	b.msgs, b.batch = msgs, batch
	return exchange.Continue, false
}

// batchAllowed: JSON-RPC batches exist only in MCP 2025-03-26 (mcp.Version.BatchesAllowed). A
// request that carries MCP-Protocol-Version is at least 2025-06-18 (the header came with it) unless
// it says 2025-03-26; one without it and without a known session version comes from a 2025-03-26
// (or older) client.
func batchAllowed(version string, h *exchange.Head) bool {
	if version != "" {
		return mcp.Version(version).BatchesAllowed()
	}
	_, has := h.Get(mcp.HeaderProtocolVersion)
	return !has
}
