package credentials

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"
)

// Secret is a credential read from a file (inject, or the exchange's client secret): one line,
// trimmed, read when the route is built (start and every SIGHUP). The value is never logged,
// never in an error.
type Secret struct {
	path  string
	value string
	err   error
}

// LoadSecret reads path: a regular file readable by its owner alone, at most MaxFile bytes,
// whose one line is a valid header value. An error names the file, never its content.
func LoadSecret(path string) (*Secret, error) {
	v, err := readSecret(path)
	if err != nil {
		return nil, err
	}
	return &Secret{path: path, value: v}, nil
}

// MaxFile bounds a credential file.
const MaxFile = 16 << 10

func readSecret(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("credential file: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	switch {
	case err != nil:
		return "", fmt.Errorf("credential file: %w", err)
	case !fi.Mode().IsRegular():
		return "", fmt.Errorf("credential file %s is not a regular file", path)
	case fi.Mode().Perm()&0o077 != 0:
		return "", fmt.Errorf("credential file %s is mode %04o: it must be readable by its owner alone (chmod 600 %s)", path, fi.Mode().Perm(), path)
	}
	b, err := io.ReadAll(io.LimitReader(f, MaxFile+1))
	switch {
	case err != nil:
		return "", fmt.Errorf("credential file %s: %w", path, err)
	case len(b) > MaxFile:
		return "", fmt.Errorf("credential file %s is larger than %d bytes: not one credential", path, MaxFile)
	}
	v := strings.TrimSpace(string(b))
	switch {
	case v == "":
		return "", fmt.Errorf("credential file %s is empty", path)
	case !validValue(v):
		return "", fmt.Errorf("credential file %s holds more than one line or a control character (content not shown)", path)
	}
	return v, nil
}

// validValue is a header value the exchange forwards unchanged: visible ASCII, spaces inside.
func validValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < ' ' || c == 0x7f {
			return false
		}
	}
	return true
}

// Value is the credential.
func (s *Secret) Value() (string, error) {
	if s == nil || s.value == "" {
		return "", errors.New("no credential loaded")
	}
	return s.value, nil
}

// Path is the file the credential came from.
func (s *Secret) Path() string { return s.path }

// ExchangeConfig is how to reach the token endpoint.
type ExchangeConfig struct {
	Endpoint           string
	ClientID           string
	ClientSecret       *Secret
	Audience           string // "" asks for the server's canonical URI
	Scope              string
	SubjectTokenType   string
	RequestedTokenType string
	Params             [][2]string
	RootCAs            *x509.CertPool // nil: the system's
	Timeout            time.Duration
	// Dial reaches the token endpoint (the bypass dialer: the appliance never intercepts its
	// own exchanges). nil: net.Dialer.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// Now is the clock (tests); nil: time.Now.
	Now func() time.Time
}

// Exchanger trades a client's token for one scoped to a server (RFC 8693), and keeps the result
// until shortly before it expires (never past the client token's own exp).
type Exchanger struct {
	cfg    ExchangeConfig
	client *http.Client
	now    func() time.Time
	sf     singleflight.Group

	mu    sync.Mutex
	cache map[[32]byte]*token
}

// token is one exchanged token.
type token struct {
	key   [32]byte
	value string
	until time.Time // used until then (the expiry less a margin)

	expiresIn json.RawMessage // as the endpoint said it
}

// MaxOpaqueSubjectCache bounds how long a token exchanged for an opaque (not JWT) client token is
// used: that token's own expiry cannot be read.
const MaxOpaqueSubjectCache = 5 * time.Minute

// MaxCache bounds the tokens kept; past it, expired ones are dropped, then the cache is emptied.
const MaxCache = 10000

// GrantTokenExchange is RFC 8693's grant type.
const GrantTokenExchange = "urn:ietf:params:oauth:grant-type:token-exchange"

