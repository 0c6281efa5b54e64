package pki

import (
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

var (
	testCAOnce sync.Once
	testCA     *CA
	testCAErr  error
)

// sharedCA returns one CA for the whole package run; minting tests do not need a fresh one and
// key generation dominates their run time otherwise.
func sharedCA(t testing.TB) *CA {
	t.Helper()
	testCAOnce.Do(func() {
		dir, err := makeTempDir()
		if err != nil {
			testCAErr = err
			return
		}
		testCA, testCAErr = Init(dir, false)
	})
	if testCAErr != nil {
		t.Fatal(testCAErr)
	}
	return testCA
}

func pool(ca *CA) *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// fakeClock is a settable clock for expiry tests.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func TestLeafVerifies(t *testing.T) {
	ca := sharedCA(t)
	m := NewMinter(ca, MinterOptions{})
	for _, tc := range []struct {
		name     string
		leafFor  string
		verifyAs string
		wantErr  bool
		wantCN   string
		wantIP   bool
	}{
		{name: "dns", leafFor: "mcp.example.com", verifyAs: "mcp.example.com", wantCN: "mcp.example.com"},
		{name: "dns upper case", leafFor: "MCP.Example.COM", verifyAs: "mcp.example.com", wantCN: "mcp.example.com"},
		{name: "dns trailing dot", leafFor: "dot.example.com.", verifyAs: "dot.example.com", wantCN: "dot.example.com"},
		{name: "single label", leafFor: "localhost", verifyAs: "localhost", wantCN: "localhost"},
		{name: "underscore", leafFor: "_svc.example.com", verifyAs: "_svc.example.com", wantCN: "_svc.example.com"},
		{name: "ipv4", leafFor: "10.200.2.2", verifyAs: "10.200.2.2", wantCN: "10.200.2.2", wantIP: true},
		{name: "ipv6", leafFor: "fd00:200:2::2", verifyAs: "fd00:200:2::2", wantCN: "fd00:200:2::2", wantIP: true},
		{name: "ipv6 bracketed", leafFor: "[fd00:200:2::3]", verifyAs: "fd00:200:2::3", wantCN: "fd00:200:2::3", wantIP: true},
		{name: "ipv4-mapped ipv6 unmapped", leafFor: "::ffff:10.200.2.9", verifyAs: "10.200.2.9", wantCN: "10.200.2.9", wantIP: true},
		{name: "other name fails", leafFor: "a.example.com", verifyAs: "b.example.com", wantErr: true},
		{name: "parent name fails", leafFor: "a.example.com", verifyAs: "example.com", wantErr: true},
		{name: "other ip fails", leafFor: "10.200.2.2", verifyAs: "10.200.2.3", wantErr: true},
		{name: "ip leaf for a dns name fails", leafFor: "10.200.2.2", verifyAs: "mcp.example.com", wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := m.Leaf(tc.leafFor)
			if err != nil {
				t.Fatal(err)
			}
			if len(c.Certificate) != 2 || string(c.Certificate[1]) != string(ca.Cert.Raw) {
				t.Fatalf("chain is not [leaf, CA]")
			}
			if c.Leaf == nil || string(c.Leaf.Raw) != string(c.Certificate[0]) {
				t.Fatalf("Leaf not set to the first certificate")
			}
			_, err = c.Leaf.Verify(x509.VerifyOptions{
				DNSName:   tc.verifyAs,
				Roots:     pool(ca),
				KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
			})
			if (err != nil) != tc.wantErr {
				t.Fatalf("Verify(%q) = %v, wantErr %v", tc.verifyAs, err, tc.wantErr)
			}
			if tc.wantErr {
				return
			}
			l := c.Leaf
			if l.Subject.CommonName != tc.wantCN {
				t.Errorf("CN = %q, want %q", l.Subject.CommonName, tc.wantCN)
			}
			if tc.wantIP != (len(l.IPAddresses) == 1 && len(l.DNSNames) == 0) {
				t.Errorf("SANs: DNS %v IP %v", l.DNSNames, l.IPAddresses)
			}
			if tc.wantIP && l.IPAddresses[0].To4() == nil && strings.Contains(tc.wantCN, ".") {
				t.Errorf("IPv4 leaf carries a 16-byte address %v", l.IPAddresses[0])
			}
			if l.IsCA || l.KeyUsage != x509.KeyUsageDigitalSignature {
				t.Errorf("IsCA %v KeyUsage %v", l.IsCA, l.KeyUsage)
			}
			if len(l.ExtKeyUsage) != 1 || l.ExtKeyUsage[0] != x509.ExtKeyUsageServerAuth {
				t.Errorf("ExtKeyUsage = %v", l.ExtKeyUsage)
			}
			if l.SerialNumber.Sign() <= 0 || l.SerialNumber.BitLen() > 128 || l.SerialNumber.BitLen() < 64 {
				t.Errorf("serial %v is not a random positive 128-bit number", l.SerialNumber)
			}
			if _, ok := c.PrivateKey.(*ecdsa.PrivateKey); !ok {
				t.Errorf("leaf key is %T", c.PrivateKey)
			}
		})
	}
}

