// Package auth judges the Authorization header of an MCP request before it
// is forwarded: a bearer JWT must name the server's canonical URI as its
// audience (RFC 8707, the MCP authorization spec), and, when issuers are
// configured, must be signed by one of them and be within its validity.
// The token itself never leaves this package: no error, reason or panic
// carries any part of it.
package auth

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"
)

// ErrRefused marks a token the caller must answer with 401
// WWW-Authenticate: Bearer error="invalid_token".
var ErrRefused = errors.New("token refused")

// OpaqueMode says what happens to a bearer token that is not a JWT.
type OpaqueMode string

const (
	OpaqueAllow      OpaqueMode = "allow"
	OpaqueDeny       OpaqueMode = "deny"
	OpaqueIntrospect OpaqueMode = "introspect"
)

// ParseOpaqueMode reads a configured mode; "" is OpaqueAllow.
func ParseOpaqueMode(s string) (OpaqueMode, error) {
	switch m := OpaqueMode(s); m {
	case "":
		return OpaqueAllow, nil
	case OpaqueAllow, OpaqueDeny, OpaqueIntrospect:
		return m, nil
	}
	return "", fmt.Errorf("opaque tokens %q: want allow, deny or introspect", s)
}

// Options configures one Checker (one route).
type Options struct {
	Audiences  []string       // accepted audiences besides the canonical URI
	Issuers    []Issuer       // signature verification per issuer (none: signatures not checked)
	ClockSkew  time.Duration  // for exp/nbf (default 60s)
	Opaque     OpaqueMode     // OpaqueAllow (default) | OpaqueDeny | OpaqueIntrospect
	Introspect *Introspection // RFC 7662 endpoint when Opaque == OpaqueIntrospect
	MaxHeader  int            // bytes of Authorization accepted (default 8 KiB); longer: refused unparsed
	// Dial reaches JWKS URLs and the introspection endpoint (the bypass
	// dialer, so the appliance does not intercept its own fetches).
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// JWKSLog receives why an issuer's keys could not be read when a token needed them
	// (nil: not logged); share one across Checkers so each issuer is logged once an interval.
	JWKSLog *JWKSLog
}

// Issuer is a trusted token issuer and where its keys are.
type Issuer struct {
	Issuer            string
	JWKSFile, JWKSURL string
	Audiences         []string // accepted audiences for this issuer's tokens
}

// Introspection is an RFC 7662 endpoint with the appliance's client credentials.
type Introspection struct{ URL, ClientID, ClientSecret string }

// Result is the judgement of one request's Authorization header.
type Result struct {
	Present bool
	Scheme  string // "bearer", "dpop", "basic", ... lowercased, "other" when unknown ("" when absent)
	// Verified: the signature was checked against a configured issuer, or
	// the introspection endpoint vouched for the token.
	Verified bool
	Claims   Claims // from a JWT or introspection; zero on refusal
	// Reason says why the token was refused, or why it could not be
	// checked (Kind empty, error not ErrRefused); never contains the token.
	Reason string
	Kind   string // on refusal: audience|signature|expired|issuer|opaque|malformed|oversized|scheme|carrier
}

// Claims are the token claims policy and records may use.
type Claims struct {
	Iss, Sub, Azp, ClientID, Scope string
	Aud                            []string
	Exp, Nbf, Iat                  int64
}

// Refusal kinds: a bounded set, fit for a metric label.
const (
	KindAudience  = "audience"
	KindSignature = "signature"
	KindExpired   = "expired"
	KindIssuer    = "issuer"
	KindOpaque    = "opaque"
	KindMalformed = "malformed"
	KindOversized = "oversized"
	// KindScheme: an Authorization scheme the appliance does not judge (not
	// Bearer or DPoP), on a route that checks tokens.
	KindScheme = "scheme"
	// KindCarrier: a token where MCP clients never put one (the URI query).
	KindCarrier = "carrier"
)

const (
	defaultSkew      = 60 * time.Second
	defaultMaxHeader = 8 << 10
	fetchTimeout     = 5 * time.Second
	maxFetchBytes    = 1 << 20
	refreshInterval  = time.Minute
)

// Checker judges tokens for one route; safe for concurrent use.
type Checker struct {
	audiences []string // canonical forms
	issuers   map[string]*issuer
	skew      time.Duration
	opaque    OpaqueMode
	intro     *introspector
	maxHeader int
	now       func() time.Time
	parsed    parsedCache
}

// New builds a Checker, reading JWKS files now so a bad file fails at start.
// JWKS URLs are fetched on the first token of their issuer.
func New(o Options) (*Checker, error) {
	return newChecker(o, nil)
}

// newChecker is New with the roots HTTPS fetches verify against (nil: the
// system roots).
func newChecker(o Options, roots *x509.CertPool) (*Checker, error) {
	c := &Checker{skew: o.ClockSkew, maxHeader: o.MaxHeader, now: time.Now}
	if err := c.setLimits(o); err != nil {
		return nil, err
	}
	c.audiences = canonicalAll(o.Audiences)
	client := newHTTPClient(o.Dial, roots)
	issuers, err := newIssuers(o.Issuers, client, c.clock, o.JWKSLog)
	if err != nil {
		return nil, err
	}
	c.issuers = issuers
	if c.opaque == OpaqueIntrospect {
		if c.intro, err = newIntrospector(o.Introspect, client, c.clock); err != nil {
			return nil, err
		}
	}
	return c, nil
}

