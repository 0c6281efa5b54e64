package auth

import (
	"crypto/sha256"
	"sync"
	"time"
)

// parsedCache remembers the JWTs a Checker parsed (and verified) recently, by the SHA-256 of the
// token: a client sends the same token on every request, and an ES256 verification costs tens of
// microseconds. Only what holds whatever the request is kept — the claims and whether the
// signature was verified — never the token; the audience (which depends on the server addressed)
// and, for a verified token, exp and nbf are judged again on every use. An entry lives at most
// cacheLifetime (the JWKS refresh interval, so a key withdrawn from the issuer's set stops
// vouching for a cached token as soon as it would stop vouching for a new one) and never past exp.
// Bounded by maxCached entries; when full it is emptied, as the introspection cache is.
type parsedCache struct {
	mu sync.Mutex
	m  map[[sha256.Size]byte]parsedEntry
}

type parsedEntry struct {
	claims   tokenClaims
	verified bool
	until    time.Time
}

const cacheLifetime = refreshInterval

func (p *parsedCache) get(key [sha256.Size]byte, now time.Time) (parsedEntry, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	e, ok := p.m[key]
	if !ok {
		return parsedEntry{}, false
	}
	if !now.Before(e.until) {
		delete(p.m, key)
		return parsedEntry{}, false
	}
	return e, true
}

func (p *parsedCache) put(key [sha256.Size]byte, e parsedEntry, now time.Time) {
	e.until = now.Add(cacheLifetime)
	if e.claims.Exp != nil && e.claims.Exp.Time().Before(e.until) {
		e.until = e.claims.Exp.Time()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m == nil {
		p.m = map[[sha256.Size]byte]parsedEntry{}
	}
	if len(p.m) >= maxCached {
		clear(p.m)
	}
	p.m[key] = e
}
