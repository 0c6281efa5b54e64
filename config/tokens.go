package config

import (
	"fmt"
	"net/url"
	"time"

	"go.yaml.in/yaml/v3"
)

// TokensConfig is how bearer tokens are judged on routes that see HTTP: the draft requires an
// intermediary to validate a token's audience before forwarding it ("Confused Deputy"); issuers
// add signature checks, and opaque_tokens says what a token that is not a JWT gets.
type TokensConfig struct {
	// Issuers whose signatures are verified; a JWT from an issuer not listed is refused when
	// some are (none: signatures are not checked, only audience and times).
	Issuers []TokenIssuer `yaml:"issuers"`
	// ClockSkew is the leeway on exp and nbf.
	ClockSkew Duration `yaml:"clock_skew"`
	// OpaqueTokens is TokensAllow, TokensDeny or TokensIntrospect (RFC 7662).
	OpaqueTokens  string             `yaml:"opaque_tokens"`
	Introspection TokenIntrospection `yaml:"introspection"`
	// MaxHeader bounds an Authorization header (bytes); a longer one is refused unparsed.
	MaxHeader int64 `yaml:"max_header"`
	// RecordIdentity is how records carry the caller's iss and sub claims: IdentityPlain,
	// IdentityHash (SHA-256, so that records correlate a caller without naming it) or Off.
	RecordIdentity string `yaml:"record_identity"`
}

// TokenIssuer is one issuer whose keys are known: a JWKS file, or a JWKS URL fetched through the
// bypass dialer. Audiences are accepted besides the route's for tokens of this issuer.
type TokenIssuer struct {
	Issuer    string   `yaml:"issuer"`
	JWKSFile  string   `yaml:"jwks_file,omitempty"`
	JWKSURL   string   `yaml:"jwks_url,omitempty"`
	Audiences []string `yaml:"audiences,omitempty"`
}

// TokenIntrospection is the RFC 7662 endpoint of opaque_tokens: introspect. The secret is read
// from a file so that it is never in the configuration (which check prints back).
type TokenIntrospection struct {
	URL              string `yaml:"url,omitempty"`
	ClientID         string `yaml:"client_id,omitempty"`
	ClientSecretFile string `yaml:"client_secret_file,omitempty"`
}

// Values of TokensConfig.OpaqueTokens.
const (
	TokensAllow      = "allow"
	TokensDeny       = "deny"
	TokensIntrospect = "introspect"
)

// Values of TokensConfig.RecordIdentity (and Off).
const (
	IdentityPlain = "plain"
	IdentityHash  = "hash"
)

// On is Route.TokenAudience's default where the route reads HTTP; Off turns the check off.
const On = "on"

// Defaults of the tokens section.
const (
	DefaultClockSkew      = 60 * time.Second
	DefaultTokenMaxHeader = 8 << 10
)

// Bounds of max_header: below 256 bytes no signed JWT fits; above the request head bound it
// could never arrive.
const (
	minTokenMaxHeader = 256
	maxTokenMaxHeader = maxHeaderBytes
)

func checkTokenMaxHeader(n int64) string {
	if n < minTokenMaxHeader || n > maxTokenMaxHeader {
		return fmt.Sprintf("must be between %d and %d bytes, got %d", minTokenMaxHeader, maxTokenMaxHeader, n)
	}
	return ""
}

// issuerTable is the schema of one entry of tokens.issuers.
var issuerTable = table[TokenIssuer]{
	key("issuer", "the iss claim of the issuer's tokens", func(i *TokenIssuer) *string { return &i.Issuer }, str),
	key("jwks_file", "a JWKS file with the issuer's keys", func(i *TokenIssuer) *string { return &i.JWKSFile }, str).
		checked(checkOptionalPath),
	key("jwks_url", "an https URL serving the issuer's JWKS", func(i *TokenIssuer) *string { return &i.JWKSURL }, str).
		checked(checkOptionalURL),
	key("audiences", "audiences accepted for this issuer's tokens", func(i *TokenIssuer) *[]string { return &i.Audiences }, list(parseString)).
		checkedBy(unique(checkAudience, quote)),
}

var issuersBlock = block[Config]{
	path: "tokens.issuers", doc: "issuers whose token signatures are verified",
	decodeFn: func(d *decoder, c *Config, v *yaml.Node, key string) bool {
		out, ok := entries(d, v, key, "issuers", issuerTable, func(*TokenIssuer, *yaml.Node) {})
		c.Tokens.Issuers = out
		return ok
	},
	checkFn: func(v *validator, c *Config, key string) {
		for i := range c.Tokens.Issuers {
			issuerTable.check(v, &c.Tokens.Issuers[i], fmt.Sprintf("%s[%d]", key, i))
		}
	},
}

func checkOptionalPath(s string) string {
	if s == "" {
		return ""
	}
	return checkPath(s)
}

