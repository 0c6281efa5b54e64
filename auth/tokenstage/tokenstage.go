// Package tokenstage is the token stage: every request's token carriers (Authorization, the
// target's query, cookies) judged against the server's canonical URI before any byte of it goes
// upstream. Its options are a route's Options (stage.Get(route options, Name)).
package tokenstage

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"mcpintercept/auth"
	"mcpintercept/exchange"
	"mcpintercept/mcp"
	"mcpintercept/policy"
	"mcpintercept/stage"
	"mcpintercept/telemetry"
)

// Name is the stage's name in the chain and the key of its options.
const Name = "token"

// Checker judges every token carrier of one request (Authorization, the target's query,
// cookies) against the server's canonical URI; *auth.Checker is the one the appliance builds per
// route.
type Checker interface {
	CheckRequest(ctx context.Context, cr auth.Credentials, canonical string) (auth.Result, error)
}

// Options are a route's token settings (token_audience, tokens.record_identity).
type Options struct {
	// Checker checks every request's bearer token before it is forwarded (nil: tokens pass
	// unread, token_audience: off).
	Checker Checker
	// CallerIdentity is how records carry an accepted token's iss and sub: plain (""),
	// IdentityHash or IdentityOff (tokens.record_identity).
	CallerIdentity string
}

// tokenRule is the record's rule of a request the token check refused.
const tokenRule = "token-audience"

// tokenMetrics counts refused tokens by route and by the checker's bounded kind.
type tokenMetrics struct{ refused *prometheus.CounterVec }

func newTokenMetrics(reg prometheus.Registerer) *tokenMetrics {
	m := &tokenMetrics{refused: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mcpintercept_token_refused_total", Help: "Requests refused before forwarding because of their token, by route and kind (audience, signature, expired, issuer, opaque, malformed, oversized, scheme, carrier, authority)."},
		[]string{"route", "kind"})}
	m.refused = telemetry.Registered(reg, m.refused)
	return m
}

// tokenStage checks a request's bearer token before any byte of it goes upstream: the draft's
// "intermediaries MUST validate token audiences before forwarding" (Security Considerations,
// Confused Deputy). The canonical URI is the one the client addressed, as MCP's authorization
// spec defines it (RFC 8707), so a token minted for another server is refused.
type tokenStage struct {
	exchange.Base
	check   Checker
	route   string
	scheme  string // https on terminate, http on plaintext
	port    int    // the original destination's
	sni     string // the name the TLS session was opened for; "" in plaintext
	dstHost string // the original destination's address, when the request names no host
	level   int
	metrics *tokenMetrics
	ident   string // Options.CallerIdentity
}

// Factory is the token stage of a chain, counting refusals on reg (nil: unregistered). It runs
// at every level that reads HTTP, before any policy or body stage: a refused token is never
// forwarded, and rules read its claims.
func Factory(reg prometheus.Registerer) stage.Factory {
	m := newTokenMetrics(reg)
	return stage.Factory{Name: Name, Levels: stage.FromLevel(1), New: func(c *stage.Conn) exchange.Stage {
		o, _ := stage.Get[*Options](c.Options, Name)
		if o == nil || o.Checker == nil {
			return nil
		}
		s := &tokenStage{check: o.Checker, route: c.Route, scheme: "http", port: int(c.Orig.Port()),
			dstHost: c.Orig.Addr().Unmap().String(), level: c.Level, metrics: m, ident: o.CallerIdentity}
		if c.TLS == "terminate" {
			s.scheme, s.sni = "https", c.SNI
		}
		if s.sni == "" {
			s.sni = c.Host
		}
		return s
	}}
}

