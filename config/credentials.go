package config

import (
	"fmt"
	"net/netip"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"
)

// Credentials is a route's `credentials`: the workload holds no real credential (or a worthless
// placeholder) and the appliance adds the real one on the way out, only to the destination the
// route names. Exactly one of Inject and Exchange is set. The draft recommends token passthrough
// in Transparent mode; a route with credentials is the explicit exception, and `declare` says so.
type Credentials struct {
	// Inject adds a credential read from a file.
	Inject CredentialInject `yaml:"inject,omitempty"`
	// Exchange trades the client's own bearer token (RFC 8693) for one scoped to the server.
	Exchange CredentialExchange `yaml:"exchange,omitempty"`
	// Placeholder is the value the workload sends in the credential's header (after the scheme,
	// for Authorization) in place of the real credential: removed before anything reads it.
	Placeholder string `yaml:"placeholder,omitempty"`
	// Other is what a request carrying any other credential gets: CredentialsRefuse (401, the
	// default) or CredentialsStrip (removed, the real one added).
	Other string `yaml:"other,omitempty"`
}

// CredentialInject is `credentials.inject`.
type CredentialInject struct {
	// Header is the field the credential goes in (default Authorization; an API-key header such
	// as X-Api-Key too).
	Header string `yaml:"header,omitempty"`
	// Scheme precedes the value (default Bearer in Authorization, none in any other header).
	Scheme string `yaml:"scheme,omitempty"`
	// File holds the credential (one line, trimmed); re-read on SIGHUP; 0600 or stricter.
	File string `yaml:"file"`
}

// CredentialExchange is `credentials.exchange`: OAuth 2.0 Token Exchange (RFC 8693) at a token
// endpoint, authenticated with client credentials read from a file.
type CredentialExchange struct {
	TokenEndpoint    string `yaml:"token_endpoint"`
	ClientID         string `yaml:"client_id"`
	ClientSecretFile string `yaml:"client_secret_file"`
	// Audience is the audience asked for (default: the server's canonical URI, which is also
	// sent as the resource, RFC 8707).
	Audience string `yaml:"audience,omitempty"`
	// Scope is asked for when set.
	Scope string `yaml:"scope,omitempty"`
	// SubjectTokenType is the type of the client's token (default access_token).
	SubjectTokenType string `yaml:"subject_token_type,omitempty"`
	// RequestedTokenType is asked for when set (default: the server's choice).
	RequestedTokenType string `yaml:"requested_token_type,omitempty"`
	// Params are more form parameters, name=value (an authorization server's own, such as
	// Dex's connector_id).
	Params []string `yaml:"params,omitempty"`
	// CAFile holds the roots the token endpoint's certificate is verified against (default: the
	// system's).
	CAFile string `yaml:"ca_file,omitempty"`
	// Timeout bounds one exchange (default 10s).
	Timeout Duration `yaml:"timeout,omitempty"`
}

// Values of Credentials.Other.
const (
	CredentialsRefuse = "refuse"
	CredentialsStrip  = "strip"
)

// The RFC 8693 token type URIs a subject token can have here.
const (
	TokenTypeAccess = "urn:ietf:params:oauth:token-type:access_token"
	TokenTypeID     = "urn:ietf:params:oauth:token-type:id_token"
	TokenTypeJWT    = "urn:ietf:params:oauth:token-type:jwt"
)

// Bounds of credential files: a credential is one line.
const MaxCredentialFile = 16 << 10

// InjectOn and ExchangeOn report whether the section was given.
func (c *Credentials) InjectOn() bool   { return c.Inject != CredentialInject{} }
func (c *Credentials) ExchangeOn() bool { return !credExchangeEmpty(&c.Exchange) }

// On reports whether the route adds a credential.
func (c *Credentials) On() bool { return c.InjectOn() || c.ExchangeOn() }

// given reports whether any key of the section was.
func (c *Credentials) given() bool { return c.On() || c.Placeholder != "" || c.Other != "" }

// Action is "inject", "exchange" or "" (none).
func (c *Credentials) Action() string {
	switch {
	case c.InjectOn():
		return "inject"
	case c.ExchangeOn():
		return "exchange"
	}
	return ""
}

// HeaderName is the field the credential goes in.
func (c *Credentials) HeaderName() string {
	if c.Inject.Header != "" {
		return c.Inject.Header
	}
	return "Authorization"
}

