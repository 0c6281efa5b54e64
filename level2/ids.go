package level2

import (
	"crypto/sha256"
	"encoding/hex"
	"math"
	"net/url"
	"strconv"
	"strings"

	"mcpintercept/mcp"
)

func hashKey(v string) string {
	sum := sha256.Sum256([]byte(v))
	return hex.EncodeToString(sum[:6])
}

// legacyKey is the session key of a 2024-11-05 endpoint: the target (path and query) the client
// POSTs to, which is what ties its POSTs to the GET stream that announced it.
func legacyKey(target string) string { return hashKey("ep:" + target) }

// legacySession returns the session parameter of a 2024-11-05 POST target (sessionId, sessionid,
// session_id, in any case), for a POST whose GET stream this appliance did not see.
func legacySession(target string) string {
	i := strings.IndexByte(target, '?')
	if i < 0 {
		return ""
	}
	q, err := url.ParseQuery(target[i+1:])
	if err != nil {
		return ""
	}
	for k, v := range q {
		if (strings.EqualFold(k, "sessionid") || strings.EqualFold(k, "session_id")) && len(v) > 0 && v[0] != "" {
			return v[0]
		}
	}
	return ""
}

// idKey correlates a response with its request: the string id "1" and the number 1 are different
// ids (keyed apart), a string id is compared unescaped, as the server decoded it, and a number by
// its value (1, 1.0 and 1e0 are one id: the peers read them so; Decode refused the others).
func idKey(m *mcp.Message) string { return jsonKey(m.ID) }

// jsonKey is the key of a JSON-RPC id or progress token v (a string or a number) as the peers
// match it: numbers by value as float64 peers read them, and a string that JavaScript reads as an
// integer is that integer — the TypeScript SDK finds the request a response answers, and the
// call a progress notification belongs to, by Number(v) ("1" answers 1 there, and so here).
func jsonKey(v []byte) string {
	if len(v) > 0 && v[0] == '"' {
		t := mcp.Unquote(v)
		if f, ok := jsNumber(t); ok && f == math.Trunc(f) && math.Abs(f) < mcp.MaxExactID {
			return "n:" + strconv.FormatInt(int64(f), 10)
		}
		return "s:" + t
	}
	if n, ok := mcp.NumericID(v); ok {
		return "n:" + strconv.FormatInt(n, 10)
	}
	return "n:" + string(v)
}