// RequestHead implements exchange.Stage.
func (s *tokenStage) RequestHead(ctx context.Context, x *exchange.Exchange) exchange.Result {
	host, reason := s.host(x.Req)
	if reason != "" {
		s.metrics.refused.WithLabelValues(s.route, kindAuthority).Inc()
		return s.refuse(x, http.StatusMisdirectedRequest, reason)
	}
	cr := auth.Credentials{Authorization: headerValues(x.Req, "Authorization"), Target: x.Req.Target,
		Cookies: headerValues(x.Req, "Cookie")}
	if cr.Empty() {
		// auth.present is false, not absent: the route reads tokens and this request has none.
		x.Set(policy.AuthKey{}, noAuth)
		return exchange.Continue
	}
	res, err := s.check.CheckRequest(ctx, cr, auth.CanonicalURI(s.scheme, host, s.port, auth.TargetPath(x.Req.Target)))
	if res.Present {
		x.Set(policy.AuthKey{}, authVars(res))
	} else {
		// A cookie or a query is never the request's credential: auth.present stays false.
		x.Set(policy.AuthKey{}, noAuth)
	}
	if err == nil {
		// Only an accepted token names the caller in records: a refused one's claims may be
		// forged, and the refusal's reason already says why.
		if c := callerOf(res.Claims, s.ident); c != (policy.Caller{}) {
			x.Set(policy.CallerKey{}, c)
		}
		return exchange.Continue
	}
	kind := res.Kind
	if kind == "" {
		kind = "error"
	}
	s.metrics.refused.WithLabelValues(s.route, kind).Inc()
	if !errors.Is(err, auth.ErrRefused) {
		// The check itself failed (an introspection endpoint down): not the token's fault, and
		// not forwarded unchecked either.
		return s.refuse(x, http.StatusServiceUnavailable, "token check failed: "+err.Error())
	}
	if res.Reason != "" {
		reason = res.Reason
	} else {
		reason = "token refused"
	}
	return s.refuse(x, http.StatusUnauthorized, reason)
}

// kindAuthority is the refusal kind of a request whose absolute-form target names another server
// than its Host.
const kindAuthority = "authority"

// host is the name the request goes to, for its canonical URI: the TLS server name, else Host,
// else an absolute-form target's host, else the original destination's address. A non-empty
// reason refuses the request.
//
// An absolute-form target (POST http://victim.test/mcp with Host: mcp.test) is where RFC 9112
// §3.2.2 sends the request: a server that receives one MUST use its authority and ignore Host, and
// Go's net/http does (r.Host is the target's); but Node's req.headers.host and frameworks that
// build URLs from Host read Host. Judging either one leaves the other open, so a target whose
// scheme or authority (host and port) is not Host's is refused instead: then both name the server
// the token is judged for. So is a target with user info or a backslash, whose server parsers
// read differently (WHATWG URL ends the authority at "\\", others at the last "@"). It costs no
// honest client anything: RFC 9112 §3.2 has a client send a Host identical to the target's
// authority, and RFC 9110 §4.2.4 forbids user info in an http(s) URI it sends. On a terminated flow the
// SNI names the server; Level 1's guard already ties Host and the target's host to it, and the
// target must agree with Host here too.
func (s *tokenStage) host(req *exchange.Head) (string, string) {
	h, hasHost := req.Get("Host")
	if scheme, authority, ok := auth.TargetAuthority(req.Target); ok {
		switch why := auth.AmbiguousTarget(req.Target); {
		case why != "":
			// user info or a backslash: parsers disagree on the server it names (WHATWG URL reads
			// victim.test from http://victim.test\@mcp.test/mcp), so no one reading can be judged
			return "", "absolute-form target " + why + ": parsers disagree on the server it names"
		case scheme != s.scheme:
			return "", "absolute-form target scheme " + quoteHost(scheme) + " is not this route's (" + s.scheme + "): the request could go to another server than the token is judged for"
		case hasHost && !auth.SameAuthority(s.scheme, authority, h):
			return "", "absolute-form target authority " + quoteHost(authority) + " is not Host " + quoteHost(h) + ": the request could go to another server than the token is judged for"
		case !hasHost:
			h, hasHost = authority, true
		}
	}
	if s.sni != "" {
		return s.sni, ""
	}
	if hasHost && h != "" {
		if name, _, found := strings.Cut(h, ":"); found && !strings.HasPrefix(h, "[") {
			return name, ""
		}
		return strings.TrimSuffix(strings.TrimPrefix(strings.SplitN(h, "]", 2)[0], "["), "]"), ""
	}
	return s.dstHost, ""
}

// quoteHost bounds a client-chosen authority for a refusal's reason.
func quoteHost(s string) string {
	const max = 100
	if len(s) > max {
		s = s[:max] + "…"
	}
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || r == '"' || r == '\\' {
			return '?'
		}
		return r
	}, s)
}

