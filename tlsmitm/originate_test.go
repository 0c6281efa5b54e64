package tlsmitm

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"mcpintercept/flowconn"
)

// serverSide is what an upstream saw of one handshake attempt.
type serverSide struct {
	hello *ClientHello // the client's hello as Peek parsed it (nil if it sent none)
	state tls.ConnectionState
	err   error // the server's handshake error
}

// tlsServer listens on host (an IP literal) and runs a crypto/tls server handshake with cfg on every
// connection, after peeking the client's hello so the test can check what Originate offered. A
// completed handshake is followed by an echo of whatever the client sends. Every outcome is sent on
// the returned channel.
func tlsServer(t *testing.T, host string, cfg *tls.Config) (addr string, seen <-chan serverSide) {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Skipf("cannot listen on %s: %v", host, err)
	}
	ch := make(chan serverSide, 16)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				c.SetDeadline(time.Now().Add(hangGuard))
				h, peeked, err := Peek(c, 0)
				if err != nil {
					ch <- serverSide{err: err}
					return
				}
				tc := tls.Server(flowconn.Wrap(c, flowconn.Options{Prefix: peeked}), cfg)
				err = tc.Handshake()
				ch <- serverSide{hello: h, state: tc.ConnectionState(), err: err}
				if err == nil {
					io.Copy(tc, tc)
				}
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String(), ch
}