func checkOptionalURL(s string) string {
	if s == "" {
		return ""
	}
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return fmt.Sprintf("must be an http(s) URL, got %s", quote(s))
	}
	return ""
}

// checkAudience accepts an absolute URI, the form MCP's canonical server URIs take (RFC 8707).
func checkAudience(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.Scheme == "" || u.Host == "" {
		return fmt.Sprintf("must be an absolute URI such as https://mcp.example.com/mcp, got %s", quote(s))
	}
	return ""
}

// parseOnOff reads on or off; true and false are accepted too, since YAML 1.1 readers (and
// people) write them for the same thing.
func parseOnOff(n *yaml.Node) (string, string) {
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!bool" {
		if b, msg := parseBool(n); msg == "" {
			if b {
				return On, ""
			}
			return Off, ""
		}
	}
	s, msg := parseString(n)
	if msg != "" {
		return "", msg
	}
	if m := checkOneOf(s, On, Off); m != "" {
		return "", m
	}
	return s, ""
}

// seesHTTP reports whether the appliance reads the route's requests: tls terminate or plaintext
// at level 1 and up. Only there can a token be read, so only there can it be checked.
func (r Route) seesHTTP() bool {
	return r.TLS != TLSPassthrough && r.LevelOrDefault() >= 1
}

// TokenAudienceOn reports whether the route checks token audiences before forwarding.
func (r Route) TokenAudienceOn() bool {
	return r.seesHTTP() && r.TokenAudience != Off
}

// tokensRoute relates a route's token keys to its disposition and level.
func (v *validator) tokensRoute(key string, r Route, ok bool) {
	if !ok || r.seesHTTP() {
		return
	}
	why := fmt.Sprintf("needs a route that reads HTTP (tls terminate or plaintext, level 1 or 2): a %s level %d route forwards tokens it cannot read", r.TLS, r.LevelOrDefault())
	if r.TokenAudience != "" {
		v.checkAlt(key+".token_audience", key+".level", why)
	}
	if len(r.Audiences) > 0 {
		v.checkAlt(key+".audiences", key+".level", why)
	}
}

// tokens relates the keys of the tokens section.
func (v *validator) tokens(c *Config) {
	t := c.Tokens
	for i, is := range t.Issuers {
		k := fmt.Sprintf("tokens.issuers[%d]", i)
		if is.Issuer == "" {
			v.check(k+".issuer", "required: the iss claim of the issuer's tokens, e.g. https://auth.example.com")
		}
		switch {
		case is.JWKSFile == "" && is.JWKSURL == "":
			v.check(k, "needs jwks_file or jwks_url: the keys its tokens are verified with")
		case is.JWKSFile != "" && is.JWKSURL != "":
			v.check(k+".jwks_url", "jwks_file and jwks_url are exclusive")
		}
		for j := range t.Issuers[:i] {
			if t.Issuers[j].Issuer == is.Issuer && is.Issuer != "" {
				v.check(k+".issuer", fmt.Sprintf("duplicate of tokens.issuers[%d] (%s)", j, quote(is.Issuer)))
			}
		}
	}
	in := t.Introspection
	switch {
	case t.OpaqueTokens == TokensIntrospect && in.URL == "":
		v.checkAlt("tokens.introspection.url", "tokens.opaque_tokens", "required by opaque_tokens: introspect (the RFC 7662 endpoint)")
	case t.OpaqueTokens != TokensIntrospect && in != TokenIntrospection{}:
		v.checkAlt("tokens.introspection", "tokens.opaque_tokens", "only meaningful with opaque_tokens: introspect")
	}
}

// Warnings are what check reports without refusing the file: a route that reads HTTP but
// forwards tokens without checking their audience, which the draft says an intermediary MUST do.
func (c *Config) Warnings() []string {
	var out []string
	warn := func(key string, r Route) {
		if r.seesHTTP() && r.TokenAudience == Off {
			out = append(out, fmt.Sprintf("%s: token_audience: off forwards bearer tokens without checking their audience (the draft's Confused Deputy MUST)", key))
		}
		if r.Credentials.ExchangeOn() && r.TokenAudienceOn() && len(r.Audiences) == 0 {
			out = append(out, fmt.Sprintf("%s: credentials.exchange with token_audience: on checks the client's token against the server's canonical URI before exchanging it; a token meant for the exchange usually names another audience: list it in audiences", key))
		}
		if r.TraceInjectOn() && !c.Telemetry.On() {
			out = append(out, fmt.Sprintf("%s: trace_propagation: inject has no effect without telemetry.otlp.endpoint (no spans, so nothing to inject)", key))
		}
	}
	for i, r := range c.Routes {
		warn(fmt.Sprintf("routes[%d] (%s)", i, r.Name), r)
	}
	if d := c.DefaultRoute; d != nil && d.Route != nil {
		warn("default_route", *d.Route)
	}
	return append(out, c.lintWarnings()...)
}