// The minted certificate must work in a real handshake, verified as a client would.
func TestLeafHandshake(t *testing.T) {
	ca := sharedCA(t)
	m := NewMinter(ca, MinterOptions{})
	for _, tc := range []struct {
		name       string
		serverName string
		maxVersion uint16
	}{
		{"tls13 dns", "mcp.example.com", tls.VersionTLS13},
		{"tls12 dns", "mcp.example.com", tls.VersionTLS12},
		{"tls13 ip", "10.200.2.2", tls.VersionTLS13},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cc, sc := net.Pipe()
			defer cc.Close()
			defer sc.Close()
			srv := tls.Server(sc, &tls.Config{
				GetCertificate: func(h *tls.ClientHelloInfo) (*tls.Certificate, error) {
					name := h.ServerName
					if name == "" {
						name = tc.serverName // an IP is never sent as SNI; use the dialled address
					}
					return m.Leaf(name)
				},
			})
			errc := make(chan error, 1)
			go func() { errc <- srv.Handshake() }()
			cli := tls.Client(cc, &tls.Config{ServerName: tc.serverName, RootCAs: pool(ca), MaxVersion: tc.maxVersion})
			if err := cli.Handshake(); err != nil {
				t.Fatalf("client handshake: %v", err)
			}
			if err := <-errc; err != nil {
				t.Fatalf("server handshake: %v", err)
			}
		})
	}
}

func TestLeafDistinctKeys(t *testing.T) {
	ca := sharedCA(t)
	m := NewMinter(ca, MinterOptions{})
	seenKeys := map[string]string{}
	seenSerials := map[string]string{}
	for i := range 20 {
		name := fmt.Sprintf("k%d.example.com", i)
		c, err := m.Leaf(name)
		if err != nil {
			t.Fatal(err)
		}
		pub, err := x509.MarshalPKIXPublicKey(c.Leaf.PublicKey)
		if err != nil {
			t.Fatal(err)
		}
		if prev, ok := seenKeys[string(pub)]; ok {
			t.Fatalf("%s and %s share a public key", prev, name)
		}
		seenKeys[string(pub)] = name
		if ca.Cert.PublicKey.(*ecdsa.PublicKey).Equal(c.Leaf.PublicKey) {
			t.Fatal("leaf reuses the CA key")
		}
		s := c.Leaf.SerialNumber.String()
		if prev, ok := seenSerials[s]; ok {
			t.Fatalf("%s and %s share serial %s", prev, name, s)
		}
		seenSerials[s] = name
	}
}

