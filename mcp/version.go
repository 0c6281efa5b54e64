package mcp

// Version is an MCP protocol version as the wire carries it (MCP-Protocol-Version, initialize's
// protocolVersion, _meta): a release date, YYYY-MM-DD. Versions compare by date. A version that is
// not in that form (a draft name, a typo) is kept as sent and ranks after every dated version:
// the peer speaks something newer than this appliance knows, and the newest rules are the ones
// that withhold the most. The zero Version means no version is known and satisfies no predicate.
type Version string

// The released versions.
const (
	V20241105 Version = "2024-11-05" // HTTP+SSE: GET /sse, an endpoint event, POSTs answered on the stream
	V20250326 Version = "2025-03-26" // Streamable HTTP; JSON-RPC batches
	V20250618 Version = "2025-06-18" // MCP-Protocol-Version header; no batches
	V20251125 Version = "2025-11-25"
	V20260728 Version = "2026-07-28" // stateless: Mcp-* headers checked by servers, _meta handshake, caching hints

	// Latest is the current released version.
	Latest = V20260728
)

// Dated reports whether v has the YYYY-MM-DD form of every MCP version (the digits are not
// checked as a calendar date: servers compare versions as text of that form).
func (v Version) Dated() bool {
	_, ok := v.date()
	return ok
}

// date returns v as the number YYYYMMDD.
func (v Version) date() (int, bool) {
	if len(v) != 10 || v[4] != '-' || v[7] != '-' {
		return 0, false
	}
	n := 0
	for i := 0; i < len(v); i++ {
		if i == 4 || i == 7 {
			continue
		}
		c := v[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	return n, true
}

// Compare returns -1, 0 or +1 as v is older than, the same as, or newer than w. The zero Version
// is older than any other; a version that is not dated is newer than any dated one, and two such
// compare as text.
func (v Version) Compare(w Version) int {
	rank := func(x Version) (int, int) {
		if x == "" {
			return 0, 0
		}
		if d, ok := x.date(); ok {
			return 1, d
		}
		return 2, 0
	}
	rv, dv := rank(v)
	rw, dw := rank(w)
	switch {
	case rv != rw:
		return cmp(rv, rw)
	case rv == 2:
		return cmp(string(v), string(w))
	}
	return cmp(dv, dw)
}

func cmp[T int | string](a, b T) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// AtLeast reports whether v is known and not older than min.
func (v Version) AtLeast(min Version) bool { return v != "" && v.Compare(min) >= 0 }

// is reports whether v is exactly the release w.
func (v Version) is(w Version) bool { return v != "" && v.Compare(w) == 0 }

// BatchesAllowed reports whether a JSON-RPC batch (a top-level array) is valid at v: only
// 2025-03-26 had them.
func (v Version) BatchesAllowed() bool { return v.is(V20250326) }

// LegacySSE reports the HTTP+SSE transport of 2024-11-05 (answers come on a GET stream, not on
// the POST that asked).
func (v Version) LegacySSE() bool { return v.is(V20241105) }

// ServerChecksHeaders reports whether servers at v refuse a request whose Mcp-* headers disagree
// with its body. Before that the headers are only the client's claim.
func (v Version) ServerChecksHeaders() bool { return v.AtLeast(V20260728) }

// CachingHints reports whether results at v may carry ttlMs and cacheScope, which a proxy that
// filters a list must then mark private.
func (v Version) CachingHints() bool { return v.AtLeast(V20260728) }

// Stateless reports whether v has no initialize handshake: each request carries its protocol
// version, client info and capabilities in _meta.
func (v Version) Stateless() bool { return v.AtLeast(V20260728) }