func dialTCP(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func nextSeen(t *testing.T, seen <-chan serverSide) serverSide {
	t.Helper()
	select {
	case s := <-seen:
		return s
	case <-time.After(hangGuard):
		t.Fatal("the upstream saw no handshake")
	}
	return serverSide{}
}

// TestOriginate: "Terminate-and-re-originate verifies the upstream certificate first ... an
// invalid upstream certificate is never laundered into a valid one. No TLS downgrade unless the
// route says so explicitly." (DESIGN.md, Rules that are easy to get wrong). The server name is the
// client's SNI when there is one, else the original destination's IP, which must then be in the
// certificate's IP SANs; every certificate problem is a *VerifyError with a Reason.
func TestOriginate(t *testing.T) {
	ca := newTestCA(t, "upstream test CA")
	other := newTestCA(t, "a CA nobody trusts")
	past := time.Now().Add(-48 * time.Hour)
	future := time.Now().Add(48 * time.Hour)

	tests := []struct {
		name      string
		listen    string // the upstream's address ("127.0.0.1" when empty)
		cert      func(t *testing.T) *tls.Certificate
		server    func(*tls.Config) // changes to the upstream's config
		sni       string
		dst       string // the original destination passed to Originate ("127.0.0.1" when empty)
		wantName  string // the name verified (VerifyError.Name, ConnectionState.ServerName)
		wantSNI   string // what the upstream saw in server_name
		reason    string // substring of VerifyError.Reason; "" when the handshake must succeed
		errSubstr string // a failure that is not about the certificate: no VerifyError, this text
		version   uint16 // the version that must be negotiated on success (0: any of 1.2, 1.3)
	}{
		{name: "valid by SNI", cert: dnsLeaf(ca, "mcp.test"), sni: "mcp.test", wantName: "mcp.test", wantSNI: "mcp.test"},
		{name: "valid by SNI in another case", cert: dnsLeaf(ca, "mcp.test"), sni: "MCP.Test", wantName: "MCP.Test", wantSNI: "MCP.Test"},
		// Peek accepts a trailing dot in the SNI (other stacks do); the name is still verified.
		{name: "valid by SNI with a trailing dot", cert: dnsLeaf(ca, "mcp.test"), sni: "mcp.test.", wantName: "mcp.test.", wantSNI: "mcp.test"},
		{name: "valid wildcard by SNI", cert: dnsLeaf(ca, "*.example.test"), sni: "tools.example.test", wantName: "tools.example.test", wantSNI: "tools.example.test"},
		{name: "valid by IP without SNI", cert: ipLeaf(ca, "127.0.0.1"), wantName: "127.0.0.1"},
		{name: "valid by IPv4-mapped destination", cert: ipLeaf(ca, "127.0.0.1"), dst: "::ffff:127.0.0.1", wantName: "127.0.0.1"},
		{name: "valid by IPv6 without SNI", listen: "::1", cert: ipLeaf(ca, "::1"), dst: "::1", wantName: "::1"},
		{name: "TLS 1.2-only upstream", cert: dnsLeaf(ca, "mcp.test"), sni: "mcp.test", wantName: "mcp.test", wantSNI: "mcp.test",
			server: func(c *tls.Config) { c.MaxVersion = tls.VersionTLS12 }, version: tls.VersionTLS12},

		{name: "expired", sni: "mcp.test", wantName: "mcp.test", wantSNI: "mcp.test", reason: "expired",
			cert: func(t *testing.T) *tls.Certificate {
				return ca.leaf(t, leafSpec{dns: []string{"mcp.test"}, notBefore: past.Add(-time.Hour), notAfter: past})
			}},
		{name: "not yet valid", sni: "mcp.test", wantName: "mcp.test", wantSNI: "mcp.test", reason: "not yet valid",
			cert: func(t *testing.T) *tls.Certificate {
				return ca.leaf(t, leafSpec{dns: []string{"mcp.test"}, notBefore: future, notAfter: future.Add(time.Hour)})
			}},
		{name: "self-signed", sni: "mcp.test", wantName: "mcp.test", wantSNI: "mcp.test", reason: "unknown authority",
			cert: func(t *testing.T) *tls.Certificate {
				return ca.leaf(t, leafSpec{dns: []string{"mcp.test"}, selfSigned: true})
			}},
		{name: "untrusted root", cert: dnsLeaf(other, "mcp.test"), sni: "mcp.test", wantName: "mcp.test", wantSNI: "mcp.test", reason: "unknown authority"},
		{name: "wrong name", cert: dnsLeaf(ca, "other.test"), sni: "mcp.test", wantName: "mcp.test", wantSNI: "mcp.test", reason: "another name"},
		{name: "wildcard does not cover the bare suffix", cert: dnsLeaf(ca, "*.mcp.test"), sni: "mcp.test", wantName: "mcp.test", wantSNI: "mcp.test", reason: "another name"},
		{name: "wrong IP", cert: ipLeaf(ca, "127.0.0.2"), wantName: "127.0.0.1", reason: "another name"},
		{name: "name-only certificate without SNI", cert: dnsLeaf(ca, "127.0.0.1.nip.test"), wantName: "127.0.0.1", reason: "another name"},
		// With an SNI the IP is not a fallback: the certificate must name the SNI.
		{name: "IP-only certificate with SNI", cert: ipLeaf(ca, "127.0.0.1"), sni: "mcp.test", wantName: "mcp.test", wantSNI: "mcp.test", reason: "another name"},
		{name: "TLS 1.1-only upstream refused", cert: dnsLeaf(ca, "mcp.test"), sni: "mcp.test", wantName: "mcp.test", wantSNI: "mcp.test",
			server:    func(c *tls.Config) { c.MinVersion, c.MaxVersion = tls.VersionTLS10, tls.VersionTLS11 },
			errSubstr: "protocol version"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			listen := orDefault(tt.listen, "127.0.0.1")
			scfg := &tls.Config{Certificates: []tls.Certificate{*tt.cert(t)}, NextProtos: []string{"h2", "http/1.1"}}
			if tt.server != nil {
				tt.server(scfg)
			}
			addr, seen := tlsServer(t, listen, scfg)
			dst := netip.MustParseAddr(orDefault(tt.dst, listen))

			tc, err := Originate(context.Background(), dialTCP(t, addr), tt.sni, dst,
				OriginateConfig{Roots: ca.pool, HandshakeTimeout: hangGuard})
			srv := nextSeen(t, seen)

			// What Originate offered, whatever the outcome: the SNI (or none), only http/1.1, and
			// nothing below TLS 1.2.
			if srv.hello == nil {
				t.Fatalf("the upstream could not read a hello: %v", srv.err)
			}
			if srv.hello.SNI != tt.wantSNI {
				t.Errorf("upstream saw SNI %q, want %q", srv.hello.SNI, tt.wantSNI)
			}
			if !slices.Equal(srv.hello.ALPN, []string{"http/1.1"}) {
				t.Errorf("upstream saw ALPN %q, want only http/1.1", srv.hello.ALPN)
			}
			if len(srv.hello.SupportedVersions) == 0 {
				t.Errorf("no supported_versions offered")
			}
			for _, v := range srv.hello.SupportedVersions {
				if v < tls.VersionTLS12 && v&0x0f0f != 0x0a0a { // GREASE aside
					t.Errorf("offered version %#04x below TLS 1.2", v)
				}
			}

			switch {
			case tt.reason != "":
				if tc != nil {
					t.Fatal("a connection was returned with an invalid certificate")
				}
				var ve *VerifyError
				if !errors.As(err, &ve) {
					t.Fatalf("err %v (%T), want a *VerifyError", err, err)
				}
				if !strings.Contains(ve.Reason, tt.reason) {
					t.Errorf("Reason %q, want it to contain %q", ve.Reason, tt.reason)
				}
				if ve.Name != tt.wantName {
					t.Errorf("Name %q, want %q", ve.Name, tt.wantName)
				}
				if ve.Err == nil || !strings.Contains(err.Error(), ve.Reason) {
					t.Errorf("error %q hides its cause or reason", err)
				}
				if srv.err == nil {
					t.Errorf("the upstream completed its handshake: the client side must abort it")
				}
			case tt.errSubstr != "":
				if err == nil || tc != nil {
					t.Fatalf("handshake succeeded (conn %v), want failure %q", tc != nil, tt.errSubstr)
				}
				var ve *VerifyError
				if errors.As(err, &ve) {
					t.Errorf("err is a *VerifyError (reason %q); the certificate was not the problem", ve.Reason)
				}
				if !strings.Contains(err.Error(), tt.errSubstr) {
					t.Errorf("err %q, want it to contain %q", err, tt.errSubstr)
				}
			default:
				if err != nil {
					t.Fatalf("Originate: %v", err)
				}
				cs := tc.ConnectionState()
				if cs.NegotiatedProtocol != "http/1.1" {
					t.Errorf("ALPN %q, want http/1.1 (the upstream prefers h2)", cs.NegotiatedProtocol)
				}
				if cs.ServerName != tt.wantSNI {
					t.Errorf("ServerName %q, want %q", cs.ServerName, tt.wantSNI)
				}
				if err := cs.PeerCertificates[0].VerifyHostname(tt.wantName); err != nil {
					t.Errorf("the accepted certificate is not for %q: %v", tt.wantName, err)
				}
				if len(cs.VerifiedChains) == 0 {
					t.Error("no verified chain")
				}
				if tt.version != 0 && cs.Version != tt.version {
					t.Errorf("version %#04x, want %#04x", cs.Version, tt.version)
				}
				if cs.Version < tls.VersionTLS12 {
					t.Errorf("version %#04x below TLS 1.2", cs.Version)
				}
				echoCheck(t, tc, "ping")
			}
		})
	}
}

