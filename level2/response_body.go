package level2

import (
	"mcpintercept/exchange"
	"mcpintercept/mcp"
)

// The response steps of a JSON response body (ResponseBody) that are its own: the event stream
// has its own (event.go).

// readResponse decodes the body's Content-Encoding and decides whether it carries JSON-RPC at
// all. A body that is not JSON by its type or its bytes goes through as it came: no client reads
// it as JSON-RPC.
func readResponse(s *conn, x *exchange.Exchange, st *xstate, b *serverBody) (exchange.Result, bool) {
	if ce, ok := x.Resp.Get("Content-Encoding"); ok && !isIdentity(ce) {
		dec, err := DecodeBody(ce, b.data, s.max)
		if err != nil {
			return refuseResponse(s, x, st, "response body does not decode as "+oneLine(ce)+": "+decodeProblem(err)), true
		}
		b.data, b.encoded = dec, true
	}
	sn := sniff(x.Resp, b.data)
	if enc := sn.python; enc != "" {
		return refuseResponse(s, x, st, "response body in "+enc+" cannot be inspected (JSON-RPC bodies are UTF-8)"), true
	}
	if !sn.json {
		return exchange.Continue, true
	}
	b.data = sn.trimmed
	if len(b.data) == 0 {
		// An empty answer (202 to a notification or a legacy POST, however typed) carries no
		// message: it passes as it came.
		return exchange.Continue, true
	}
	return exchange.Continue, false
}

// decodeResponse decodes the body strictly. The strict decoder refused what a lenient client
// would read (a duplicate key, a lone surrogate): forwarding it would let the server past every
// response rule, so the client gets an error naming the appliance instead.
func decodeResponse(s *conn, x *exchange.Exchange, st *xstate, b *serverBody) (exchange.Result, bool) {
	msgs, batch, err := mcp.Decode(b.data, mcp.DecodeOptions{MaxSize: int(s.max), AllowBatch: true})
	if err != nil {
		return refuseResponse(s, x, st, "response refused: "+decodeProblem(err)), true
	}
	b.msgs, b.batch = msgs, batch
	return exchange.Continue, false
}

// writeResponse writes back a body whose messages changed.
func writeResponse(s *conn, x *exchange.Exchange, st *xstate, b *serverBody) (exchange.Result, bool) {
	if !b.changed {
		return exchange.Continue, false
	}
	kept := compact(b.out)
	switch {
	case len(kept) == 0:
		// Every message was a server request policy blocks (dropped, the server answered):
		// the client's requests of this exchange get an error naming the appliance instead
		// of an answer the server never gave.
		x.SetResponseBody(unanswered(s, st, b.msgs))
	case b.batch:
		x.SetResponseBody(joinBatch(kept))
	default:
		x.SetResponseBody(kept[0])
	}
	if b.encoded {
		x.DelResponseHeader("Content-Encoding")
	}
	return exchange.Continue, false
}

// compact returns the non-nil entries of out (nil: a message dropped).
func compact(out [][]byte) [][]byte {
	kept := make([][]byte, 0, len(out))
	for _, o := range out {
		if o != nil {
			kept = append(kept, o)
		}
	}
	return kept
}
