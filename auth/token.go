package auth

import (
	"strings"
	"time"
	"unicode"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/json"
	"github.com/go-jose/go-jose/v4/jwt"
)

// anyAlg is every signature algorithm go-jose knows ("none" is not one):
// without issuers the signature is not checked, so a token's algorithm
// does not matter for reading its audience.
var anyAlg = []jose.SignatureAlgorithm{
	jose.RS256, jose.RS384, jose.RS512, jose.PS256, jose.PS384, jose.PS512,
	jose.ES256, jose.ES384, jose.ES512, jose.EdDSA, jose.HS256, jose.HS384, jose.HS512,
}

// verifiedAlg are the algorithms a configured issuer may sign with. No HMAC:
// a public key must never serve as a shared secret.
var verifiedAlg = map[jose.SignatureAlgorithm]bool{jose.RS256: true, jose.ES256: true, jose.EdDSA: true}

// tokenClaims are the claims read from a JWT payload or an introspection
// response. The go-jose JSON decoder matches names case-sensitively and
// refuses duplicate keys.
type tokenClaims struct {
	Iss      string           `json:"iss"`
	Sub      string           `json:"sub"`
	Azp      string           `json:"azp"`
	ClientID string           `json:"client_id"`
	Scope    string           `json:"scope"`
	Aud      jwt.Audience     `json:"aud"`
	Resource jwt.Audience     `json:"resource"`
	Exp      *jwt.NumericDate `json:"exp"`
	Nbf      *jwt.NumericDate `json:"nbf"`
	Iat      *jwt.NumericDate `json:"iat"`
}

func (cl tokenClaims) audiences() []string {
	return append(append([]string(nil), cl.Aud...), cl.Resource...)
}

func (cl tokenClaims) public() Claims {
	return Claims{
		Iss: cl.Iss, Sub: cl.Sub, Azp: cl.Azp, ClientID: cl.ClientID, Scope: cl.Scope,
		Aud: append([]string(nil), cl.Aud...),
		Exp: unix(cl.Exp), Nbf: unix(cl.Nbf), Iat: unix(cl.Iat),
	}
}

func unix(d *jwt.NumericDate) int64 {
	if d == nil {
		return 0
	}
	return int64(*d)
}

// decodeClaims reads a payload. Keys that differ only in case are refused:
// a server decoding with a case-insensitive JSON library (Go's own) would
// read "AUD" where we read "aud".
func decodeClaims(payload []byte) (tokenClaims, bool) {
	var keys map[string]json.RawMessage
	if json.Unmarshal(payload, &keys) != nil || foldCollides(keys) {
		return tokenClaims{}, false
	}
	var cl tokenClaims
	if json.Unmarshal(payload, &cl) != nil {
		return tokenClaims{}, false
	}
	return cl, true
}

func foldCollides(keys map[string]json.RawMessage) bool {
	seen := make(map[string]bool, len(keys))
	for k := range keys {
		f := strings.ToLower(strings.ToUpper(k))
		if seen[f] {
			return true
		}
		seen[f] = true
	}
	return false
}

// parseJWT reads a JWS compact token; with issuers configured it must be
// signed by the issuer it names and be valid now.
func (c *Checker) parseJWT(token string) (tokenClaims, bool, *refusal) {
	sig, err := jose.ParseSignedCompact(token, anyAlg)
	if err != nil || len(sig.Signatures) != 1 {
		return tokenClaims{}, false, refused(KindMalformed, "bearer token is not a valid JWS")
	}
	cl, ok := decodeClaims(sig.UnsafePayloadWithoutVerification())
	if !ok {
		return tokenClaims{}, false, refused(KindMalformed, "token claims are not a valid JSON object")
	}
	if len(c.issuers) == 0 {
		return cl, false, nil
	}
	iss, ok := c.issuers[cl.Iss]
	if !ok {
		return tokenClaims{}, false, refused(KindIssuer, "token issuer %s is not configured", quoteClaim(cl.Iss))
	}
	if ref := iss.verify(sig); ref != nil {
		return tokenClaims{}, false, ref
	}
	if ref := c.checkTimes(cl); ref != nil {
		return tokenClaims{}, false, ref
	}
	return cl, true, nil
}

func (c *Checker) checkTimes(cl tokenClaims) *refusal {
	now := c.clock()
	if cl.Exp != nil && now.After(cl.Exp.Time().Add(c.skew)) {
		return refused(KindExpired, "token expired at %s", cl.Exp.Time().UTC().Format(time.RFC3339))
	}
	if cl.Nbf != nil && now.Add(c.skew).Before(cl.Nbf.Time()) {
		return refused(KindExpired, "token not valid before %s", cl.Nbf.Time().UTC().Format(time.RFC3339))
	}
	return nil
}

// checkAudience wants one of the token's audiences (aud and resource) to
// be the canonical URI or an accepted audience, compared canonically.
func checkAudience(aud []string, canonical string, accepted, issuerAccepted []string) *refusal {
	if len(aud) == 0 {
		return refused(KindAudience, "token names no audience")
	}
	for _, a := range aud {
		ca := canonicalize(a)
		if ca == canonical || contains(accepted, ca) || contains(issuerAccepted, ca) {
			return nil
		}
	}
	return refused(KindAudience, "token audience %s ≠ %s", quoteClaims(aud), canonical)
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

const (
	maxClaimLen    = 200
	maxClaimsShown = 3
)

// quoteClaims names a token's audiences in a reason, bounded: the claims
// are the client's to choose.
func quoteClaims(aud []string) string {
	shown := aud
	if len(shown) > maxClaimsShown {
		shown = shown[:maxClaimsShown]
	}
	parts := make([]string, len(shown))
	for i, a := range shown {
		parts[i] = quoteClaim(a)
	}
	s := strings.Join(parts, ", ")
	if len(aud) > maxClaimsShown {
		s += ", …"
	}
	return s
}

// quoteClaim bounds a claim's length and replaces what could forge a log
// line (control and non-printing characters).
func quoteClaim(s string) string {
	if s == "" {
		return `""`
	}
	if len(s) > maxClaimLen {
		s = strings.ToValidUTF8(s[:maxClaimLen], "") + "…"
	}
	return strings.Map(func(r rune) rune {
		if !unicode.IsPrint(r) || r == unicode.ReplacementChar {
			return '?'
		}
		return r
	}, s)
}