// SchemeName is the scheme before the value ("" none).
func (c *Credentials) SchemeName() string {
	if c.ExchangeOn() {
		return "Bearer"
	}
	if c.Inject.Scheme != "" {
		return c.Inject.Scheme
	}
	if strings.EqualFold(c.HeaderName(), "Authorization") {
		return "Bearer"
	}
	return ""
}

// Source names where the credential comes from, for records and logs: the file, or the token
// endpoint; never the value.
func (c *Credentials) Source() string {
	switch {
	case c.InjectOn():
		return "file:" + c.Inject.File
	case c.ExchangeOn():
		return c.Exchange.TokenEndpoint
	}
	return ""
}

var credentialsTable = table[Route]{
	key("credentials.inject.header", "the header the injected credential goes in (e.g. Authorization, X-Api-Key)", func(r *Route) *string { return &r.Credentials.Inject.Header }, str),
	key("credentials.inject.scheme", "the scheme before the injected value (Bearer in Authorization by default)", func(r *Route) *string { return &r.Credentials.Inject.Scheme }, str),
	key("credentials.inject.file", "a file (0600) holding the credential; re-read on SIGHUP", func(r *Route) *string { return &r.Credentials.Inject.File }, str),
	key("credentials.exchange.token_endpoint", "the RFC 8693 token endpoint (https)", func(r *Route) *string { return &r.Credentials.Exchange.TokenEndpoint }, str),
	key("credentials.exchange.client_id", "the appliance's client id at the token endpoint", func(r *Route) *string { return &r.Credentials.Exchange.ClientID }, str),
	key("credentials.exchange.client_secret_file", "a file (0600) holding the client secret", func(r *Route) *string { return &r.Credentials.Exchange.ClientSecretFile }, str),
	key("credentials.exchange.audience", "the audience asked for (default: the server's canonical URI)", func(r *Route) *string { return &r.Credentials.Exchange.Audience }, str),
	key("credentials.exchange.scope", "the scope asked for", func(r *Route) *string { return &r.Credentials.Exchange.Scope }, str),
	key("credentials.exchange.subject_token_type", "the client token's type (default access_token)", func(r *Route) *string { return &r.Credentials.Exchange.SubjectTokenType }, str).
		defBy(func(r *Route) (string, bool) { return TokenTypeAccess, r.Credentials.ExchangeOn() }),
	key("credentials.exchange.requested_token_type", "the token type asked for", func(r *Route) *string { return &r.Credentials.Exchange.RequestedTokenType }, str),
	key("credentials.exchange.params", "more form parameters, name=value (e.g. Dex's connector_id=...)", func(r *Route) *[]string { return &r.Credentials.Exchange.Params }, list(parseString)),
	key("credentials.exchange.ca_file", "roots for the token endpoint's certificate (default: the system's)", func(r *Route) *string { return &r.Credentials.Exchange.CAFile }, str),
	key("credentials.exchange.timeout", "bound of one exchange", func(r *Route) *Duration { return &r.Credentials.Exchange.Timeout }, duration).
		defBy(func(r *Route) (Duration, bool) { return Duration{DefaultExchangeTimeout}, r.Credentials.ExchangeOn() }),
	key("credentials.placeholder", "the worthless value the workload sends instead of the credential", func(r *Route) *string { return &r.Credentials.Placeholder }, str),
	key("credentials.other", "what a request with any other credential gets: refuse or strip", func(r *Route) *string { return &r.Credentials.Other }, str).
		defBy(func(r *Route) (string, bool) { return CredentialsRefuse, r.Credentials.On() }),
}

func credExchangeEmpty(e *CredentialExchange) bool {
	return e.TokenEndpoint == "" && e.ClientID == "" && e.ClientSecretFile == "" && e.Audience == "" &&
		e.Scope == "" && e.SubjectTokenType == "" && e.RequestedTokenType == "" && len(e.Params) == 0 &&
		e.CAFile == "" && e.Timeout.Duration == 0
}

// DefaultExchangeTimeout bounds one token exchange.
const DefaultExchangeTimeout = 10 * time.Second

