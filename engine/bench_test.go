package engine

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// BenchmarkRoundTrip1KiB: 1 KiB request, 1 KiB response on one connection, directly and through
// the engine (splice relay) on loopback. The ratio of the two is the relay's cost per round trip.
func BenchmarkRoundTrip1KiB(b *testing.B) {
	up := upstreamServerB(b)
	for _, mode := range []string{"direct", "engine"} {
		b.Run(mode, func(b *testing.B) {
			addr := up
			if mode == "engine" {
				h := newHarness(b, up, Limits{IdleTimeout: time.Minute})
				addr = h.addr
			}
			c, err := net.Dial("tcp", addr)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			msg := make([]byte, 1024)
			buf := make([]byte, 1024)
			b.SetBytes(2048)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := c.Write(msg); err != nil {
					b.Fatal(err)
				}
				if _, err := io.ReadFull(c, buf); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func upstreamServerB(b *testing.B) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); io.Copy(c, c) }()
		}
	}()
	return ln.Addr().String()
}

// BenchmarkLevel1RoundTrip: keep-alive HTTP requests (1 KiB JSON-RPC body, 1 KiB answer) through
// a plaintext Level 1 route on loopback: the path that runs through the flowconn wrappers.
func BenchmarkLevel1RoundTrip(b *testing.B) {
	body := `{"jsonrpc":"2.0","id":1,"result":{"pad":"` + strings.Repeat("x", 1000) + `"}}`
	resp := "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
	up := upstreamServer(b, func(c *net.TCPConn) {
		defer c.Close()
		br := bufio.NewReader(c)
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			io.Copy(io.Discard, req.Body)
			if _, err := io.WriteString(c, resp); err != nil {
				return
			}
		}
	})
	h := newRoutedHarness(b, up, Limits{IdleTimeout: time.Minute},
		&Routing{Routes: []*Route{{Name: "l1", TLS: Plaintext, Level: 1, Development: true}}})
	c, err := net.Dial("tcp", h.addr)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	reqBody := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"pad":"` + strings.Repeat("y", 900) + `"}}}`
	req := "POST /mcp HTTP/1.1\r\nHost: mcp.test\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n" +
		"Mcp-Method: tools/call\r\nMcp-Name: echo\r\nMCP-Protocol-Version: 2026-07-28\r\nContent-Length: " + strconv.Itoa(len(reqBody)) + "\r\n\r\n" + reqBody
	br := bufio.NewReader(c)
	b.SetBytes(int64(len(req) + len(resp)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := io.WriteString(c, req); err != nil {
			b.Fatal(err)
		}
		r, err := http.ReadResponse(br, nil)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, r.Body)
		r.Body.Close()
	}
}
