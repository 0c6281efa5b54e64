package level2

import (
	"errors"

	"mcpintercept/exchange"
)

// readRequest decodes the body's Content-Encoding and decides whether it carries JSON-RPC at
// all: by its type however spelt, or by its bytes however padded. A body that is not JSON-RPC is
// plain HTTP, judged at Level 1 only: no supported server parses it as JSON.
func readRequest(s *conn, x *exchange.Exchange, st *xstate, b *requestBody) (exchange.Result, bool) {
	h := x.Req
	if ce, ok := h.Get("Content-Encoding"); ok && !isIdentity(ce) {
		dec, err := DecodeBody(ce, b.raw, s.max)
		switch {
		case errors.Is(err, ErrUnsupportedEncoding):
			return refuseUnreadable(s, x, st, 415, "content-encoding "+ce+" cannot be inspected"), true
		case errors.Is(err, ErrBodyTooLarge):
			return refuseUnreadable(s, x, st, 413, "decoded body over the route's max_body"), true
		case err != nil:
			return refuseUnreadable(s, x, st, 400, "body does not decode as "+ce+": "+err.Error()), true
		}
		b.raw = dec
	}
	sn := sniff(h, b.raw)
	if sn.repeated {
		// Servers disagree on which of two types counts (Go: the first; Node: both, joined).
		return refuseUnreadable(s, x, st, 400, "Content-Type header repeated"), true
	}
	if sn.ct.ForeignCharset {
		return refuseUnreadable(s, x, st, 415, "charset "+sn.ct.Charset+" cannot be inspected (JSON-RPC bodies are UTF-8)"), true
	}
	if enc := sn.python; enc != "" {
		// Python's json reads such bytes as UTF-16 or UTF-32 text, where Level 2 (a UTF-8
		// reader) would see no JSON at all.
		return refuseUnreadable(s, x, st, 415, "body in "+enc+" cannot be inspected (JSON-RPC bodies are UTF-8)"), true
	}
	if !sn.json {
		return exchange.Continue, true
	}
	b.trimmed = sn.trimmed
	if len(b.trimmed) == 0 {
		return exchange.Continue, true // no message in it: nothing to judge, nothing a server acts on
	}
	return exchange.Continue, false
}