// credentialsRoute relates a route's credentials to its disposition, level and match: only on a
// route that reads HTTP (terminate or plaintext, level >= 1), whose destination the appliance
// verifies (a certificate checked against the name, or a plaintext upstream named by address),
// and never on default_route, which names no destination.
func (v *validator) credentialsRoute(key string, r Route, ok bool) {
	c := &r.Credentials
	if !c.given() {
		return
	}
	k := key + ".credentials"
	switch {
	case !c.On():
		v.check(k, "needs inject or exchange: where the real credential comes from")
		return
	case c.InjectOn() && c.ExchangeOn():
		v.check(k+".exchange", "inject and exchange are exclusive: a request gets one credential")
		return
	}
	if key == "default_route" {
		v.check(k, "default_route names no destination: a credential goes only to a destination a route names (match.destinations or match.sni)")
		return
	}
	if ok {
		switch {
		case r.TLS == TLSPassthrough:
			v.checkAlt(k, key+".tls", "needs tls: terminate or plaintext: a passthrough route cannot add a header to encrypted bytes, and never forwards a credential it did not verify the destination of")
		case r.LevelOrDefault() < 1:
			v.checkAlt(k, key+".level", "needs level 1 or 2: a level 0 route does not read requests")
		case r.TLS == TLSTerminate && !r.PlaintextUpstreamTrustedNetwork && len(r.Match.SNI) == 0:
			v.check(k, "the route must name its server in match.sni: the certificate verified is the one of the name the client sends, and an address alone can front many servers (a CDN), so a credential goes only to a server named exactly")
		case r.TLS == TLSTerminate && !r.PlaintextUpstreamTrustedNetwork && slices.ContainsFunc(r.Match.SNI, func(n string) bool { return strings.HasPrefix(n, "*.") }):
			v.checkAlt(k, key+".match.sni", "match.sni has a wildcard: a credential goes only to servers named exactly (a wildcard lets the client pick any server under it)")
		case (r.TLS == TLSPlaintext || r.PlaintextUpstreamTrustedNetwork) && len(r.Match.Destinations) == 0:
			v.check(k, "a plaintext upstream must be named by address (match.destinations): with no certificate to verify, the address is what names the server")
		case (r.TLS == TLSPlaintext || r.PlaintextUpstreamTrustedNetwork) && slices.ContainsFunc(r.Match.Destinations, func(p netip.Prefix) bool { return !p.IsSingleIP() }):
			v.checkAlt(k, key+".match.destinations", "a plaintext upstream must be named by single addresses (/32, /128): a wider prefix lets the client pick any server in it")
		case len(r.AllowUpgrade) > 0:
			v.checkAlt(k, key+".allow_upgrade", "a protocol switch ends what the appliance reads: the server could hand the added credential back to the client unseen; credentials routes allow no upgrade")
		}
	}
	if c.Other != "" {
		// Absent: refuse (the documented default).
		v.check(k+".other", checkOneOf(c.Other, CredentialsRefuse, CredentialsStrip))
	}
	if c.Placeholder != "" {
		v.check(k+".placeholder", checkCredentialValue(c.Placeholder))
	}
	if in := c.Inject; c.InjectOn() {
		if in.File == "" {
			v.check(k+".inject.file", "required: the file holding the credential (mode 0600)")
		} else {
			v.check(k+".inject.file", checkSecretFile(in.File))
		}
		if in.Header != "" && !validFieldName(in.Header) {
			v.check(k+".inject.header", fmt.Sprintf("%s is not an HTTP field name", quote(in.Header)))
		}
		if in.Header != "" && framingOrHop(in.Header) {
			v.check(k+".inject.header", fmt.Sprintf("%s frames the message or names the connection; a credential cannot go there", quote(in.Header)))
		}
		if in.Scheme != "" && !validFieldName(in.Scheme) {
			v.check(k+".inject.scheme", fmt.Sprintf("%s is not an auth scheme (a token such as Bearer)", quote(in.Scheme)))
		}
		if strings.EqualFold(in.Scheme, "DPoP") {
			v.check(k+".inject.scheme", "a DPoP-bound token cannot be injected: DPoP binds each request's method and URL to the client's key, which the appliance does not hold")
		}
	}
	if e := c.Exchange; c.ExchangeOn() {
		switch u, err := url.Parse(e.TokenEndpoint); {
		case e.TokenEndpoint == "":
			v.check(k+".exchange.token_endpoint", "required: the authorization server's token endpoint, e.g. https://auth.example.com/token")
		case err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http"):
			v.check(k+".exchange.token_endpoint", fmt.Sprintf("must be an https URL, got %s", quote(e.TokenEndpoint)))
		case u.Scheme == "http" && !r.Development:
			v.checkAlt(k+".exchange.token_endpoint", key+".development", "is http: the client's token and the client secret would cross the network in plaintext (development: true allows it in a lab)")
		case u.User != nil || u.Fragment != "" || u.RawQuery != "" || u.ForceQuery:
			v.check(k+".exchange.token_endpoint", "must not carry user info, a query or a fragment (it is shown in records and errors; put secrets in client_secret_file)")
		}
		if e.ClientID == "" {
			v.check(k+".exchange.client_id", "required: the appliance's client id at the token endpoint")
		}
		if e.ClientSecretFile == "" {
			v.check(k+".exchange.client_secret_file", "required: the file holding the client secret (mode 0600)")
		} else {
			v.check(k+".exchange.client_secret_file", checkSecretFile(e.ClientSecretFile))
		}
		if e.Audience != "" {
			v.check(k+".exchange.audience", checkAudience(e.Audience))
		}
		if e.SubjectTokenType != "" {
			// Absent: access_token (the documented default).
			v.check(k+".exchange.subject_token_type", checkOneOf(e.SubjectTokenType, TokenTypeAccess, TokenTypeID, TokenTypeJWT))
		}
		for i, p := range e.Params {
			name, _, found := strings.Cut(p, "=")
			switch {
			case !found || name == "":
				v.check(fmt.Sprintf("%s.exchange.params[%d]", k, i), fmt.Sprintf("must be name=value, got %s", quote(p)))
			case reservedExchangeParam[name]:
				v.check(fmt.Sprintf("%s.exchange.params[%d]", k, i), fmt.Sprintf("%s is set by the appliance (or by its own key)", quote(name)))
			}
		}
		if e.CAFile != "" {
			v.check(k+".exchange.ca_file", checkPath(e.CAFile))
		}
		if e.Timeout.Duration < 0 {
			v.check(k+".exchange.timeout", "must be positive")
		}
	}
}

