package flowconn

import (
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
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// tcpPair is a connected pair of TCP connections on loopback: a is the one the appliance wraps,
// b is the peer.
func tcpPair(t *testing.T) (a, b *net.TCPConn) {
	t.Helper()
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := make(chan *net.TCPConn, 1)
	go func() {
		c, err := ln.AcceptTCP()
		if err != nil {
			close(done)
			return
		}
		done <- c
	}()
	b, err = net.DialTCP("tcp", nil, ln.Addr().(*net.TCPAddr))
	if err != nil {
		t.Fatal(err)
	}
	a = <-done
	if a == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	deadline := time.Now().Add(10 * time.Second)
	a.SetDeadline(deadline)
	b.SetDeadline(deadline)
	return a, b
}

func selfSigned(t *testing.T) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "flowconn.test"},
		DNSNames: []string{"flowconn.test"}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// tlsPair runs a TLS handshake over a TCP pair: the appliance's side (server) is wrapped as the
// engine wraps a terminated client, the peer is a plain crypto/tls client. raw is the peer's
// socket, to see what reaches TCP under TLS.
func tlsPair(t *testing.T) (w *Conn, peer *tls.Conn, raw *net.TCPConn) {
	t.Helper()
	a, b := tcpPair(t)
	cert := selfSigned(t)
	srv := tls.Server(a, &tls.Config{Certificates: []tls.Certificate{cert}})
	cli := tls.Client(b, &tls.Config{InsecureSkipVerify: true})
	errc := make(chan error, 1)
	go func() { errc <- srv.Handshake() }()
	if err := cli.Handshake(); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	return Wrap(srv, Options{TCP: a}), cli, b
}

// TestHalfClose: CloseWrite on the wrapper ends the peer's reading side (a FIN on a plain
// socket; over TLS a close_notify and then the FIN under it) while the reverse direction stays
// open.
func TestHalfClose(t *testing.T) {
	t.Run("plain", func(t *testing.T) {
		a, b := tcpPair(t)
		w := Wrap(a, Options{Prefix: []byte("x")})
		if _, err := w.Write([]byte("last")); err != nil {
			t.Fatal(err)
		}
		if err := w.CloseWrite(); err != nil {
			t.Fatalf("CloseWrite: %v", err)
		}
		got, err := io.ReadAll(b)
		if err != nil || string(got) != "last" {
			t.Fatalf("peer read %q, %v; want \"last\" then EOF", got, err)
		}
		reverseOpen(t, b, w)
	})
	t.Run("tls", func(t *testing.T) {
		w, peer, raw := tlsPair(t)
		if _, err := w.Write([]byte("last")); err != nil {
			t.Fatal(err)
		}
		if err := w.CloseWrite(); err != nil {
			t.Fatalf("CloseWrite: %v", err)
		}
		got, err := io.ReadAll(peer)
		if err != nil || string(got) != "last" {
			t.Fatalf("peer read %q, %v; want \"last\" then close_notify", got, err)
		}
		// The FIN reached the socket under TLS: a read of the raw socket ends at once.
		raw.SetReadDeadline(time.Now().Add(2 * time.Second))
		if n, err := raw.Read(make([]byte, 1)); n != 0 || err != io.EOF {
			t.Fatalf("raw read under TLS: %d, %v; want EOF (FIN)", n, err)
		}
		raw.SetReadDeadline(time.Now().Add(10 * time.Second))
		reverseOpen(t, peer, w)
	})
}

// reverseOpen checks that the peer can still send after the wrapper's half-close.
func reverseOpen(t *testing.T, peer io.Writer, w *Conn) {
	t.Helper()
	if _, err := peer.Write([]byte("reply")); err != nil {
		t.Fatalf("peer write after half-close: %v", err)
	}
	buf := make([]byte, 16)
	got := ""
	for !strings.HasSuffix(got, "reply") && len(got) < 16 {
		n, err := w.Read(buf)
		got += string(buf[:n])
		if err != nil {
			break
		}
	}
	if got != "reply" && got != "xreply" { // the plain case's prefix comes first
		t.Fatalf("read %q after half-close, want the peer's reply", got)
	}
}

