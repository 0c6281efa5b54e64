package engine

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"mcpintercept/policy"
	"mcpintercept/tlsmitm"
)

// Tests of issue 9 point 6: the engine's terminate path (an invalid upstream certificate is never
// laundered) and a table of dispositions × first bytes.

// dispUpstream is the original destination of the tests: it counts every raw byte it receives and
// serves whatever arrives. A TLS ClientHello gets a handshake with the certificate cert returns
// for its SNI (the IP without one) and then HTTP; an HTTP request line gets HTTP; anything else is
// echoed. HTTP requests are answered 200 "ok" (keep-alive) and counted.
type dispUpstream struct {
	addr       string
	conns      atomic.Int64
	raw        atomic.Int64 // bytes received, TLS records included
	handshakes atomic.Int64 // TLS handshakes completed
	requests   atomic.Int64 // HTTP requests received (in the clear or inside TLS)

	mu    sync.Mutex
	hosts []string // Host of each request
}

func newDispUpstream(t *testing.T, cert func(name string) (*tls.Certificate, error)) *dispUpstream {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &dispUpstream{addr: ln.Addr().String()}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var open []net.Conn
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u.conns.Add(1)
			mu.Lock()
			open = append(open, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				u.serve(c, cert)
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range open {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return u
}

func (u *dispUpstream) serve(c net.Conn, cert func(string) (*tls.Certificate, error)) {
	c.SetDeadline(time.Now().Add(15 * time.Second))
	cc := &dispCountConn{Conn: c, n: &u.raw}
	br := bufio.NewReader(cc)
	first, err := br.Peek(1)
	if err != nil {
		return
	}
	if first[0] == 0x16 {
		tc := tls.Server(&dispBufConn{Conn: cc, r: br}, &tls.Config{
			NextProtos: []string{"http/1.1"},
			GetCertificate: func(hi *tls.ClientHelloInfo) (*tls.Certificate, error) {
				name := hi.ServerName
				if name == "" {
					name = "127.0.0.1"
				}
				return cert(name)
			},
		})
		if err := tc.Handshake(); err != nil {
			io.Copy(io.Discard, br) // keep counting what arrives
			return
		}
		u.handshakes.Add(1)
		u.serveHTTP(tc, bufio.NewReader(tc))
		return
	}
	head, _ := br.Peek(4)
	if slices.Contains([]string{"GET ", "POST", "PUT ", "HEAD"}, string(head)) {
		u.serveHTTP(cc, br)
		return
	}
	io.Copy(cc, br)
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
	io.Copy(io.Discard, br)
}

func (u *dispUpstream) serveHTTP(w io.Writer, br *bufio.Reader) {
	for {
		req, err := http.ReadRequest(br)
		if err != nil {
			io.Copy(io.Discard, br)
			return
		}
		io.Copy(io.Discard, req.Body)
		u.requests.Add(1)
		u.mu.Lock()
		u.hosts = append(u.hosts, req.Host)
		u.mu.Unlock()
		if _, err := io.WriteString(w, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok"); err != nil {
			return
		}
	}
}

type dispCountConn struct {
	net.Conn
	n *atomic.Int64
}

func (c *dispCountConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.n.Add(int64(n))
	return n, err
}

type dispBufConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *dispBufConn) Read(b []byte) (int, error) { return c.r.Read(b) }

// dispCert issues a server certificate from p (or self-signed) for names (IP literals become IP
// SANs), valid from notBefore to notAfter.
func dispCert(t *testing.T, p *testPKI, selfSigned bool, notBefore, notAfter time.Time, names ...string) *tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: names[0]},
		NotBefore: notBefore, NotAfter: notAfter,
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, n := range names {
		if ip := net.ParseIP(n); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, n)
		}
	}
	parent, signer := p.ca, any(p.key)
	if selfSigned {
		tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
		tmpl.KeyUsage |= x509.KeyUsageCertSign
		parent, signer = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, signer)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// dispTLS wires the appliance's TLS: leaves minted by app, the upstream verified against up's
