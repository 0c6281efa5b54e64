package pki

import (
	"container/list"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/singleflight"
)

// Defaults for MinterOptions.
const (
	DefaultCacheSize = 1024
	DefaultValidity  = 24 * time.Hour
	DefaultBackdate  = time.Hour
)

// renewBefore is how long before NotAfter a cached leaf stops being handed out, so a client
// never receives a certificate that expires during its session.
const renewBefore = time.Hour

// MinterOptions tunes a Minter; the zero value gives the defaults.
type MinterOptions struct {
	CacheSize int           // leaves kept (LRU); <= 0 means DefaultCacheSize
	Validity  time.Duration // leaf lifetime from now; <= 0 means DefaultValidity
	// Backdate moves NotBefore into the past for clients whose clocks lag; 0 means
	// DefaultBackdate, a negative value disables backdating.
	Backdate time.Duration
	Now      func() time.Time // clock; nil means time.Now
}

// Minter issues leaf certificates signed by a CA, one per name, from a bounded cache.
// It is safe for concurrent use.
type Minter struct {
	ca     *CA
	size   int
	valid  time.Duration
	back   time.Duration
	margin time.Duration
	now    func() time.Time

	mu    sync.Mutex
	lru   *list.List // of *entry, most recently used first
	items map[string]*list.Element

	flight singleflight.Group

	hits, misses, mints atomic.Uint64
}

type entry struct {
	key  string
	cert *tls.Certificate
}

// NewMinter returns a Minter for ca. A nil ca yields a Minter whose Leaf always fails, so wiring
// mistakes surface as errors on the data path instead of panics.
func NewMinter(ca *CA, o MinterOptions) *Minter {
	m := &Minter{
		ca:    ca,
		size:  o.CacheSize,
		valid: o.Validity,
		back:  o.Backdate,
		now:   o.Now,
		lru:   list.New(),
		items: make(map[string]*list.Element),
	}
	if m.size <= 0 {
		m.size = DefaultCacheSize
	}
	if m.valid <= 0 {
		m.valid = DefaultValidity
	}
	switch {
	case m.back == 0:
		m.back = DefaultBackdate
	case m.back < 0:
		m.back = 0
	}
	if m.now == nil {
		m.now = time.Now
	}
	// With a very short validity a fixed one-hour margin would make every leaf stale at birth
	// and defeat the cache; never renew earlier than halfway through the lifetime.
	m.margin = min(renewBefore, m.valid/2)
	return m
}

// Leaf returns a certificate for name, a DNS name or an IP literal, with the chain [leaf, CA]
// and Leaf set. The result is shared between callers and must not be modified.
func (m *Minter) Leaf(name string) (*tls.Certificate, error) {
	if m.ca == nil || m.ca.Cert == nil || m.ca.Key == nil {
		return nil, errors.New("pki: minter has no CA")
	}
	n, err := normalizeName(name)
	if err != nil {
		return nil, err
	}
	if c := m.lookup(n.key); c != nil {
		m.hits.Add(1)
		return c, nil
	}
	m.misses.Add(1)
	v, err, _ := m.flight.Do(n.key, func() (any, error) {
		// A flight for this name may have finished between our miss and Do; its leaf is as good.
		if c := m.lookup(n.key); c != nil {
			return c, nil
		}
		c, err := m.mint(n)
		if err != nil {
			return nil, err
		}
		m.store(n.key, c)
		return c, nil
	})
	if err != nil {
		return nil, err
	}
	return v.(*tls.Certificate), nil
}

// Stats reports cache hits, cache misses and certificates minted since the Minter was created.
func (m *Minter) Stats() (hits, misses, mints uint64) {
	return m.hits.Load(), m.misses.Load(), m.mints.Load()
}

func (m *Minter) lookup(key string) *tls.Certificate {
	m.mu.Lock()
	defer m.mu.Unlock()
	el, ok := m.items[key]
	if !ok {
		return nil
	}
	e := el.Value.(*entry)
	if !m.fresh(e.cert.Leaf, m.now()) {
		m.lru.Remove(el)
		delete(m.items, key)
		return nil
	}
	m.lru.MoveToFront(el)
	return e.cert
}

func (m *Minter) store(key string, c *tls.Certificate) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if el, ok := m.items[key]; ok {
		el.Value.(*entry).cert = c
		m.lru.MoveToFront(el)
		return
	}
	m.items[key] = m.lru.PushFront(&entry{key: key, cert: c})
	for m.lru.Len() > m.size {
		last := m.lru.Back()
		m.lru.Remove(last)
		delete(m.items, last.Value.(*entry).key)
	}
}

// fresh reports whether a cached leaf may still be served at now.
func (m *Minter) fresh(leaf *x509.Certificate, now time.Time) bool {
	if now.Before(leaf.NotBefore) || !now.Before(leaf.NotAfter) {
		// Expired, or the clock stepped back past NotBefore.
		return false
	}
	if now.Before(leaf.NotAfter.Add(-m.margin)) {
		return true
	}
	// Close to expiry; re-minting only helps if the CA allows a later NotAfter, otherwise
	// every call would mint a leaf just as short-lived.
	return !leaf.NotAfter.Before(m.ca.Cert.NotAfter)
}

func (m *Minter) mint(n leafName) (*tls.Certificate, error) {
	now := m.now()
	ca := m.ca.Cert
	if !now.Before(ca.NotAfter) {
		return nil, fmt.Errorf("pki: ca certificate expired on %s", ca.NotAfter.UTC().Format(time.RFC3339))
	}
	// Every leaf gets its own key from crypto/rand: a key shared or derived across names would
	// let one leaked leaf key impersonate every other name.
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("pki: generate leaf key: %w", err)
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, err
	}
	notBefore := now.Add(-m.back)
	if notBefore.Before(ca.NotBefore) {
		notBefore = ca.NotBefore
	}
	notAfter := now.Add(m.valid)
	if notAfter.After(ca.NotAfter) {
		notAfter = ca.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: n.key},
		NotBefore:             notBefore,
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
	}
	if n.ip.IsValid() {
		tmpl.IPAddresses = []net.IP{n.ip.AsSlice()}
	} else {
		tmpl.DNSNames = []string{n.host}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, m.ca.Key)
	if err != nil {
		return nil, fmt.Errorf("pki: sign leaf for %s: %w", n.key, err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("pki: parse leaf for %s: %w", n.key, err)
	}
	m.mints.Add(1)
	return &tls.Certificate{
		Certificate: [][]byte{der, ca.Raw},
		PrivateKey:  key,
		Leaf:        leaf,
	}, nil
}