// TestReset: SetLinger(0) then Close on the wrapper is a reset for the peer, plain or under TLS
// (no close_notify that the peer would read as a clean end first).
func TestReset(t *testing.T) {
	check := func(t *testing.T, w *Conn, peer io.Reader) {
		t.Helper()
		if err := w.SetLinger(0); err != nil {
			t.Fatalf("SetLinger: %v", err)
		}
		w.Close()
		_, err := io.ReadAll(peer)
		if !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("peer read ended with %v, want a reset", err)
		}
	}
	t.Run("plain", func(t *testing.T) {
		a, b := tcpPair(t)
		check(t, Wrap(a, Options{}), b)
	})
	t.Run("tls", func(t *testing.T) {
		w, peer, _ := tlsPair(t)
		check(t, w, peer)
	})
}

// TestPrefix: the prefix is read first, in reads of any size, then the connection's bytes, and
// the wrapper holds no reference to it afterwards.
func TestPrefix(t *testing.T) {
	a, b := tcpPair(t)
	w := Wrap(a, Options{Prefix: []byte("GET / HT")})
	b.Write([]byte("TP/1.1\r\n"))
	buf := make([]byte, 3)
	var got []byte
	for len(got) < 16 {
		n, err := w.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, buf[:n]...)
		if len(got) == 8 && w.prefix != nil {
			t.Fatal("prefix still held after it was read")
		}
	}
	if string(got) != "GET / HTTP/1.1\r\n" {
		t.Fatalf("read %q", got)
	}
	if w.prefix != nil {
		t.Fatal("prefix still held")
	}
	if Wrap(a, Options{Prefix: []byte{}}).prefix != nil {
		t.Fatal("an empty prefix is kept")
	}
}

// TestActivity: reads and writes that move bytes update the activity time; nothing else does.
func TestActivity(t *testing.T) {
	a, b := tcpPair(t)
	var last atomic.Int64
	w := Wrap(a, Options{Prefix: []byte("p"), Activity: &last})
	step := func(what string, f func()) {
		t.Helper()
		before := last.Load()
		time.Sleep(2 * time.Millisecond)
		f()
		if last.Load() <= before {
			t.Fatalf("%s did not update the activity time", what)
		}
	}
	step("prefix read", func() { w.Read(make([]byte, 4)) })
	step("write", func() { w.Write([]byte("x")) })
	b.Write([]byte("y"))
	step("read", func() { w.Read(make([]byte, 4)) })
	before := last.Load()
	w.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
	if _, err := w.Read(make([]byte, 4)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read: %v, want a timeout", err)
	}
	if last.Load() != before {
		t.Fatal("a read that moved nothing updated the activity time")
	}
}

// TestSyscallConn: a reader can wait on the socket of a plain wrapper (a prefix left to replay
// counts as readable at once), never on a TLS one, whose bytes are not the socket's.
func TestSyscallConn(t *testing.T) {
	a, b := tcpPair(t)
	w := Wrap(a, Options{Prefix: []byte("p")})
	var sc syscall.Conn = w
	rc, err := sc.SyscallConn()
	if err != nil {
		t.Fatalf("plain: %v", err)
	}
	called := false
	if err := rc.Read(func(uintptr) bool { called = true; return true }); err != nil || called {
		t.Fatalf("with a prefix pending: err %v, waited on the socket %v; want readable at once", err, called)
	}
	w.Read(make([]byte, 1))
	b.Write([]byte("q"))
	if err := rc.Read(func(uintptr) bool { called = true; return true }); err != nil || !called {
		t.Fatalf("after the prefix: err %v, waited on the socket %v", err, called)
	}
	// Nested: the outer wrapper of a plain one still reaches the socket.
	if _, err := Wrap(w, Options{}).SyscallConn(); err != nil {
		t.Fatalf("nested plain: %v", err)
	}

	tw, _, _ := tlsPair(t)
	if _, err := tw.SyscallConn(); err == nil {
		t.Fatal("a TLS wrapper exposed its socket for waiting")
	}
}