// refuse answers before anything is forwarded: 401 with the RFC 6750 challenge (a client reads
// error_description), and at Level 2 a JSON-RPC error naming the appliance, as its denials are.
// Level 1 writes no JSON-RPC body. The JSON-RPC id is null: the token is judged from the head,
// before any byte of the body is read (a refused request's body is never read, held or judged by
// a later stage), and JSON-RPC 2.0 answers null when the id was not determined. Deferring the
// answer to read the id would run every later stage's RequestHead (rules, rate limits) on a
// request already refused; clients act on the status (401, 421, 503), never 200 here.
func (s *tokenStage) refuse(x *exchange.Exchange, status int, reason string) exchange.Result {
	var headers []exchange.Header
	if status != http.StatusMisdirectedRequest {
		// 421 (another authority) is not the token's fault: no challenge.
		headers = append(headers, exchange.Header{Name: "WWW-Authenticate", Value: `Bearer error="invalid_token", error_description="` + quoteParam(reason) + `"`})
	}
	var body []byte
	if s.level >= 2 {
		headers = append(headers, exchange.Header{Name: "Content-Type", Value: "application/json"})
		body = mcp.DenialBody(nil, mcp.CodeTokenRefused, "token refused", tokenRule, reason, 0)
	}
	x.Answer(status, headers, body, exchange.Verdict{Decision: exchange.Deny, Status: status, Rule: tokenRule, Reason: reason})
	return exchange.Stop
}

// quoteParam keeps a reason inside an auth-param's quoted-string: no quote, backslash or control
// character can end it early or split the header.
func quoteParam(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r == '"' || r == '\\':
			return '\''
		case r < 0x20 || r == 0x7f:
			return ' '
		}
		return r
	}, s)
}

// noAuth is the auth variable of a request without credentials; policy only reads it.
var noAuth = &policy.Auth{}

// authVars is policy's `auth` variable for a checked request: never the token.
func authVars(r auth.Result) *policy.Auth {
	c := r.Claims
	return &policy.Auth{Present: r.Present, Scheme: r.Scheme, Verified: r.Verified,
		Claims: policy.Claims{Iss: c.Iss, Sub: c.Sub, Azp: c.Azp, ClientID: c.ClientID, Scope: c.Scope, Aud: c.Aud}}
}

// Values of Options.CallerIdentity (tokens.record_identity); anything else is plain.
const (
	IdentityHash = "hash"
	IdentityOff  = "off"
)

// callerOf is the identity records carry for claims c under tokens.record_identity mode: iss and
// sub as they are, hashed, or nothing. A hashed sub is of iss and sub together, so that one
// subject name at two issuers stays two callers.
func callerOf(c auth.Claims, mode string) policy.Caller {
	switch mode {
	case IdentityOff:
		return policy.Caller{}
	case IdentityHash:
		out := policy.Caller{}
		if c.Iss != "" {
			out.Iss = identityHash(c.Iss)
		}
		if c.Sub != "" {
			out.Sub = identityHash(c.Iss + "\x00" + c.Sub)
		}
		return out
	}
	return policy.Caller{Iss: c.Iss, Sub: c.Sub}
}

// identityHash is "sha256:" and the first 128 bits of s's SHA-256, in hex: enough to tell
// callers apart in records. It hides a name from a reader of the log, not from one who can guess
// it (a short subject can be found by trying names); record_identity: off leaves both out.
func identityHash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return "sha256:" + hex.EncodeToString(sum[:16])
}

// headerValues is every value of the named header, in order.
func headerValues(h *exchange.Head, name string) []string {
	var out []string
	for _, hd := range h.Headers {
		if strings.EqualFold(hd.Name, name) {
			out = append(out, hd.Value)
		}
	}
	return out
}

// CallerOf is the identity records carry for an accepted token's claims under
// tokens.record_identity mode (plain, hash or off), for checks outside the chain (the
// federation endpoint).
func CallerOf(c auth.Claims, mode string) policy.Caller { return callerOf(c, mode) }

// AuthVars is policy's `auth` variable for a checked request (never the token).
func AuthVars(r auth.Result) *policy.Auth { return authVars(r) }