// roots only.
func dispTLS(app, up *testPKI) func(*Options) {
	return func(o *Options) {
		o.TLS.Leaves = app
		o.TLS.Upstream = tlsmitm.OriginateConfig{Roots: up.pool, HandshakeTimeout: 5 * time.Second}
		o.TLS.HandshakeTimeout = 5 * time.Second
	}
}

// issuedBy reports whether leaf was signed by p's CA.
func issuedBy(leaf *x509.Certificate, p *testPKI) bool { return leaf.CheckSignatureFrom(p.ca) == nil }

// TestDispositionTerminateUpstreamCertificate: "Terminate-and-re-originate verifies the upstream
// certificate first and refuses the client handshake when it is invalid: an invalid upstream
// certificate is never laundered into a valid one." (DESIGN.md). The client's handshake fails on
// a handshake_failure alert before any certificate reaches it, the record says deny with the
// reason, and the upstream never sees an HTTP request. With a valid certificate the client's
// request reaches the upstream and the answer comes back, through a leaf of the appliance's CA.
func TestDispositionTerminateUpstreamCertificate(t *testing.T) {
	app, up, other := newTestPKI(t), newTestPKI(t), newTestPKI(t)
	now := time.Now()
	valid := func(names ...string) func(t *testing.T) *tls.Certificate {
		return func(t *testing.T) *tls.Certificate {
			return dispCert(t, up, false, now.Add(-time.Hour), now.Add(time.Hour), names...)
		}
	}
	tests := []struct {
		name       string
		cert       func(t *testing.T) *tls.Certificate // the upstream's certificate
		serverName string                              // the client's; an IP sends no SNI
		reason     string                              // "" for a valid upstream; else in the record's reason
	}{
		{name: "valid by SNI", cert: valid("mcp.test"), serverName: "mcp.test"},
		{name: "valid by IP without SNI", cert: valid("127.0.0.1"), serverName: "127.0.0.1"},
		{name: "expired", serverName: "mcp.test", reason: "expired",
			cert: func(t *testing.T) *tls.Certificate {
				return dispCert(t, up, false, now.Add(-48*time.Hour), now.Add(-24*time.Hour), "mcp.test")
			}},
		{name: "self-signed", serverName: "mcp.test", reason: "unknown authority",
			cert: func(t *testing.T) *tls.Certificate {
				return dispCert(t, up, true, now.Add(-time.Hour), now.Add(time.Hour), "mcp.test")
			}},
		{name: "untrusted issuer", serverName: "mcp.test", reason: "unknown authority",
			cert: func(t *testing.T) *tls.Certificate {
				return dispCert(t, other, false, now.Add(-time.Hour), now.Add(time.Hour), "mcp.test")
			}},
		{name: "wrong name", cert: valid("other.test"), serverName: "mcp.test", reason: "another name"},
		{name: "wrong IP without SNI", cert: valid("127.0.0.2"), serverName: "127.0.0.1", reason: "another name"},
	}
	for _, level := range []int{0, 1} {
		for _, tt := range tests {
			t.Run(tt.name+"/level "+strconv.Itoa(level), func(t *testing.T) {
				t.Parallel()
				cert := tt.cert(t)
				u := newDispUpstream(t, func(string) (*tls.Certificate, error) { return cert, nil })
				h := newHarnessWith(t, u.addr, Limits{IdleTimeout: 10 * time.Second},
					&Routing{Routes: []*Route{{Name: "term", TLS: Terminate, Level: level}}}, dispTLS(app, up))

				pool := x509.NewCertPool()
				pool.AddCert(app.ca)
				pool.AddCert(up.ca) // the client would accept the upstream's own leaf: it must never get it
				var certsSeen atomic.Int64
				raw, err := net.Dial("tcp", h.addr)
				if err != nil {
					t.Fatal(err)
				}
				defer raw.Close()
				raw.SetDeadline(time.Now().Add(10 * time.Second))
				c := tls.Client(raw, &tls.Config{ServerName: tt.serverName, RootCAs: pool, NextProtos: []string{"http/1.1"},
					VerifyConnection: func(tls.ConnectionState) error { certsSeen.Add(1); return nil }})
				herr := c.Handshake()

				if tt.reason != "" {
					var oe *net.OpError
					if herr == nil {
						t.Fatalf("the client completed a handshake behind an upstream with a bad certificate (leaf %q)",
							c.ConnectionState().PeerCertificates[0].Subject)
					}
					if !errors.As(herr, &oe) || oe.Op != "remote error" || !strings.Contains(herr.Error(), "handshake failure") {
						t.Errorf("client error %v, want a handshake_failure alert", herr)
					}
					if n := certsSeen.Load(); n != 0 {
						t.Errorf("a certificate reached the client (%d verifications)", n)
					}
					rec := h.sink.next(t)
					if rec.TLS != "terminate" || rec.Decision != "deny" || rec.Rule != "term" ||
						!strings.Contains(rec.Reason, "upstream certificate rejected") || !strings.Contains(rec.Reason, tt.reason) {
						t.Errorf("record tls=%q decision=%q rule=%q reason=%q; want terminate, deny, term, upstream certificate rejected: …%s…",
							rec.TLS, rec.Decision, rec.Rule, rec.Reason, tt.reason)
					}
					if n := u.handshakes.Load(); n != 0 {
						t.Errorf("the upstream completed %d handshakes", n)
					}
					if n := u.requests.Load(); n != 0 {
						t.Errorf("the upstream received %d HTTP requests", n)
					}
					return
				}

				if herr != nil {
					t.Fatalf("client handshake: %v", herr)
				}
				leaf := c.ConnectionState().PeerCertificates[0]
				if !issuedBy(leaf, app) {
					t.Errorf("the client got a leaf the appliance did not mint: %q", leaf.Subject)
				}
				if err := leaf.VerifyHostname(tt.serverName); err != nil {
					t.Errorf("leaf: %v", err)
				}
				host := tt.serverName
				io.WriteString(c, "GET /hello HTTP/1.1\r\nHost: "+host+"\r\n\r\n")
				resp, err := http.ReadResponse(bufio.NewReader(c), nil)
				if err != nil {
					t.Fatalf("response: %v", err)
				}
				body, _ := io.ReadAll(resp.Body)
				if resp.StatusCode != 200 || string(body) != "ok" {
					t.Errorf("response %d %q, want the upstream's 200 ok", resp.StatusCode, body)
				}
				c.Close()
				rec := h.sink.next(t)
				if rec.TLS != "terminate" || rec.Level != level || rec.Decision != "allow" {
					t.Errorf("record tls=%q level=%d decision=%q reason=%q; want terminate, %d, allow",
						rec.TLS, rec.Level, rec.Decision, rec.Reason, level)
				}
				u.mu.Lock()
				hosts := slices.Clone(u.hosts)
				u.mu.Unlock()
				if u.handshakes.Load() != 1 || !slices.Equal(hosts, []string{host}) {
					t.Errorf("upstream: %d handshakes, requests for %q; want one handshake and one request for %q",
						u.handshakes.Load(), hosts, host)
				}
			})
		}
	}
}

