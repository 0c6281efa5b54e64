package tlsmitm

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"mcpintercept/pki"
)

// newMinter returns pki's minter over a fresh CA in a temporary directory, and a pool trusting it.
func newMinter(t *testing.T) (*pki.Minter, *x509.CertPool) {
	t.Helper()
	ca, err := pki.Init(filepath.Join(t.TempDir(), "ca"), false)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	return pki.NewMinter(ca, pki.MinterOptions{}), pool
}

// acceptOne dials addr's listener with dial (run in its own goroutine) and returns the accepted
// server end together with a channel carrying dial's result.
func acceptOne[T any](t *testing.T, dial func(addr string) T) (net.Conn, <-chan T) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	out := make(chan T, 1)
	go func() { out <- dial(ln.Addr().String()) }()
	ln.(*net.TCPListener).SetDeadline(time.Now().Add(hangGuard))
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, out
}

type clientResult struct {
	conn  *tls.Conn
	err   error
	calls int // certificate verification callbacks run: a certificate reached the client
}

// tlsClient handshakes with cfg and reports the outcome. VerifyConnection counts whether a
// certificate ever reached the client.
func tlsClient(cfg *tls.Config) func(addr string) clientResult {
	return func(addr string) clientResult {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			return clientResult{err: err}
		}
		c.SetDeadline(time.Now().Add(hangGuard))
		var mu sync.Mutex
		calls := 0
		cfg := cfg.Clone()
		cfg.VerifyConnection = func(tls.ConnectionState) error {
			mu.Lock()
			calls++
			mu.Unlock()
			return nil
		}
		tc := tls.Client(c, cfg)
		err = tc.Handshake()
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			c.Close()
			return clientResult{err: err, calls: calls}
		}
		c.SetDeadline(time.Time{})
		return clientResult{conn: tc, calls: calls}
	}
}