// TestOriginateTLS11Control shows the TLS 1.1-only upstream of TestOriginate is real: a client that
// allows TLS 1.1 completes a handshake with it, so Originate's failure comes from its minimum.
func TestOriginateTLS11Control(t *testing.T) {
	ca := newTestCA(t, "upstream test CA")
	addr, seen := tlsServer(t, "127.0.0.1", &tls.Config{
		Certificates: []tls.Certificate{*ca.leaf(t, leafSpec{dns: []string{"mcp.test"}})},
		MinVersion:   tls.VersionTLS10, MaxVersion: tls.VersionTLS11,
	})
	tc := tls.Client(dialTCP(t, addr), &tls.Config{ServerName: "mcp.test", RootCAs: ca.pool, MinVersion: tls.VersionTLS10})
	if err := tc.Handshake(); err != nil {
		t.Fatalf("a TLS 1.1 client failed against the TLS 1.1 upstream: %v", err)
	}
	if v := tc.ConnectionState().Version; v != tls.VersionTLS11 {
		t.Fatalf("negotiated %#04x, want TLS 1.1", v)
	}
	if s := nextSeen(t, seen); s.err != nil {
		t.Fatalf("server: %v", s.err)
	}
}

// TestOriginateNetworkErrors: failures that are not about the certificate are not *VerifyError
// (the engine resets the client for them instead of refusing its handshake as untrusted), and a
// silent upstream is bounded by HandshakeTimeout or the context. No clock is read: a bound that
// fired is told by its error (context.DeadlineExceeded), and an upstream's own failure by the
// absence of one under a handshake timeout of minutes.
func TestOriginateNetworkErrors(t *testing.T) {
	ca := newTestCA(t, "upstream test CA")
	tests := []struct {
		name    string
		serve   func(c *net.TCPConn)   // the upstream's behaviour on the accepted connection
		cfg     OriginateConfig        // HandshakeTimeout and roots
		ctx     func() context.Context // nil: Background
		slow    bool                   // the error must come from the bound (else from the upstream)
		isErr   error                  // errors.Is target, if any
		errText string                 // substring, if any
	}{
		{name: "silent upstream hits the handshake timeout",
			serve: func(c *net.TCPConn) { io.Copy(io.Discard, c) },
			cfg:   OriginateConfig{Roots: ca.pool, HandshakeTimeout: 300 * time.Millisecond},
			slow:  true, isErr: context.DeadlineExceeded},
		{name: "silent upstream bounded by the context",
			serve: func(c *net.TCPConn) { io.Copy(io.Discard, c) },
			cfg:   OriginateConfig{Roots: ca.pool},
			ctx: func() context.Context {
				ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
				t.Cleanup(cancel)
				return ctx
			},
			slow: true, isErr: context.DeadlineExceeded},
		{name: "upstream resets after the hello",
			serve: func(c *net.TCPConn) { Peek(c, 0); c.SetLinger(0); c.Close() },
			cfg:   OriginateConfig{Roots: ca.pool, HandshakeTimeout: hangGuard}},
		{name: "upstream closes after the hello",
			serve: func(c *net.TCPConn) { Peek(c, 0); c.Close() },
			cfg:   OriginateConfig{Roots: ca.pool, HandshakeTimeout: hangGuard},
			isErr: io.EOF},
		{name: "upstream speaks HTTP",
			serve: func(c *net.TCPConn) {
				io.WriteString(c, "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
				io.Copy(io.Discard, c)
			},
			cfg:     OriginateConfig{Roots: ca.pool, HandshakeTimeout: hangGuard},
			errText: "does not look like a TLS handshake"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			addr := rawServer(t, tt.serve)
			ctx := context.Background()
			if tt.ctx != nil {
				ctx = tt.ctx()
			}
			tc, err := Originate(ctx, dialTCP(t, addr), "mcp.test", netip.MustParseAddr("127.0.0.1"), tt.cfg)
			if err == nil || tc != nil {
				t.Fatalf("Originate succeeded against %s", tt.name)
			}
			var ve *VerifyError
			if errors.As(err, &ve) {
				t.Fatalf("err %v is a *VerifyError with reason %q: a network failure is not a certificate problem", err, ve.Reason)
			}
			if !strings.Contains(err.Error(), "mcp.test") {
				t.Errorf("err %q does not name the upstream", err)
			}
			if timedOut := errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded); timedOut != tt.slow {
				t.Errorf("err %v: ended by a time bound %v, want %v", err, timedOut, tt.slow)
			}
			if tt.isErr != nil && !errors.Is(err, tt.isErr) {
				t.Errorf("err %v, want it to wrap %v", err, tt.isErr)
			}
			if tt.errText != "" && !strings.Contains(err.Error(), tt.errText) {
				t.Errorf("err %q, want %q in it", err, tt.errText)
			}
		})
	}
}

