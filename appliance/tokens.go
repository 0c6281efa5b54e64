package appliance

import (
	"fmt"
	"os"
	"strings"

	"mcpintercept/auth"
	"mcpintercept/auth/tokenstage"
	"mcpintercept/config"
	"mcpintercept/intercept/upstream"
)

// tokenChecker builds the route's token check from the tokens section: nil when the route reads
// no HTTP or has token_audience: off. JWKS URLs and the introspection endpoint are reached through
// the bypass dialer, so the appliance never intercepts its own fetches.
func tokenChecker(cfg *config.Config, r config.Route, jwksLog *auth.JWKSLog) (tokenstage.Checker, error) {
	if !r.TokenAudienceOn() {
		return nil, nil
	}
	t := cfg.Tokens
	opaque, err := auth.ParseOpaqueMode(t.OpaqueTokens)
	if err != nil {
		return nil, fmt.Errorf("route %s: %w", r.Name, err)
	}
	o := auth.Options{
		Audiences: r.Audiences,
		ClockSkew: t.ClockSkew.Duration,
		Opaque:    opaque,
		MaxHeader: int(t.MaxHeader),
		Dial:      upstream.BypassDialer(cfg.Steering.BypassMark, cfg.Limits.ConnectTimeout.Duration).DialContext,
		JWKSLog:   jwksLog,
	}
	for _, is := range t.Issuers {
		o.Issuers = append(o.Issuers, auth.Issuer{Issuer: is.Issuer, JWKSFile: is.JWKSFile, JWKSURL: is.JWKSURL, Audiences: is.Audiences})
	}
	if opaque == auth.OpaqueIntrospect {
		in, err := introspection(t.Introspection)
		if err != nil {
			return nil, fmt.Errorf("route %s: %w", r.Name, err)
		}
		o.Introspect = in
	}
	c, err := auth.New(o)
	if err != nil {
		return nil, fmt.Errorf("route %s: token check: %w", r.Name, err)
	}
	return c, nil
}

// introspection reads the client secret from its file: the configuration holds only the path.
func introspection(in config.TokenIntrospection) (*auth.Introspection, error) {
	out := &auth.Introspection{URL: in.URL, ClientID: in.ClientID}
	if in.ClientSecretFile != "" {
		b, err := os.ReadFile(in.ClientSecretFile)
		if err != nil {
			return nil, fmt.Errorf("introspection client secret: %w", err)
		}
		out.ClientSecret = strings.TrimSpace(string(b))
	}
	return out, nil
}
