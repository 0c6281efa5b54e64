package exchange

import (
	"bytes"
	"context"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// mcpRequest is a Streamable HTTP tools/call as an SDK sends it: ten headers and a small body.
const mcpBody = `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"get_weather","arguments":{"city":"Paris"}}}`

var mcpRequest = "POST /mcp HTTP/1.1\r\n" +
	"Host: mcp.example.com:8080\r\n" +
	"User-Agent: node\r\n" +
	"Accept: application/json, text/event-stream\r\n" +
	"Content-Type: application/json\r\n" +
	"Mcp-Protocol-Version: 2026-07-28\r\n" +
	"Mcp-Method: tools/call\r\n" +
	"Mcp-Name: get_weather\r\n" +
	"Mcp-Session-Id: 5f1c2a9e-4b7d-4e3f-a1c2-0c9d8e7f6a5b\r\n" +
	"Authorization: Bearer eyJhbGciOiJSUzI1NiJ9.payload.signature\r\n" +
	"Content-Length: " + strconv.Itoa(len(mcpBody)) + "\r\n\r\n" + mcpBody

// repeatReader serves the same bytes forever.
type repeatReader struct {
	b   []byte
	off int
}

func (r *repeatReader) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		c := copy(p[n:], r.b[r.off:])
		n += c
		r.off = (r.off + c) % len(r.b)
	}
	return n, nil
}

func BenchmarkReadRequestHead(b *testing.B) {
	r := NewReader(&repeatReader{b: []byte(mcpRequest)}, Limits{})
	b.ReportAllocs()
	b.SetBytes(int64(len(mcpRequest)))
	for b.Loop() {
		h, err := r.ReadRequestHead()
		if err != nil {
			b.Fatal(err)
		}
		if _, err := r.CopyBody(io.Discard, h); err != nil {
			b.Fatal(err)
		}
	}
}

var mcpResponse = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 62\r\n\r\n" +
	`{"jsonrpc":"2.0","id":7,"result":{"content":[],"isError":false}}`[:62]

// serveFixed answers every request on c with mcpResponse, until c closes.
func serveFixed(c net.Conn) {
	r := NewReader(c, Limits{})
	for {
		h, err := r.ReadRequestHead()
		if err != nil {
			return
		}
		if _, err := r.CopyBody(io.Discard, h); err != nil {
			return
		}
		if _, err := io.WriteString(c, mcpResponse); err != nil {
			return
		}
	}
}

// roundTrips runs b.N keep-alive request/response round trips on c.
func roundTrips(b *testing.B, c net.Conn) {
	req := []byte(mcpRequest)
	resp := make([]byte, len(mcpResponse))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Write(req); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(c, resp); err != nil {
			b.Fatal(err)
		}
	}
	if !bytes.Equal(resp, []byte(mcpResponse)) {
		b.Fatalf("response %q", resp)
	}
}

// BenchmarkProxyRequest is one keep-alive round trip through Serve (copy mode) on loopback; compare it with
// BenchmarkDirectRequest (no proxy) and BenchmarkL4RelayRequest (a plain byte relay).
func BenchmarkProxyRequest(b *testing.B) {
	c, pc := tcpPair(b)
	pu, s := tcpPair(b)
	go serveFixed(s)
	done := make(chan struct{})
	go func() {
		defer close(done)
		Serve(context.Background(), pc, pu, nil, Options{}, nil)
	}()
	roundTrips(b, c)
	c.Close()
	<-done
	s.Close()
}

// BenchmarkProxyRequestWithPolicy adds a stage that reads a header and may answer, and one that
// counts every exchange in Done, as production's Level 1 stages do.
func BenchmarkProxyRequestWithPolicy(b *testing.B) {
	c, pc := tcpPair(b)
	pu, s := tcpPair(b)
	go serveFixed(s)
	var n int
	var mu sync.Mutex
	stages := []Stage{denyName("rm"), doneFunc(func(*Exchange) { mu.Lock(); n++; mu.Unlock() })}
	done := make(chan struct{})
	go func() {
		defer close(done)
		Serve(context.Background(), pc, pu, stages, Options{IdleTimeout: 60e9}, nil)
	}()
	roundTrips(b, c)
	c.Close()
	<-done
	s.Close()
}

func BenchmarkDirectRequest(b *testing.B) {
	c, s := tcpPair(b)
	go serveFixed(s)
	roundTrips(b, c)
	c.Close()
}

func BenchmarkL4RelayRequest(b *testing.B) {
	c, pc := tcpPair(b)
	pu, s := tcpPair(b)
	go serveFixed(s)
	go func() { io.Copy(pu, pc); pu.CloseWrite() }()
	go func() { io.Copy(pc, pu); pc.Close() }()
	roundTrips(b, c)
	c.Close()
	s.Close()
}

func BenchmarkSSE(b *testing.B) {
	ev := "event: message\nid: 17\ndata: " + `{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"p-42","progress":3,"total":10}}` + "\n\n"
	stream := []byte(strings.Repeat(ev, 64))
	b.SetBytes(int64(len(stream)))
	b.ReportAllocs()
	for b.Loop() {
		p := NewSSEParser(0)
		// Reads of 1 KiB, as a socket would deliver a busy stream.
		n := 0
		for i := 0; i < len(stream); i += 1024 {
			evs, err := p.Feed(stream[i:min(i+1024, len(stream))])
			if err != nil {
				b.Fatal(err)
			}
			n += len(evs)
		}
		if n != 64 {
			b.Fatalf("%d events", n)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*64), "ns/event")
}