func (c *Checker) setLimits(o Options) error {
	if c.skew < 0 {
		return fmt.Errorf("clock skew %v: must not be negative", c.skew)
	}
	if c.skew == 0 {
		c.skew = defaultSkew
	}
	if c.maxHeader < 0 {
		return fmt.Errorf("max header %d: must not be negative", c.maxHeader)
	}
	if c.maxHeader == 0 {
		c.maxHeader = defaultMaxHeader
	}
	mode, err := ParseOpaqueMode(string(o.Opaque))
	if err != nil {
		return err
	}
	c.opaque = mode
	return nil
}

// clock lets tests move time without sleeping.
func (c *Checker) clock() time.Time { return c.now() }

func newHTTPClient(dial func(context.Context, string, string) (net.Conn, error), roots *x509.CertPool) *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.Proxy = nil // the bypass dialer is the only way out
	if dial != nil {
		t.DialContext = dial
	}
	if roots != nil {
		t.TLSClientConfig.RootCAs = roots
	}
	return &http.Client{
		Transport: t,
		Timeout:   fetchTimeout,
		// A redirect could leave the configured host; refuse to follow.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// Check judges the Authorization header values of one request (all of
// them: two is refused) against the canonical URI. No Authorization
// header: Result{Present:false}, nil.
func (c *Checker) Check(ctx context.Context, authorization []string, canonical string) (Result, error) {
	if len(authorization) == 0 {
		return Result{}, nil
	}
	if len(authorization) > 1 {
		return refuse(Result{Present: true}, KindMalformed, "%d authorization headers", len(authorization))
	}
	h := authorization[0]
	if len(h) > c.maxHeader {
		return refuse(Result{Present: true}, KindOversized, "authorization header over %d bytes", c.maxHeader)
	}
	scheme, cred, err := splitHeader(h)
	r := Result{Present: true, Scheme: scheme}
	if err != nil {
		return refuse(r, KindMalformed, "%v", err)
	}
	if !judgedSchemes[scheme] {
		// A scheme whose credentials are not judged is not forwarded unjudged either: a
		// server may read a token from it all the same (a bare JWT, "Token x"). The name
		// said is a known scheme's or "other", never the client's bytes.
		return refuse(r, KindScheme, "authorization scheme %s is not checked: only Bearer and DPoP tokens pass a route that checks tokens", scheme)
	}
	// A DPoP-bound token (RFC 9449) is an access token like a bearer one: its audience is
	// judged the same way. Its proof (the DPoP header) is the server's to check.
	return c.checkBearer(ctx, r, cred, canonicalize(canonical))
}

func (c *Checker) checkBearer(ctx context.Context, r Result, token, canonical string) (Result, error) {
	if !looksLikeJWS(token) {
		return c.checkOpaque(ctx, r, token, canonical)
	}
	key := sha256.Sum256([]byte(token))
	now := c.clock()
	if e, ok := c.parsed.get(key, now); ok {
		if e.verified {
			if ref := c.checkTimes(e.claims); ref != nil {
				return ref.result(r)
			}
		}
		return c.accept(r, e.claims, e.verified, canonical)
	}
	cl, verified, ref := c.parseJWT(token)
	if ref != nil {
		return ref.result(r)
	}
	c.parsed.put(key, parsedEntry{claims: cl, verified: verified}, now)
	return c.accept(r, cl, verified, canonical)
}

// accept checks the audience of claims already trusted as far as they can
// be, and fills the Result.
func (c *Checker) accept(r Result, cl tokenClaims, verified bool, canonical string) (Result, error) {
	var extra []string
	if iss, ok := c.issuers[cl.Iss]; ok && verified {
		extra = iss.audiences
	}
	if ref := checkAudience(cl.audiences(), canonical, c.audiences, extra); ref != nil {
		return ref.result(r)
	}
	r.Verified = verified
	r.Claims = cl.public()
	return r, nil
}

// refusal is a judgement before it becomes a Result. With err set it is
// not a judgement of the token: the check could not be made (keys or the
// introspection endpoint unreachable), and the caller is told so with an
// error that is not ErrRefused, so that a good token is not called invalid.
type refusal struct {
	kind, reason string
	err          error
}

func refused(kind, format string, a ...any) *refusal {
	return &refusal{kind: kind, reason: fmt.Sprintf(format, a...)}
}

func unavailable(reason string, err error) *refusal {
	return &refusal{reason: reason, err: err}
}

func (ref *refusal) result(r Result) (Result, error) {
	if ref.err == nil {
		return refuse(r, ref.kind, "%s", ref.reason)
	}
	r.Reason = ref.reason
	return r, fmt.Errorf("%s: %w", ref.reason, ref.err)
}

func refuse(r Result, kind, format string, a ...any) (Result, error) {
	r.Kind = kind
	r.Reason = fmt.Sprintf(format, a...)
	r.Claims = Claims{}
	r.Verified = false
	return r, fmt.Errorf("%w: %s", ErrRefused, r.Reason)
}