func TestLeafValidity(t *testing.T) {
	ca := sharedCA(t)
	now := time.Now().Truncate(time.Second).Add(time.Hour)
	for _, tc := range []struct {
		name          string
		opts          MinterOptions
		now           time.Time
		wantNotBefore time.Time
		wantNotAfter  time.Time
	}{
		{"defaults", MinterOptions{}, now, now.Add(-time.Hour), now.Add(24 * time.Hour)},
		{"custom", MinterOptions{Validity: 2 * time.Hour, Backdate: 5 * time.Minute}, now, now.Add(-5 * time.Minute), now.Add(2 * time.Hour)},
		{"no backdate", MinterOptions{Backdate: -1}, now, now, now.Add(24 * time.Hour)},
		{"clamped to ca NotAfter", MinterOptions{}, ca.Cert.NotAfter.Add(-time.Hour), ca.Cert.NotAfter.Add(-2 * time.Hour), ca.Cert.NotAfter},
		{"clamped to ca NotBefore", MinterOptions{}, ca.Cert.NotBefore.Add(time.Minute), ca.Cert.NotBefore, ca.Cert.NotBefore.Add(time.Minute + 24*time.Hour)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := tc.opts
			o.Now = func() time.Time { return tc.now }
			c, err := NewMinter(ca, o).Leaf("validity.example.com")
			if err != nil {
				t.Fatal(err)
			}
			if !c.Leaf.NotBefore.Equal(tc.wantNotBefore) || !c.Leaf.NotAfter.Equal(tc.wantNotAfter) {
				t.Errorf("validity = %v .. %v, want %v .. %v", c.Leaf.NotBefore, c.Leaf.NotAfter, tc.wantNotBefore, tc.wantNotAfter)
			}
		})
	}
	past := ca.Cert.NotAfter.Add(time.Second)
	if _, err := NewMinter(ca, MinterOptions{Now: func() time.Time { return past }}).Leaf("x.example.com"); err == nil {
		t.Error("minted with an expired CA")
	}
}

func TestLeafNameValidation(t *testing.T) {
	m := NewMinter(sharedCA(t), MinterOptions{})
	label63 := strings.Repeat("a", 63)
	long := strings.Repeat(label63+".", 4)[:254] // 254 characters without a trailing dot
	ok253 := long[:253]
	if ok253[len(ok253)-1] == '.' {
		t.Fatal("bad fixture")
	}
	for _, tc := range []struct {
		name    string
		in      string
		wantErr bool
	}{
		{"empty", "", true},
		{"only dot", ".", true},
		{"too long", long, true},
		{"253 chars", ok253, false},
		{"253 chars plus trailing dot", ok253 + ".", false},
		{"label too long", strings.Repeat("a", 64) + ".com", true},
		{"space", "a b.com", true},
		{"slash", "a/b.com", true},
		{"nul", "a\x00.com", true},
		{"wildcard", "*.example.com", true},
		{"empty label", "a..com", true},
		{"leading dot", ".example.com", true},
		{"non-ascii", "bücher.example", true},
		{"punycode", "xn--bcher-kva.example", false},
		{"ip with zone", "fe80::1%eth0", true},
		{"brackets around a name", "[example.com]", true},
		{"colon", "example.com:443", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := m.Leaf(tc.in)
			if (err != nil) != tc.wantErr {
				t.Errorf("Leaf(%q) error = %v, wantErr %v", tc.in, err, tc.wantErr)
			}
		})
	}
}

func TestLeafCache(t *testing.T) {
	m := NewMinter(sharedCA(t), MinterOptions{})
	a, err := m.Leaf("cache.example.com")
	if err != nil {
		t.Fatal(err)
	}
	for _, alias := range []string{"cache.example.com", "CACHE.example.com", "cache.example.com."} {
		b, err := m.Leaf(alias)
		if err != nil {
			t.Fatal(err)
		}
		if a != b {
			t.Errorf("Leaf(%q) minted anew instead of hitting the cache", alias)
		}
	}
	if hits, misses, mints := m.Stats(); hits != 3 || misses != 1 || mints != 1 {
		t.Errorf("Stats = %d hits %d misses %d mints, want 3 1 1", hits, misses, mints)
	}
	v4, _ := m.Leaf("10.1.2.3")
	mapped, _ := m.Leaf("::ffff:10.1.2.3")
	if v4 != mapped {
		t.Error("IPv4 and its IPv4-mapped form got different leaves")
	}
}

