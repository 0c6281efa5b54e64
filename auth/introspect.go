package auth

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/go-jose/go-jose/v4/json"
)

// maxCached bounds the introspection cache; when full, it is emptied
// rather than tracked entry by entry: a miss costs one round trip.
const maxCached = 10000

// introspector asks an RFC 7662 endpoint about opaque tokens. Answers are
// cached by the token's SHA-256, so the token is not kept in memory, for
// at most a minute and never past the token's exp.
type introspector struct {
	cfg    Introspection
	client *http.Client
	clock  func() time.Time

	mu    sync.Mutex
	cache map[[sha256.Size]byte]introspected
}

type introspected struct {
	claims tokenClaims
	active bool
	until  time.Time
}

// introspection is an RFC 7662 §2.2 response.
type introspection struct {
	Active bool `json:"active"`
	tokenClaims
}

func newIntrospector(cfg *Introspection, client *http.Client, clock func() time.Time) (*introspector, error) {
	if cfg == nil || cfg.URL == "" {
		return nil, errors.New("opaque tokens introspect: no introspection endpoint")
	}
	u, err := url.Parse(cfg.URL)
	if err != nil || u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("introspection url %q: want an https URL", cfg.URL)
	}
	return &introspector{cfg: *cfg, client: client, clock: clock, cache: map[[sha256.Size]byte]introspected{}}, nil
}

func (c *Checker) checkOpaque(ctx context.Context, r Result, token, canonical string) (Result, error) {
	switch c.opaque {
	case OpaqueDeny:
		return refuse(r, KindOpaque, "opaque (non-JWT) bearer token refused")
	case OpaqueIntrospect:
		in, err := c.intro.lookup(ctx, token)
		if err != nil {
			return unavailable("token introspection unavailable", err).result(r)
		}
		if !in.active {
			return refuse(r, KindOpaque, "token is not active")
		}
		return c.accept(r, in.claims, true, canonical)
	}
	return r, nil
}

func (in *introspector) lookup(ctx context.Context, token string) (introspected, error) {
	key := sha256.Sum256([]byte(token))
	now := in.clock()
	in.mu.Lock()
	hit, ok := in.cache[key]
	in.mu.Unlock()
	if ok && now.Before(hit.until) {
		return hit, nil
	}
	got, err := in.ask(ctx, token)
	if err != nil {
		return introspected{}, err
	}
	got.until = now.Add(refreshInterval)
	if got.claims.Exp != nil && got.claims.Exp.Time().Before(got.until) {
		got.until = got.claims.Exp.Time()
	}
	in.store(key, got)
	return got, nil
}

func (in *introspector) store(key [sha256.Size]byte, v introspected) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if len(in.cache) >= maxCached {
		clear(in.cache)
	}
	in.cache[key] = v
}

// ask posts the token with the appliance's client credentials. Errors
// never carry the request body.
func (in *introspector) ask(ctx context.Context, token string) (introspected, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), fetchTimeout)
	defer cancel()
	form := url.Values{"token": {token}, "token_type_hint": {"access_token"}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, in.cfg.URL, strings.NewReader(form.Encode()))
	if err != nil {
		return introspected{}, fmt.Errorf("introspection request: %w", err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	req.SetBasicAuth(url.QueryEscape(in.cfg.ClientID), url.QueryEscape(in.cfg.ClientSecret))
	resp, err := in.client.Do(req)
	if err != nil {
		return introspected{}, fmt.Errorf("introspection: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return introspected{}, fmt.Errorf("introspection: status %d", resp.StatusCode)
	}
	return decodeIntrospection(resp)
}

func decodeIntrospection(resp *http.Response) (introspected, error) {
	b, err := readBounded(resp.Body)
	if err != nil {
		return introspected{}, fmt.Errorf("introspection: %w", err)
	}
	var v introspection
	if err := json.Unmarshal(b, &v); err != nil {
		return introspected{}, fmt.Errorf("introspection decode: %w", err)
	}
	return introspected{claims: v.tokenClaims, active: v.Active}, nil
}