// NewExchanger makes the exchanger of cfg.
func NewExchanger(cfg ExchangeConfig) *Exchanger {
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	if cfg.SubjectTokenType == "" {
		cfg.SubjectTokenType = "urn:ietf:params:oauth:token-type:access_token"
	}
	dial := cfg.Dial
	if dial == nil {
		dial = (&net.Dialer{Timeout: cfg.Timeout}).DialContext
	}
	tr := &http.Transport{
		DialContext:         dial,
		TLSClientConfig:     &tls.Config{RootCAs: cfg.RootCAs, MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout: cfg.Timeout,
		MaxIdleConnsPerHost: 4,
		IdleConnTimeout:     90 * time.Second,
		Proxy:               nil, // never an environment proxy: the endpoint is the configured one
	}
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	return &Exchanger{cfg: cfg, now: now, cache: map[[32]byte]*token{}, client: &http.Client{
		Transport: tr, Timeout: cfg.Timeout,
		// A redirect would send the client's token and the secret somewhere not configured.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
}

// Close drops idle connections to the token endpoint.
func (e *Exchanger) Close() { e.client.CloseIdleConnections() }

// Token is the exchanged token for subject and the server's canonical URI: cached (fresh false),
// or asked for (fresh true; one request per key at a time, the others wait for it and share its
// answer, fresh false).
func (e *Exchanger) Token(ctx context.Context, subject, canonical string) (t *token, fresh bool, err error) {
	aud := e.cfg.Audience
	if aud == "" {
		aud = canonical
	}
	key := sha256.Sum256([]byte(subject + "\x00" + aud + "\x00" + canonical))
	now := e.now()
	e.mu.Lock()
	t = e.cache[key]
	e.mu.Unlock()
	if t != nil && now.Before(t.until) {
		return t, false, nil
	}
	// Only the request that runs the exchange sees fresh; those that waited for it share its
	// token (or its error).
	v, err, _ := e.sf.Do(string(key[:]), func() (any, error) {
		fresh = true
		return e.exchange(ctx, key, subject, aud, canonical)
	})
	if err != nil {
		return nil, fresh, err
	}
	return v.(*token), fresh, nil
}

// Invalidate drops t (the server answered 401 to it), unless another already replaced it.
func (e *Exchanger) Invalidate(t *token) {
	e.mu.Lock()
	if e.cache[t.key] == t {
		delete(e.cache, t.key)
	}
	e.mu.Unlock()
}

// tokenResponse is RFC 8693 §2.2.1's response (and RFC 6749 §5.2's error).
type tokenResponse struct {
	AccessToken     string          `json:"access_token"`
	IssuedTokenType string          `json:"issued_token_type"`
	TokenType       string          `json:"token_type"`
	ExpiresIn       json.RawMessage `json:"expires_in"`
	Error           string          `json:"error"`
	ErrorDesc       string          `json:"error_description"`
}

// parse reads the token endpoint's answer: the token, or why there is none (the client's token
// and the secret scrubbed from anything the endpoint said).
func (e *Exchanger) parse(status int, body []byte, subject, secret string) (*token, error) {
	var tr tokenResponse
	jerr := json.Unmarshal(body, &tr)
	if status != http.StatusOK {
		why := fmt.Sprintf("HTTP %d", status)
		if jerr == nil && tr.Error != "" {
			why += " " + bound(scrub(tr.Error, subject, secret), 64)
			if tr.ErrorDesc != "" {
				why += ": " + bound(scrub(tr.ErrorDesc, subject, secret), 200)
			}
		}
		return nil, fmt.Errorf("token exchange at %s refused: %s", e.cfg.Endpoint, why)
	}
	if jerr != nil {
		return nil, fmt.Errorf("token exchange at %s: the answer is not JSON", e.cfg.Endpoint)
	}
	switch tt := strings.ToLower(tr.TokenType); {
	case tr.AccessToken == "":
		return nil, fmt.Errorf("token exchange at %s: the answer has no access_token", e.cfg.Endpoint)
	case tt == "dpop":
		return nil, fmt.Errorf("token exchange at %s issued a DPoP-bound token: DPoP binds each request to a key the server checks, and the appliance forwards bearer tokens only", e.cfg.Endpoint)
	case tt != "bearer" && tt != "n_a":
		return nil, fmt.Errorf("token exchange at %s issued a token of type %q: only Bearer is forwarded", e.cfg.Endpoint, bound(scrub(tr.TokenType, subject, secret), 32))
	case !validValue(tr.AccessToken) || strings.ContainsAny(tr.AccessToken, " \t"):
		return nil, fmt.Errorf("token exchange at %s issued a token that is not one header token (not shown)", e.cfg.Endpoint)
	}
	return &token{value: tr.AccessToken, expiresIn: tr.ExpiresIn}, nil
}

// maxResponse bounds the token endpoint's answer.
const maxResponse = 64 << 10

func (e *Exchanger) exchange(ctx context.Context, key [32]byte, subject, aud, canonical string) (*token, error) {
	secret, err := e.cfg.ClientSecret.Value()
	if err != nil {
		return nil, fmt.Errorf("token exchange at %s: client secret: %v", e.cfg.Endpoint, err)
	}
	form := url.Values{}
	form.Set("grant_type", GrantTokenExchange)
	form.Set("subject_token", subject)
	form.Set("subject_token_type", e.cfg.SubjectTokenType)
	form.Set("audience", aud)
	form.Set("resource", canonical)
	if e.cfg.Scope != "" {
		form.Set("scope", e.cfg.Scope)
	}
	if e.cfg.RequestedTokenType != "" {
		form.Set("requested_token_type", e.cfg.RequestedTokenType)
	}
	for _, p := range e.cfg.Params {
		form.Set(p[0], p[1])
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.cfg.Endpoint, strings.NewReader(form.Encode()))
	if err != nil {
		return nil, fmt.Errorf("token exchange at %s: %v", e.cfg.Endpoint, err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	// client_secret_basic (RFC 6749 §2.3.1: each part form-encoded first).
	req.SetBasicAuth(url.QueryEscape(e.cfg.ClientID), url.QueryEscape(secret))
	start := e.now()
	resp, err := e.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("token exchange at %s: %s", e.cfg.Endpoint, scrub(transportError(err), subject, secret))
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxResponse+1))
	switch {
	case err != nil:
		return nil, fmt.Errorf("token exchange at %s: reading the answer: %s", e.cfg.Endpoint, scrub(err.Error(), subject, secret))
	case len(body) > maxResponse:
		return nil, fmt.Errorf("token exchange at %s: answer larger than %d bytes", e.cfg.Endpoint, maxResponse)
	}
	t, err := e.parse(resp.StatusCode, body, subject, secret)
	if err != nil {
		return nil, err
	}
	t.key = key
	exp, ok := expiresAt(start, t.expiresIn, t.value)
	if !ok {
		// With no lifetime known, the token serves this request only.
		return t, nil
	}
	if sexp, ok := jwtExp(subject); ok && sexp.Before(exp) {
		// Never past the client's own token.
		exp = sexp
	} else if !ok && exp.After(start.Add(MaxOpaqueSubjectCache)) {
		// An opaque client token's lifetime is unknown here: the authorization server judges it
		// again at least this often.
		exp = start.Add(MaxOpaqueSubjectCache)
	}
	t.until = exp.Add(-margin(exp.Sub(start)))
	e.mu.Lock()
	if len(e.cache) >= MaxCache {
		now := e.now()
		for k, c := range e.cache {
			if !now.Before(c.until) {
				delete(e.cache, k)
			}
		}
		if len(e.cache) >= MaxCache {
			clear(e.cache)
		}
	}
	e.cache[key] = t
	e.mu.Unlock()
	return t, nil
}

// margin is how long before its expiry a token stops being used: a tenth of its lifetime, at
// most 30 s, so that a request never reaches the server with a token about to lapse.
func margin(life time.Duration) time.Duration {
	m := life / 10
	if m > 30*time.Second {
		m = 30 * time.Second
	}
	return m
}

// expiresAt is when the token expires: expires_in from when it was asked for, else a JWT's exp.
func expiresAt(start time.Time, expiresIn json.RawMessage, tok string) (time.Time, bool) {
	var n json.Number
	if len(expiresIn) > 0 && json.Unmarshal(bytes.Trim(expiresIn, `"`), &n) == nil {
		if s, err := n.Int64(); err == nil && s > 0 && s < 1<<31 {
			return start.Add(time.Duration(s) * time.Second), true
		}
	}
	return jwtExp(tok)
}

// jwtExp reads a JWT's exp claim without verifying it: only to cut a cache lifetime short.
func jwtExp(tok string) (time.Time, bool) {
	parts := strings.Split(tok, ".")
	if len(parts) != 3 || len(parts[1]) > 8<<10 {
		return time.Time{}, false
	}
	b, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(parts[1], "="))
	if err != nil {
		return time.Time{}, false
	}
	var c struct {
		Exp json.Number `json:"exp"`
	}
	if json.Unmarshal(b, &c) != nil {
		return time.Time{}, false
	}
	f, err := c.Exp.Float64()
	if err != nil || f <= 0 || f > 1<<40 {
		return time.Time{}, false
	}
	return time.Unix(int64(f), 0), true
}

// transportError is an http.Client error without the URL's query (none here) and its wrapping.
func transportError(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return err.Error()
}

// scrub keeps the client's token and the secret out of a message that came from elsewhere.
func scrub(s string, secrets ...string) string {
	for _, v := range secrets {
		if v != "" {
			s = strings.ReplaceAll(s, v, "[credential]")
		}
	}
	return s
}

// bound cuts s at n bytes and replaces control characters.
func bound(s string, n int) string {
	if len(s) > n {
		s = s[:n] + "…"
	}
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, s)
}
