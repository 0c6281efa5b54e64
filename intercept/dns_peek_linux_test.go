package intercept

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"mcpintercept/origin"
)

// TestCheckSNI: the SNI check peeks (the engine later reads every byte from the start), refuses
// another name or none, passes plaintext and a client that says nothing, and assembles a
// ClientHello that arrives a byte at a time.
func TestCheckSNI(t *testing.T) {
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	for _, tt := range []struct {
		name     string
		send     func(c net.Conn)
		mismatch bool
	}{
		{name: "same name", send: hello("mcp.test", false)},
		{name: "same name, upper case and a trailing dot", send: hello("MCP.Test.", false)},
		{name: "same name, one byte per segment", send: hello("mcp.test", true)},
		{name: "another name", send: hello("other.test", false), mismatch: true},
		{name: "another name, one byte per segment", send: hello("other.test", true), mismatch: true},
		{name: "no SNI", send: hello("", false), mismatch: true},
		{name: "plaintext", send: func(c net.Conn) { c.Write([]byte("GET / HTTP/1.1\r\nHost: other.test\r\n\r\n")) }},
		{name: "silent", send: func(c net.Conn) {}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			go tt.send(c)
			s, err := ln.AcceptTCP()
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			// A hang guard, not a timing assertion: a hello that is assembled ends the check at
			// once, however slowly a loaded machine delivers its bytes.
			timeout := time.Minute
			if tt.name == "silent" {
				timeout = 300 * time.Millisecond
			}
			start := time.Now()
			err = checkSNI(s, "198.18.0.1", "mcp.test", timeout, 0)
			if tt.name != "silent" && time.Since(start) >= timeout {
				t.Fatalf("checkSNI waited for its deadline (%v): the hello was not assembled", timeout)
			}
			var me *origin.Refusal
			if tt.mismatch != (errors.As(err, &me) && me.Reason == ReasonSNIMismatch) || (!tt.mismatch && err != nil) {
				t.Fatalf("checkSNI = %v, want mismatch %v", err, tt.mismatch)
			}
			if tt.name == "silent" {
				return
			}
			// Nothing was consumed: the first byte is still there.
			s.SetReadDeadline(time.Now().Add(time.Second))
			b := make([]byte, 1)
			if _, err := io.ReadFull(s, b); err != nil || (b[0] != 0x16 && b[0] != 'G') {
				t.Fatalf("first byte after the check: %x %v", b, err)
			}
		})
	}
}

// hello sends a TLS ClientHello naming sni ("" sends none), at once or one byte per write
// (TCP_NODELAY, so each byte is its own segment). The hello is made first, with nothing waiting
// on a peer or a clock, so a slow scheduler can only deliver it late, never cut it short.
func hello(sni string, oneByte bool) func(net.Conn) {
	return func(c net.Conn) {
		b := clientHello(sni)
		if !oneByte {
			c.Write(b)
			return
		}
		c.(*net.TCPConn).SetNoDelay(true)
		for i := range b {
			if _, err := c.Write(b[i : i+1]); err != nil {
				return
			}
			time.Sleep(100 * time.Microsecond) // pacing so that segments stay apart; nothing depends on it
		}
	}
}

// clientHello is the first flight crypto/tls writes for sni.
func clientHello(sni string) []byte {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	go tls.Client(a, &tls.Config{ServerName: sni, InsecureSkipVerify: true}).Handshake()
	buf := make([]byte, 64<<10)
	n, _ := b.Read(buf)
	return buf[:n]
}