// reservedExchangeParam are the form parameters the appliance sets itself.
var reservedExchangeParam = map[string]bool{
	"grant_type": true, "subject_token": true, "subject_token_type": true, "actor_token": true,
	"actor_token_type": true, "client_id": true, "client_secret": true, "audience": true,
	"resource": true, "scope": true, "requested_token_type": true,
}

// checkSecretFile is the rule of a file holding a secret: a regular file that exists, readable
// by its owner alone (0600 or stricter). Its content is never shown.
func checkSecretFile(path string) string {
	if msg := checkPath(path); msg != "" {
		return msg
	}
	fi, err := os.Stat(path)
	switch {
	case err != nil:
		return err.Error()
	case !fi.Mode().IsRegular():
		return fmt.Sprintf("%s is not a regular file", path)
	case fi.Mode().Perm()&0o077 != 0:
		return fmt.Sprintf("%s is mode %04o: a file holding a credential must be readable by its owner alone (chmod 600 %s)", path, fi.Mode().Perm(), path)
	case fi.Size() > MaxCredentialFile:
		return fmt.Sprintf("%s is larger than %d bytes: not one credential", path, MaxCredentialFile)
	}
	return ""
}

// checkCredentialValue refuses what cannot be a header value; the value is never shown.
func checkCredentialValue(s string) string {
	if strings.TrimSpace(s) != s || s == "" {
		return "must not be empty or start or end with white space"
	}
	for _, c := range []byte(s) {
		if c < ' ' || c == 0x7f || c == ' ' {
			return "must be one token without spaces or control characters (not shown)"
		}
	}
	return ""
}

// validFieldName is RFC 9110's token.
func validFieldName(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range []byte(s) {
		if c <= ' ' || c >= 0x7f || strings.IndexByte("\"(),/:;<=>?@[\\]{}", c) >= 0 {
			return false
		}
	}
	return true
}

func framingOrHop(name string) bool {
	switch strings.ToLower(name) {
	case "content-length", "transfer-encoding", "connection", "host", "upgrade", "te", "trailer", "keep-alive", "proxy-connection":
		return true
	}
	return false
}