// First bytes a client opens with.
const (
	fbHello     = "valid ClientHello"
	fbHTTP      = "plain HTTP request"
	fbSilence   = "silence past the peek timeout"
	fbMalformed = "malformed ClientHello"
	fbTruncated = "truncated ClientHello then close"
	fbOther     = "non-HTTP plaintext"
)

// Outcomes, as seen from the client and the upstream (not from the record).
const (
	outOpaque     = "forwarded opaque"  // the upstream got exactly the client's bytes and answered them
	outTerminated = "terminated"        // the client's TLS ended at the appliance (its leaf)
	outLevel1     = "level1"            // an HTTP answer the upstream did not give (the probe denied)
	outClosed     = "closed"            // the client got nothing back and the connection ended
	outUnexpected = "unexpected result" // none of the above
)

// dispProbe is the rule set of every Level 1 route of the table: it denies requests carrying
// X-Probe: deny, which every HTTP request of the table does. Only Level 1 can apply it, so a 403
// with no request at the upstream proves the request was read at Level 1; a 200 proves it was not.
func dispProbe(t *testing.T) RuleSet {
	t.Helper()
	s, err := policy.Compile([]policy.RuleSpec{{Name: "no-probe", When: `http.headers["x-probe"] == "deny"`,
		Action: policy.RuleDeny, Reason: "probe denied"}})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

const dispRequest = "GET /probe HTTP/1.1\r\nHost: mcp.test\r\nX-Probe: deny\r\n\r\n"

// dispObservation is what the client saw.
type dispObservation struct {
	sent    int    // bytes written in the clear (0 for a TLS session)
	got     []byte // bytes received in the clear
	leaf    *x509.Certificate
	status  int    // HTTP status received, 0 if none
	body    string // its body
	echoed  bool   // the non-HTTP line came back unchanged
	readErr error
}

// dispHelloPrefix returns the first n bytes of a real crypto/tls ClientHello for mcp.test.
func dispHelloPrefix(t *testing.T, n int) []byte {
	t.Helper()
	cc, sc := net.Pipe()
	defer sc.Close()
	go func() {
		tls.Client(cc, &tls.Config{ServerName: "mcp.test"}).Handshake()
		cc.Close()
	}()
	b := make([]byte, n)
	if _, err := io.ReadFull(sc, b); err != nil {
		t.Fatal(err)
	}
	return b
}

// dispMalformedHello is a TLS handshake record carrying a client_hello too short to parse.
var dispMalformedHello = []byte{0x16, 0x03, 0x01, 0x00, 0x08, 0x01, 0x00, 0x00, 0x04, 0x03, 0x03, 0xde, 0xad}

// dispOpen runs the client side of one first-bytes case against the appliance at addr.
func dispOpen(t *testing.T, addr, first string, pool *x509.CertPool, peek time.Duration) dispObservation {
	t.Helper()
	var o dispObservation
	c, err := net.Dial("tcp", addr)
	if errors.Is(err, syscall.ECONNRESET) {
		// A flow refused before a byte is read can be reset before connect(2) returns.
		o.readErr = err
		return o
	}
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))

	readHTTP := func(r io.Reader) {
		resp, err := http.ReadResponse(bufio.NewReader(r), nil)
		if err != nil {
			o.readErr = err
			return
		}
		b, _ := io.ReadAll(resp.Body)
		o.status, o.body = resp.StatusCode, string(b)
	}
	// drain reads what comes back: it waits up to d for a first byte (Level 1's header timeout,
	// 10 s by default, is what answers a head that never completes), then collects the rest.
	drain := func(d time.Duration) {
		c.SetReadDeadline(time.Now().Add(d))
		buf := make([]byte, 4096)
		for {
			n, err := c.Read(buf)
			if n > 0 && len(o.got) == 0 {
				c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
			}
			o.got = append(o.got, buf[:n]...)
			if err != nil {
				if !(len(o.got) > 0 && errors.Is(err, os.ErrDeadlineExceeded)) {
					o.readErr = err
				}
				break
			}
		}
		if strings.HasPrefix(string(o.got), "HTTP/1.") {
			readHTTP(strings.NewReader(string(o.got)))
		}
	}

	switch first {
	case fbHello:
		tc := tls.Client(c, &tls.Config{ServerName: "mcp.test", RootCAs: pool, NextProtos: []string{"http/1.1"}})
		if err := tc.Handshake(); err != nil {
			o.readErr = err
			return o
		}
		o.leaf = tc.ConnectionState().PeerCertificates[0]
		io.WriteString(tc, dispRequest)
		readHTTP(tc)
	case fbHTTP, fbSilence:
		if first == fbSilence {
			time.Sleep(2*peek + 50*time.Millisecond)
		}
		n, _ := io.WriteString(c, dispRequest)
		o.sent = n
		cr := &dispCapture{r: c}
		readHTTP(cr)
		o.got = cr.b
	case fbMalformed:
		n, _ := c.Write(dispMalformedHello)
		o.sent = n
		drain(15 * time.Second)
	case fbTruncated:
		n, _ := c.Write(dispHelloPrefix(t, 40))
		o.sent = n
		c.(*net.TCPConn).CloseWrite()
		drain(15 * time.Second)
	case fbOther:
		line := "SSH-2.0-mcpi_test\r\n"
		n, _ := io.WriteString(c, line)
		o.sent = n
		drain(15 * time.Second)
		o.echoed = string(o.got) == line
	}
	return o
}

