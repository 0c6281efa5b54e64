// Package auth judges the Authorization header of an MCP request before it
// is forwarded: a bearer JWT must name the server's canonical URI as its
// audience (RFC 8707, the MCP authorization spec), and, when issuers are
// configured, must be signed by one of them and be within its validity.
// The token itself never leaves this package: no error, reason or panic
// carries any part of it.
package auth

import (
	"context"
	"errors"
	"net"
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
	return "", errors.New("opaque tokens: want allow, deny or introspect")
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
	Present  bool
	Scheme   string // "bearer", "basic", ... lowercased ("" when absent)
	Verified bool   // signature checked against a configured issuer
	Claims   Claims // from a JWT (zero for opaque tokens unless introspected)
	Reason   string // on refusal; never contains the token
	Kind     string // on refusal: audience|signature|expired|issuer|opaque|malformed|oversized
}

// Claims are the token claims policy and records may use.
type Claims struct {
	Iss, Sub, Azp, ClientID, Scope string
	Aud                            []string
	Exp, Nbf, Iat                  int64
}

// Checker judges tokens for one route; safe for concurrent use.
type Checker struct {
	o Options
}

// New builds a Checker, loading JWKS files now so a bad file fails at start.
func New(o Options) (*Checker, error) {
	return &Checker{o: o}, nil
}

// CanonicalURI is the MCP server's canonical URI as the MCP authorization
// spec (RFC 8707 resource) defines it: lowercase scheme and host, port only
// when not the default, path without a trailing slash, no query or
// fragment. host is the SNI or Host the client used.
func CanonicalURI(scheme, host string, port int, path string) string {
	return ""
}

// Check judges the Authorization header values of one request (all of
// them: two is refused) against the canonical URI. No Authorization
// header: Result{Present:false}, nil.
func (c *Checker) Check(ctx context.Context, authorization []string, canonical string) (Result, error) {
	if len(authorization) == 0 {
		return Result{}, nil
	}
	return Result{Present: true, Reason: "not implemented", Kind: "malformed"}, ErrRefused
}
