package main

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// A server that requires a credential, for the credentials tests (all off by default):
//
//   - -bearer-file FILE: a request to the MCP endpoint must carry Authorization: Bearer <the
//     file's one line>; the file is read for every request, so a test can change the token.
//   - -jwks URL -issuer ISS -audience AUD: it must carry a bearer JWT signed by a key of the JWKS
//     at URL (fetched on first use and again for an unknown kid), with iss ISS, AUD among its
//     audiences, and an exp not passed (no leeway).
//   - with -control, POST /control/revoke: every token accepted so far (by its jti, else a hash
//     of its value) is refused from then on; answered {"revoked": N}.
//
// A refused request gets 401 with WWW-Authenticate: Bearer (error="invalid_token" when it carried
// a token), and a line "auth refused: <why>" on stderr (never the token). -auth-log FILE gets one
// line per HTTP request, whatever its path: method, path, and whether an Authorization field was
// present, never its value.

// authOptions are the flags above.
type authOptions struct {
	bearerFile string
	jwks       string
	issuer     string
	audience   string
	authLog    string
}

func (a authOptions) check() error {
	if a.bearerFile != "" && a.jwks != "" {
		return errors.New("-bearer-file and -jwks are exclusive")
	}
	if a.jwks != "" && (a.issuer == "" || a.audience == "") {
		return errors.New("-jwks needs -issuer and -audience")
	}
	if a.jwks == "" && (a.issuer != "" || a.audience != "") {
		return errors.New("-issuer and -audience go with -jwks")
	}
	return nil
}

func (a authOptions) required() bool { return a.bearerFile != "" || a.jwks != "" }

// authenticator checks a request's bearer token and keeps what it accepted (for revocation).
type authenticator struct {
	o      authOptions
	logger *slog.Logger

	mu       sync.Mutex
	accepted map[string]bool // jti or value hash of every token accepted
	revoked  map[string]bool
	keys     *jose.JSONWebKeySet
	fetched  time.Time
}

func newAuthenticator(o authOptions, logger *slog.Logger) *authenticator {
	return &authenticator{o: o, logger: logger, accepted: map[string]bool{}, revoked: map[string]bool{}}
}

// wrap requires the credential on next.
func (a *authenticator) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok, present := bearerOf(r)
		id, err := a.verify(r.Context(), tok, present)
		if err == nil {
			a.mu.Lock()
			if a.revoked[id] {
				err = errors.New("token revoked (POST /control/revoke)")
			} else {
				a.accepted[id] = true
			}
			a.mu.Unlock()
		}
		if err != nil {
			a.logger.Info("auth refused", "method", r.Method, "path", r.URL.Path, "why", err.Error())
			challenge := `Bearer realm="mcpserver"`
			if present {
				challenge += `, error="invalid_token"`
			}
			w.Header().Set("WWW-Authenticate", challenge)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// bearerOf is the request's bearer token ("" none); present reports any Authorization field.
func bearerOf(r *http.Request) (tok string, present bool) {
	v, present := r.Header["Authorization"]
	if !present || len(v) != 1 {
		return "", present
	}
	scheme, cred, ok := strings.Cut(strings.TrimSpace(v[0]), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", true
	}
	return strings.TrimSpace(cred), true
}

// verify returns the token's identity (jti, else its hash) when it is accepted.
func (a *authenticator) verify(ctx context.Context, tok string, present bool) (string, error) {
	switch {
	case !present:
		return "", errors.New("no Authorization")
	case tok == "":
		return "", errors.New("not one bearer token")
	}
	sum := sha256.Sum256([]byte(tok))
	hashID := fmt.Sprintf("sha256:%x", sum)
	if a.o.bearerFile != "" {
		b, err := os.ReadFile(a.o.bearerFile)
		if err != nil {
			return "", fmt.Errorf("bearer file: %v", err)
		}
		if want := strings.TrimSpace(string(b)); want == "" || tok != want {
			return "", errors.New("not the expected bearer token")
		}
		return hashID, nil
	}
	parsed, err := jwt.ParseSigned(tok, []jose.SignatureAlgorithm{jose.RS256, jose.RS384, jose.RS512,
		jose.PS256, jose.ES256, jose.ES384, jose.EdDSA})
	if err != nil {
		return "", fmt.Errorf("not a signed JWT: %v", err)
	}
	if len(parsed.Headers) != 1 {
		return "", errors.New("not one signature")
	}
	key, err := a.key(ctx, parsed.Headers[0].KeyID)
	if err != nil {
		return "", err
	}
	var claims jwt.Claims
	if err := parsed.Claims(key, &claims); err != nil {
		return "", fmt.Errorf("signature: %v", err)
	}
	if claims.Expiry == nil {
		return "", errors.New("no exp")
	}
	if err := claims.ValidateWithLeeway(jwt.Expected{Issuer: a.o.issuer, AnyAudience: jwt.Audience{a.o.audience},
		Time: time.Now()}, 0); err != nil {
		return "", fmt.Errorf("claims (aud %v): %v", []string(claims.Audience), err)
	}
	if claims.ID != "" {
		return "jti:" + claims.ID, nil
	}
	return hashID, nil
}

// key is the JWKS key named kid, fetching the set on first use and again (at most once a second)
// when kid is not in it.
func (a *authenticator) key(ctx context.Context, kid string) (*jose.JSONWebKey, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	find := func() *jose.JSONWebKey {
		if a.keys == nil {
			return nil
		}
		for _, k := range a.keys.Key(kid) {
			if k.Use == "" || k.Use == "sig" {
				return &k
			}
		}
		return nil
	}
	if k := find(); k != nil {
		return k, nil
	}
	if time.Since(a.fetched) < time.Second {
		return nil, fmt.Errorf("no key %q in the JWKS", kid)
	}
	a.fetched = time.Now()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.o.jwks, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("JWKS: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("JWKS: HTTP %d", resp.StatusCode)
	}
	var set jose.JSONWebKeySet
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&set); err != nil {
		return nil, fmt.Errorf("JWKS: %v", err)
	}
	a.keys = &set
	if k := find(); k != nil {
		return k, nil
	}
	return nil, fmt.Errorf("no key %q in the JWKS", kid)
}

// revoke refuses every token accepted so far; answers how many.
func (a *authenticator) revoke() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		n := len(a.accepted)
		for id := range a.accepted {
			a.revoked[id] = true
		}
		clear(a.accepted)
		a.mu.Unlock()
		a.logger.Info("control: tokens revoked", "count", n)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, "{\"revoked\":%d}\n", n)
	})
}

// authLog writes one line per request to f: method, path, authorization=present|absent.
func authLog(f *os.File, next http.Handler) http.Handler {
	var mu sync.Mutex
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		state := "absent"
		if _, ok := r.Header["Authorization"]; ok {
			state = "present"
		}
		mu.Lock()
		fmt.Fprintf(f, "method=%s path=%s authorization=%s\n", r.Method, r.URL.Path, state)
		mu.Unlock()
		next.ServeHTTP(w, r)
	})
}