// TestTerminate: the client completes its handshake with a leaf pki minted for the name it asked
// for (the SNI, or the destination IP without one), signed by the appliance's CA, speaking
// http/1.1 and at least TLS 1.2; the bytes Peek consumed are replayed so crypto/tls sees the
// whole hello, however much of it was peeked.
func TestTerminate(t *testing.T) {
	minter, pool := newMinter(t)
	tests := []struct {
		name     string
		client   *tls.Config
		peek     func(c net.Conn) ([]byte, string) // consumes from the client; returns bytes and the name to mint for
		wantName string                            // the name the client's leaf must be valid for
		wantVers uint16                            // 0: any >= 1.2
		wantErr  string                            // the client's handshake error, when it must fail
	}{
		{name: "SNI name, hello peeked", client: &tls.Config{ServerName: "mcp.test", NextProtos: []string{"h2", "http/1.1"}},
			peek: peekHello, wantName: "mcp.test"},
		{name: "IP without SNI, hello peeked", client: &tls.Config{ServerName: "127.0.0.1", NextProtos: []string{"http/1.1"}},
			peek: peekHello, wantName: "127.0.0.1"},
		{name: "TLS 1.2 client", client: &tls.Config{ServerName: "mcp.test", MaxVersion: tls.VersionTLS12},
			peek: peekHello, wantName: "mcp.test", wantVers: tls.VersionTLS12},
		{name: "three bytes peeked, the rest still on the wire", client: &tls.Config{ServerName: "mcp.test"},
			peek: func(c net.Conn) ([]byte, string) {
				b := make([]byte, 3)
				io.ReadFull(c, b)
				return b, "mcp.test"
			}, wantName: "mcp.test"},
		{name: "nothing peeked", client: &tls.Config{ServerName: "mcp.test"},
			peek: func(net.Conn) ([]byte, string) { return nil, "mcp.test" }, wantName: "mcp.test"},
		{name: "TLS 1.1 client refused", client: &tls.Config{ServerName: "mcp.test", MinVersion: tls.VersionTLS10, MaxVersion: tls.VersionTLS11},
			peek: peekHello, wantErr: "protocol version"},
		{name: "h2-only client refused", client: &tls.Config{ServerName: "mcp.test", NextProtos: []string{"h2"}},
			peek: peekHello, wantErr: "no application protocol"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := tt.client.Clone()
			cfg.RootCAs = pool
			sc, res := acceptOne(t, tlsClient(cfg))
			sc.SetDeadline(time.Now().Add(hangGuard))
			peeked, name := tt.peek(sc)
			sc.SetDeadline(time.Time{})
			cert, err := minter.Leaf(name)
			if err != nil {
				t.Fatal(err)
			}
			tc, err := Terminate(context.Background(), sc, peeked, cert, hangGuard)
			if tt.wantErr != "" {
				if err == nil {
					t.Fatal("Terminate accepted a client it must refuse")
				}
				if !strings.Contains(err.Error(), "client tls handshake") {
					t.Errorf("err %q lacks its context", err)
				}
				sc.Close()
				r := <-res
				if r.err == nil || !strings.Contains(r.err.Error(), tt.wantErr) {
					t.Fatalf("client error %v, want %q", r.err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Terminate: %v", err)
			}
			defer tc.Close()
			r := <-res
			if r.err != nil {
				t.Fatalf("client handshake: %v", r.err)
			}
			defer r.conn.Close()
			cs := r.conn.ConnectionState()
			leaf := cs.PeerCertificates[0]
			if err := leaf.VerifyHostname(tt.wantName); err != nil {
				t.Errorf("client got a leaf not valid for %q: %v", tt.wantName, err)
			}
			if !bytes.Equal(leaf.Raw, cert.Certificate[0]) {
				t.Errorf("client got leaf %q, not the minted one", leaf.Subject)
			}
			if len(cs.VerifiedChains) == 0 || !cs.VerifiedChains[0][len(cs.VerifiedChains[0])-1].IsCA {
				t.Errorf("the leaf did not chain to the appliance CA")
			}
			if got := tc.ConnectionState().NegotiatedProtocol; slices.Contains(cfg.NextProtos, "http/1.1") && got != "http/1.1" {
				t.Errorf("server ALPN %q, want http/1.1", got)
			}
			if got := tc.ConnectionState().NegotiatedProtocol; !slices.Contains(cfg.NextProtos, "http/1.1") && got != "" {
				t.Errorf("server ALPN %q, want none for a client without ALPN", got)
			}
			if tt.wantVers != 0 && cs.Version != tt.wantVers {
				t.Errorf("version %#04x, want %#04x", cs.Version, tt.wantVers)
			}
			if cs.Version < tls.VersionTLS12 {
				t.Errorf("version %#04x below TLS 1.2", cs.Version)
			}
			// Data flows both ways over the terminated session: nothing of the hello was lost
			// or replayed twice.
			go io.Copy(tc, tc)
			echoCheck(t, r.conn, "GET / HTTP/1.1\r\n\r\n")
		})
	}
}

func peekHello(c net.Conn) ([]byte, string) {
	h, b, err := Peek(c, 0)
	if err != nil {
		return b, ""
	}
	name := h.SNI
	if name == "" {
		name = c.LocalAddr().(*net.TCPAddr).IP.String()
	}
	return b, name
}

// TestRefuseHandshake: a refused client sees a fatal handshake_failure alert at once, before any
// certificate reaches it, whatever TLS version it speaks.
func TestRefuseHandshake(t *testing.T) {
	var buf bytes.Buffer
	if err := RefuseHandshake(&buf); err != nil {
		t.Fatal(err)
	}
	if want := []byte{21, 3, 3, 0, 2, 2, 40}; !bytes.Equal(buf.Bytes(), want) {
		t.Fatalf("wrote % x, want a fatal handshake_failure alert record % x", buf.Bytes(), want)
	}
	tests := []struct {
		name   string
		client *tls.Config
	}{
		{"TLS 1.3 client", &tls.Config{ServerName: "mcp.test", MinVersion: tls.VersionTLS13}},
		{"TLS 1.2 client", &tls.Config{ServerName: "mcp.test", MaxVersion: tls.VersionTLS12}},
		{"client without SNI", &tls.Config{ServerName: "127.0.0.1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, pool := newMinter(t)
			cfg := tt.client.Clone()
			cfg.RootCAs = pool
			sc, res := acceptOne(t, tlsClient(cfg))
			sc.SetDeadline(time.Now().Add(hangGuard))
			if _, _, err := Peek(sc, 0); err != nil {
				t.Fatalf("peek: %v", err)
			}
			if err := RefuseHandshake(sc); err != nil {
				t.Fatal(err)
			}
			// The connection stays open: the client must fail on the alert, not on the close
			// (nor on its deadline: the error below tells which).
			var r clientResult
			select {
			case r = <-res:
			case <-time.After(hangGuard):
				t.Fatal("the client is still waiting after the alert")
			}
			if r.err == nil {
				t.Fatal("the client completed a handshake")
			}
			var oe *net.OpError
			if !errors.As(r.err, &oe) || oe.Op != "remote error" || !strings.Contains(oe.Err.Error(), "handshake failure") {
				t.Fatalf("client error %v (%T), want remote error: tls: handshake failure", r.err, r.err)
			}
			if r.calls != 0 {
				t.Fatalf("a certificate reached the client (%d verification calls)", r.calls)
			}
		})
	}
}

// TestTerminateBadClients: a client that sends garbage, half a hello or nothing gets a clean
// error from Terminate within the timeout, and nothing Terminate started outlives it. No clock is
// read: a client that already failed is judged under a timeout of minutes and must not end on
// it; a silent one under a short timeout must end on exactly that (context.DeadlineExceeded).
func TestTerminateBadClients(t *testing.T) {
	minter, _ := newMinter(t)
	cert, err := minter.Leaf("mcp.test")
	if err != nil {
		t.Fatal(err)
	}
	hello := captureHello(t, &tls.Config{ServerName: "mcp.test"})
	const timeout = 300 * time.Millisecond // only the slow cases reach it

	tests := []struct {
		name    string
		send    []byte // what the client writes
		close   bool   // then closes (else it stays silent and open)
		peeked  []byte // what Peek consumed earlier, replayed by Terminate
		ctx     func(t *testing.T) context.Context
		timeout time.Duration // 0 with slow false: hangGuard
		slow    bool          // the error must come from the timeout (or the context), else from the client
		isErr   error         // errors.Is target, if any
		text    string
	}{
		{name: "garbage", send: []byte("GET / HTTP/1.1\r\nHost: mcp.test\r\n\r\n"), text: "does not look like a TLS handshake"},
		{name: "garbage replayed from the peek", peeked: []byte("SSH-2.0-OpenSSH_9.6\r\n")},
		{name: "oversized record", send: []byte{0x16, 0x03, 0x01, 0xff, 0xff}},
		{name: "half a hello then silence", send: hello[:len(hello)/2], timeout: timeout, slow: true, isErr: context.DeadlineExceeded},
		{name: "half a hello peeked then silence", peeked: hello[:len(hello)/2], timeout: timeout, slow: true, isErr: context.DeadlineExceeded},
		{name: "half a hello then close", send: hello[:len(hello)/2], close: true},
		{name: "nothing", timeout: timeout, slow: true, isErr: context.DeadlineExceeded},
		{name: "nothing then close", close: true, isErr: io.EOF},
		{name: "nothing, bounded by the context", slow: true, isErr: context.DeadlineExceeded,
			ctx: func(t *testing.T) context.Context {
				ctx, cancel := context.WithTimeout(context.Background(), timeout)
				t.Cleanup(cancel)
				return ctx
			}},
	}
	settle(t) // the baseline: nothing of an earlier test still winding down
	base := runtime.NumGoroutine()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			send := func(addr string) net.Conn {
				c, err := net.Dial("tcp", addr)
				if err != nil {
					return nil
				}
				c.Write(tt.send)
				if tt.close {
					c.(*net.TCPConn).CloseWrite()
				}
				return c
			}
			sc, cc := acceptOne(t, send)
			client := <-cc
			if client == nil {
				t.Fatal("dial failed")
			}
			defer client.Close()
			ctx := context.Background()
			if tt.ctx != nil {
				ctx = tt.ctx(t)
			}
			limit := tt.timeout
			if limit == 0 && !tt.slow {
				limit = hangGuard
			}
			tc, err := Terminate(ctx, sc, tt.peeked, cert, limit)
			if err == nil || tc != nil {
				t.Fatal("Terminate completed a handshake")
			}
			if !strings.HasPrefix(err.Error(), "client tls handshake: ") {
				t.Errorf("err %q lacks its context", err)
			}
			if timedOut := errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded); timedOut != tt.slow {
				t.Errorf("err %v: ended by the timeout %v, want %v (a client that already failed is not waited for)", err, timedOut, tt.slow)
			}
			if tt.isErr != nil && !errors.Is(err, tt.isErr) {
				t.Errorf("err %v, want it to wrap %v", err, tt.isErr)
			}
			if tt.text != "" && !strings.Contains(err.Error(), tt.text) {
				t.Errorf("err %q, want %q in it", err, tt.text)
			}
			// The client is not left hanging on a half-open handshake once the caller closes.
			sc.Close()
			client.SetReadDeadline(time.Now().Add(hangGuard))
			if _, err := io.Copy(io.Discard, client); errors.Is(err, os.ErrDeadlineExceeded) {
				t.Errorf("the client's connection was not closed: %v", err)
			}
		})
	}
	if n := settleTo(base); n > base {
		buf := make([]byte, 1<<16)
		t.Fatalf("%d goroutines after the bad clients, %d before:\n%s", n, base, buf[:runtime.Stack(buf, true)])
	}
}

// settleTo waits for the goroutine count to come down to want (hangGuard at most: a leak stays
// above it) and returns it.
func settleTo(want int) int {
	n := runtime.NumGoroutine()
	for deadline := time.Now().Add(hangGuard); n > want && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
		n = runtime.NumGoroutine()
	}
	return n
}

// settle waits for the goroutine count to stop falling and returns it.
func settle(t *testing.T) int {
	t.Helper()
	n := runtime.NumGoroutine()
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
		m := runtime.NumGoroutine()
		if m == n {
			return m
		}
		n = m
	}
	return n
}