type dispCapture struct {
	r io.Reader
	b []byte
}

func (c *dispCapture) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.b = append(c.b, p[:n]...)
	return n, err
}

// dispOutcome classifies a case from what the client and the upstream saw.
func dispOutcome(o dispObservation, u *dispUpstream, app, up *testPKI) string {
	switch {
	case o.leaf != nil && issuedBy(o.leaf, app):
		return outTerminated
	case o.leaf != nil && issuedBy(o.leaf, up) && u.requests.Load() == 1 && o.status == 200:
		return outOpaque
	case o.status != 0 && u.requests.Load() == 0:
		return outLevel1
	case o.sent > 0 && u.raw.Load() == int64(o.sent):
		return outOpaque
	case len(o.got) == 0 && o.leaf == nil && o.status == 0 && u.raw.Load() == 0:
		return outClosed
	}
	return outUnexpected
}

// TestDispositionFirstBytes: every disposition against every way a client can open. The routes
// match every flow; the peek timeout is 200 ms. Level >= 1 routes leave on_mismatch unset, which
// closes (forwarding the bytes opaque would skip the inspection the route asks for); level 0
// routes forward opaque. Draft, TLS Considerations: the three dispositions; DESIGN.md: "Bad input
// gets a clear, bounded answer: ... malformed TLS".
func TestDispositionFirstBytes(t *testing.T) {
	app, up := newTestPKI(t), newTestPKI(t)
	pool := x509.NewCertPool()
	pool.AddCert(app.ca)
	pool.AddCert(up.ca)

	route := func(d Disposition, level int) func(t *testing.T) *Routing {
		return func(t *testing.T) *Routing {
			r := &Route{Name: "r", TLS: d, Level: level, Development: true}
			rt := &Routing{Routes: []*Route{r}}
			if level >= 1 {
				r.RuleSet = "probe"
				rt.RuleSets = map[string]RuleSet{"probe": dispProbe(t)}
			}
			return rt
		}
	}
	type want struct {
		out      string
		tls      string
		level    int
		decision string
		reason   string // substring of the record's reason ("" checks nothing)
		upBytes  bool   // the upstream received bytes
	}
	opaque := func(tlsMode string) want { return want{outOpaque, tlsMode, 0, "allow", "", true} }
	closed := func(tlsMode, reason string) want { return want{outClosed, tlsMode, 0, "deny", reason, false} }
	l1probe := func(tlsMode string, upBytes bool) want {
		return want{outLevel1, tlsMode, 1, "deny", "probe denied", upBytes}
	}
	terminatedL1 := want{outTerminated, "terminate", 1, "deny", "probe denied", true} // the upstream saw the handshake, no request
	terminatedL0 := want{outTerminated, "terminate", 0, "allow", "", true}

	tests := []struct {
		name    string
		routing func(t *testing.T) *Routing
		want    map[string]want
	}{
		{"passthrough", route(Passthrough, 0), map[string]want{
			fbHello:     opaque("passthrough"),
			fbHTTP:      opaque("plaintext"),
			fbSilence:   opaque("passthrough"), // nothing was peeked: nothing said it was plaintext
			fbMalformed: closed("passthrough", "malformed"),
			fbTruncated: closed("passthrough", "truncated"),
			fbOther:     opaque("plaintext"),
		}},
		{"terminate L0", route(Terminate, 0), map[string]want{
			fbHello:     terminatedL0,
			fbHTTP:      opaque("plaintext"),
			fbSilence:   opaque("passthrough"),
			fbMalformed: closed("terminate", "malformed"),
			fbTruncated: closed("terminate", "truncated"),
			fbOther:     opaque("plaintext"),
		}},
		{"terminate L1", route(Terminate, 1), map[string]want{
			fbHello:     terminatedL1,
			fbHTTP:      closed("plaintext", "on_mismatch close"),
			fbSilence:   closed("passthrough", "on_mismatch close"),
			fbMalformed: closed("terminate", "malformed"),
			fbTruncated: closed("terminate", "truncated"),
			fbOther:     closed("plaintext", "on_mismatch close"),
		}},
		{"plaintext L0", route(Plaintext, 0), map[string]want{
			// Level 0 plaintext reads nothing: whatever comes is forwarded as declared.
			fbHello:     opaque("plaintext"),
			fbHTTP:      opaque("plaintext"),
			fbSilence:   opaque("plaintext"),
			fbMalformed: opaque("plaintext"),
			fbTruncated: opaque("plaintext"),
			fbOther:     opaque("plaintext"),
		}},
		{"plaintext L1", route(Plaintext, 1), map[string]want{
			fbHello: closed("passthrough", "plaintext route saw a TLS ClientHello; on_mismatch close"),
			fbHTTP:  l1probe("plaintext", false),
			// A silent client still goes through Level 1: a route declared HTTP is never
			// bypassed by pausing.
			fbSilence: l1probe("plaintext", false),
			// Not a valid hello, so not TLS: Level 1 reads it as a request and refuses it.
			// A head that never completes is answered when Level 1's header timeout (10 s) ends.
			fbMalformed: {outLevel1, "plaintext", 1, "deny", "request header timeout", false},
			fbTruncated: {outClosed, "plaintext", 1, "allow", "no request", false},
			fbOther:     {outLevel1, "plaintext", 1, "deny", "request header timeout", false},
		}},
		{"auto", route(Auto, 1), map[string]want{
			fbHello: terminatedL1,
			fbHTTP:  l1probe("plaintext", false),
			// Nothing to recognise within the peek timeout: forwarded opaque (a server that
			// speaks first must work).
			fbSilence:   opaque("passthrough"),
			fbMalformed: closed("passthrough", "malformed"),
			fbTruncated: closed("passthrough", "truncated"),
			fbOther:     opaque("plaintext"),
		}},
		{"default route (none configured)", func(*testing.T) *Routing { return nil }, map[string]want{
			// The transparent core reads nothing before forwarding.
			fbHello:     opaque("passthrough"),
			fbHTTP:      opaque("passthrough"),
			fbSilence:   opaque("passthrough"),
			fbMalformed: opaque("passthrough"),
			fbTruncated: opaque("passthrough"),
			fbOther:     opaque("passthrough"),
		}},
		{"default route terminate L1", func(t *testing.T) *Routing {
			return &Routing{
				Routes:   []*Route{{Name: "elsewhere", Ports: []PortRange{{From: 1, To: 1}}, TLS: Passthrough}},
				Default:  &Route{Name: "default", TLS: Terminate, Level: 1, RuleSet: "probe"},
				RuleSets: map[string]RuleSet{"probe": dispProbe(t)}}
		}, map[string]want{
			fbHello:     terminatedL1,
			fbHTTP:      closed("plaintext", "on_mismatch close"),
			fbSilence:   closed("passthrough", "on_mismatch close"),
			fbMalformed: closed("terminate", "malformed"),
			fbTruncated: closed("terminate", "truncated"),
			fbOther:     closed("plaintext", "on_mismatch close"),
		}},
		{"default route close", func(*testing.T) *Routing {
			return &Routing{Routes: []*Route{{Name: "elsewhere", Ports: []PortRange{{From: 1, To: 1}}, TLS: Passthrough}}, DefaultClose: true}
		}, map[string]want{
			fbHello:     closed("passthrough", ReasonNoRoute),
			fbHTTP:      closed("passthrough", ReasonNoRoute),
			fbSilence:   closed("passthrough", ReasonNoRoute),
			fbMalformed: closed("passthrough", ReasonNoRoute),
			fbTruncated: closed("passthrough", ReasonNoRoute),
			fbOther:     closed("passthrough", ReasonNoRoute),
		}},
	}
	firsts := []string{fbHello, fbHTTP, fbSilence, fbMalformed, fbTruncated, fbOther}
	const peek = 200 * time.Millisecond // newHarnessWith's peek timeout
	for _, tt := range tests {
		for _, first := range firsts {
			w, ok := tt.want[first]
			if !ok {
				t.Fatalf("%s: no expectation for %s", tt.name, first)
			}
			t.Run(tt.name+"/"+first, func(t *testing.T) {
				t.Parallel()
				u := newDispUpstream(t, func(name string) (*tls.Certificate, error) { return up.Leaf(name) })
				// The idle timeout stays above Level 1's 10 s header timeout, which is what answers
				// a head that never completes.
				h := newHarnessWith(t, u.addr, Limits{IdleTimeout: 30 * time.Second}, tt.routing(t), func(o *Options) {
					dispTLS(app, up)(o)
					o.TLS.PeekTimeout = peek
				})
				o := dispOpen(t, h.addr, first, pool, peek)
				rec := h.sink.next(t)
				got := dispOutcome(o, u, app, up)
				if got != w.out {
					t.Errorf("outcome %q, want %q (status %d, %d bytes back %q, leaf from appliance %v, err %v; upstream: %d conns, %d bytes, %d requests)",
						got, w.out, o.status, len(o.got), trim(o.got), o.leaf != nil && issuedBy(o.leaf, app), o.readErr,
						u.conns.Load(), u.raw.Load(), u.requests.Load())
				}
				// Forwarded opaque means the upstream's own answer came back.
				if got == outOpaque {
					switch first {
					case fbHTTP, fbSilence:
						if o.status != 200 || o.body != "ok" {
							t.Errorf("response %d %q, want the upstream's 200 ok", o.status, o.body)
						}
					case fbOther:
						if !o.echoed {
							t.Errorf("got %q back, want the upstream's echo", trim(o.got))
						}
					}
				}
				if rec.Level != w.level || rec.Decision != w.decision || !strings.Contains(rec.Reason, w.reason) {
					t.Errorf("record level=%d decision=%q reason=%q, want level %d, %q, reason containing %q",
						rec.Level, rec.Decision, rec.Reason, w.level, w.decision, w.reason)
				}
				if gotUp := u.raw.Load() > 0; gotUp != w.upBytes {
					t.Errorf("upstream received %d bytes, want bytes: %v", u.raw.Load(), w.upBytes)
				}
				if w.decision == "deny" && w.out != outLevel1 && w.out != outTerminated && u.requests.Load() != 0 {
					t.Errorf("a refused flow reached the upstream with %d requests", u.requests.Load())
				}
				// The log contract: tls is one of the three dispositions, and the right one.
				if rec.TLS != w.tls {
					msg := "record tls %q, want %q"
					if !slices.Contains([]string{"passthrough", "terminate", "plaintext"}, rec.TLS) {
						msg += " (not one of passthrough|terminate|plaintext)"
					}
					t.Errorf(msg, rec.TLS, w.tls)
				}
				// One record per flow at level 0, per request at level 1: nothing more.
				time.Sleep(50 * time.Millisecond)
				h.sink.mu.Lock()
				n := len(h.sink.recs)
				h.sink.mu.Unlock()
				if n != 1 {
					t.Errorf("%d records, want 1", n)
				}
			})
		}
	}
}

func trim(b []byte) string {
	if len(b) > 40 {
		b = b[:40]
	}
	return string(b)
}