// rawServer accepts TCP connections on loopback and runs serve on each.
func rawServer(t *testing.T, serve func(c *net.TCPConn)) string {
	t.Helper()
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.AcceptTCP()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				c.SetDeadline(time.Now().Add(hangGuard))
				serve(c)
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

func dnsLeaf(ca *testCA, names ...string) func(t *testing.T) *tls.Certificate {
	return func(t *testing.T) *tls.Certificate { return ca.leaf(t, leafSpec{dns: names}) }
}

func ipLeaf(ca *testCA, ips ...string) func(t *testing.T) *tls.Certificate {
	return func(t *testing.T) *tls.Certificate {
		var s leafSpec
		for _, ip := range ips {
			s.ips = append(s.ips, net.ParseIP(ip))
		}
		return ca.leaf(t, s)
	}
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// echoCheck writes msg and expects it back.
func echoCheck(t *testing.T, c net.Conn, msg string) {
	t.Helper()
	c.SetDeadline(time.Now().Add(hangGuard))
	if _, err := io.WriteString(c, msg); err != nil {
		t.Fatalf("write: %v", err)
	}
	buf := make([]byte, len(msg))
	if _, err := io.ReadFull(c, buf); err != nil {
		t.Fatalf("read: %v", err)
	}
	if string(buf) != msg {
		t.Fatalf("echo %q, want %q", buf, msg)
	}
	c.SetDeadline(time.Time{})
}
