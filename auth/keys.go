package auth

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"sync"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/json"
)

// issuer is a configured issuer with its key set, refreshed when a token
// names a key it does not hold (key rotation), at most once a minute.
type issuer struct {
	name      string
	source    string // the JWKS URL or file, for the log
	audiences []string
	log       *JWKSLog // nil: failures are not logged
	load      func(ctx context.Context) (*jose.JSONWebKeySet, error)
	clock     func() time.Time

	mu      sync.Mutex
	keys    *jose.JSONWebKeySet
	fetched time.Time // last load attempt
	loadErr error     // of the last load attempt
}

func newIssuers(cfg []Issuer, client *http.Client, clock func() time.Time, log *JWKSLog) (map[string]*issuer, error) {
	out := make(map[string]*issuer, len(cfg))
	for _, ic := range cfg {
		if _, dup := out[ic.Issuer]; dup {
			return nil, fmt.Errorf("issuer %q: configured twice", ic.Issuer)
		}
		iss, err := newIssuer(ic, client, clock)
		if err != nil {
			return nil, fmt.Errorf("issuer %q: %w", ic.Issuer, err)
		}
		iss.log = log
		out[ic.Issuer] = iss
	}
	return out, nil
}

func newIssuer(ic Issuer, client *http.Client, clock func() time.Time) (*issuer, error) {
	if ic.Issuer == "" {
		return nil, errors.New("no issuer identifier")
	}
	iss := &issuer{name: ic.Issuer, source: ic.JWKSURL, audiences: canonicalAll(ic.Audiences), clock: clock}
	if ic.JWKSFile != "" {
		iss.source = ic.JWKSFile
	}
	switch {
	case (ic.JWKSFile == "") == (ic.JWKSURL == ""):
		return nil, errors.New("want exactly one of a JWKS file and a JWKS URL")
	case ic.JWKSFile != "":
		iss.load = func(context.Context) (*jose.JSONWebKeySet, error) { return readJWKSFile(ic.JWKSFile) }
		keys, err := iss.load(context.Background())
		if err != nil {
			return nil, err
		}
		iss.keys, iss.fetched = keys, clock()
	default:
		u, err := url.Parse(ic.JWKSURL)
		if err != nil || u.Scheme != "https" || u.Host == "" {
			return nil, fmt.Errorf("jwks url %q: want an https URL", ic.JWKSURL)
		}
		iss.source = u.Redacted() // a password in the URL stays out of the log
		iss.load = func(ctx context.Context) (*jose.JSONWebKeySet, error) { return fetchJWKS(ctx, client, ic.JWKSURL) }
	}
	return iss, nil
}

func readJWKSFile(path string) (*jose.JSONWebKeySet, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("jwks file: %w", err)
	}
	defer f.Close()
	return decodeJWKS(f)
}

func fetchJWKS(ctx context.Context, client *http.Client, u string) (*jose.JSONWebKeySet, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("jwks request: %w", err)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("jwks fetch: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("jwks fetch: status %d", resp.StatusCode)
	}
	return decodeJWKS(resp.Body)
}

func decodeJWKS(r io.Reader) (*jose.JSONWebKeySet, error) {
	b, err := readBounded(r)
	if err != nil {
		return nil, fmt.Errorf("jwks: %w", err)
	}
	var set jose.JSONWebKeySet
	if err := json.Unmarshal(b, &set); err != nil {
		return nil, fmt.Errorf("jwks decode: %w", err)
	}
	return publicKeys(&set), nil
}

// readBounded reads at most maxFetchBytes; more is an error, not a
// truncated document.
func readBounded(r io.Reader) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, maxFetchBytes+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxFetchBytes {
		return nil, fmt.Errorf("over %d bytes", maxFetchBytes)
	}
	return b, nil
}

// publicKeys keeps the public half of each signing key: a private key in
// a JWKS file must not be usable, and symmetric keys never verify here.
func publicKeys(set *jose.JSONWebKeySet) *jose.JSONWebKeySet {
	out := &jose.JSONWebKeySet{}
	for _, k := range set.Keys {
		if k.Use != "" && k.Use != "sig" {
			continue
		}
		if pub := k.Public(); pub.Valid() {
			out.Keys = append(out.Keys, pub)
		}
	}
	return out
}

// candidates are the keys that may have signed a token with this kid and
// alg; a kid the set does not hold triggers one refresh.
func (iss *issuer) candidates(kid string, alg string) ([]jose.JSONWebKey, error) {
	keys, err := iss.current()
	if ks := match(keys, kid, alg); len(ks) > 0 || err != nil {
		return ks, err
	}
	keys, err = iss.refresh()
	return match(keys, kid, alg), err
}

// current is the key set, read again once it is older than refreshInterval: a key the issuer
// withdraws stops verifying within a minute (a failed read keeps the keys held before).
func (iss *issuer) current() (*jose.JSONWebKeySet, error) {
	iss.mu.Lock()
	keys, stale := iss.keys, iss.clock().Sub(iss.fetched) >= refreshInterval
	iss.mu.Unlock()
	if keys == nil || stale {
		return iss.refresh()
	}
	return keys, nil
}

// refresh reloads the key set unless it was tried within the last minute;
// a failed load keeps the keys held before. Holding the lock through the
// load makes concurrent callers wait for one fetch instead of each making
// their own.
func (iss *issuer) refresh() (*jose.JSONWebKeySet, error) {
	iss.mu.Lock()
	defer iss.mu.Unlock()
	now := iss.clock()
	if iss.fetched.IsZero() || now.Sub(iss.fetched) >= refreshInterval {
		iss.fetched = now
		ctx, cancel := context.WithTimeout(context.Background(), fetchTimeout)
		defer cancel()
		keys, err := iss.load(ctx)
		if err == nil {
			iss.keys = keys
		} else {
			held := 0
			if iss.keys != nil {
				held = len(iss.keys.Keys)
			}
			// Only a request needing the keys gets here, at most once a refresh interval.
			iss.log.failed(now, iss.name, iss.source, err, held)
		}
		iss.loadErr = err
	}
	if iss.keys == nil {
		return nil, iss.loadErr
	}
	return iss.keys, nil
}

func match(set *jose.JSONWebKeySet, kid, alg string) []jose.JSONWebKey {
	if set == nil {
		return nil
	}
	var out []jose.JSONWebKey
	for _, k := range set.Keys {
		if (kid == "" || k.KeyID == kid) && (k.Algorithm == "" || k.Algorithm == alg) {
			out = append(out, k)
		}
	}
	return out
}

// verify checks the token's one signature against the issuer's keys.
func (iss *issuer) verify(sig *jose.JSONWebSignature) *refusal {
	h := sig.Signatures[0].Header
	alg := jose.SignatureAlgorithm(h.Algorithm)
	if !verifiedAlg[alg] {
		return refused(KindSignature, "token algorithm not accepted (want RS256, ES256 or EdDSA)")
	}
	keys, err := iss.candidates(h.KeyID, h.Algorithm)
	if err != nil {
		return unavailable("issuer keys unavailable", err)
	}
	if len(keys) == 0 {
		return refused(KindSignature, "no issuer key for the token's key id")
	}
	for _, k := range keys {
		if _, err := sig.Verify(k); err == nil {
			return nil
		}
	}
	return refused(KindSignature, "token signature does not verify")
}