func TestLeafExpiryRemint(t *testing.T) {
	clock := &fakeClock{t: time.Now()}
	m := NewMinter(sharedCA(t), MinterOptions{Validity: 24 * time.Hour, Now: clock.Now})
	first, err := m.Leaf("expiry.example.com")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name      string
		advance   time.Duration // added to the clock; steps accumulate
		wantFresh bool          // a new leaf is expected
	}{
		{"2h left", 22 * time.Hour, false},
		{"61m left", 59 * time.Minute, false},
		{"59m left", 2 * time.Minute, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock.Advance(tc.advance)
			c, err := m.Leaf("expiry.example.com")
			if err != nil {
				t.Fatal(err)
			}
			if got := c != first; got != tc.wantFresh {
				t.Fatalf("re-minted = %v, want %v (now %v, NotAfter %v)", got, tc.wantFresh, clock.Now(), first.Leaf.NotAfter)
			}
			if tc.wantFresh && !c.Leaf.NotAfter.After(first.Leaf.NotAfter) {
				t.Error("re-minted leaf does not live longer")
			}
		})
	}
	// Past NotAfter: the clock jumps a day forward and the second leaf must be replaced too.
	second, _ := m.Leaf("expiry.example.com")
	clock.Advance(48 * time.Hour)
	third, err := m.Leaf("expiry.example.com")
	if err != nil {
		t.Fatal(err)
	}
	if third == second || !clock.Now().Before(third.Leaf.NotAfter) {
		t.Error("expired leaf served from cache")
	}
	// The clock stepping back behind NotBefore also invalidates.
	clock.Advance(-5 * time.Hour)
	if fourth, _ := m.Leaf("expiry.example.com"); fourth == third {
		t.Error("leaf not yet valid served from cache")
	}
	if _, _, mints := m.Stats(); mints != 4 {
		t.Errorf("mints = %d, want 4", mints)
	}
}

func TestLeafLRUEviction(t *testing.T) {
	m := NewMinter(sharedCA(t), MinterOptions{CacheSize: 3})
	leaf := func(name string) *tls.Certificate {
		t.Helper()
		c, err := m.Leaf(name)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	a := leaf("a.example")
	leaf("b.example")
	leaf("c.example")
	if leaf("a.example") != a { // a becomes most recent; b is now the eldest
		t.Fatal("a evicted too early")
	}
	leaf("d.example") // evicts b
	_, _, before := m.Stats()
	if leaf("a.example") != a {
		t.Error("a was evicted although recently used")
	}
	leaf("c.example")
	leaf("d.example")
	if _, _, mints := m.Stats(); mints != before {
		t.Errorf("a, c or d re-minted: %d mints, want %d", mints, before)
	}
	leaf("b.example")
	if _, _, mints := m.Stats(); mints != before+1 {
		t.Errorf("b was not evicted: %d mints, want %d", mints, before+1)
	}
	m.mu.Lock()
	n := m.lru.Len()
	m.mu.Unlock()
	if n != 3 {
		t.Errorf("cache holds %d leaves, want 3", n)
	}
}

func TestLeafConcurrentSingleMint(t *testing.T) {
	m := NewMinter(sharedCA(t), MinterOptions{})
	const n = 64
	var (
		wg    sync.WaitGroup
		start = make(chan struct{})
		certs = make([]*tls.Certificate, n)
		errs  = make([]error, n)
	)
	for i := range n {
		wg.Go(func() {
			<-start
			name := "concurrent.example.com"
			if i%2 == 1 {
				name = "Concurrent.Example.com."
			}
			certs[i], errs[i] = m.Leaf(name)
		})
	}
	close(start)
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if certs[i] != certs[0] {
			t.Fatalf("caller %d got a different leaf", i)
		}
	}
	hits, misses, mints := m.Stats()
	if mints != 1 {
		t.Errorf("mints = %d, want exactly 1", mints)
	}
	if hits+misses != n {
		t.Errorf("hits+misses = %d, want %d", hits+misses, n)
	}
}

func TestMinterWithoutCA(t *testing.T) {
	if _, err := NewMinter(nil, MinterOptions{}).Leaf("example.com"); err == nil {
		t.Error("Leaf without a CA succeeded")
	}
}

func BenchmarkLeafMint(b *testing.B) {
	m := NewMinter(sharedCA(b), MinterOptions{})
	i := 0
	for b.Loop() {
		if _, err := m.Leaf(fmt.Sprintf("h%d.bench.example", i)); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

func BenchmarkLeafCached(b *testing.B) {
	m := NewMinter(sharedCA(b), MinterOptions{})
	if _, err := m.Leaf("cached.bench.example"); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := m.Leaf("cached.bench.example"); err != nil {
			b.Fatal(err)
		}
	}
}
