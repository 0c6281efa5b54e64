package engine

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"mcpintercept/inventory"
	"mcpintercept/telemetry"
)

// headSpy is a HeadObserver that keeps what it is shown.
type headSpy struct {
	more func([]byte) bool
	mu   sync.Mutex
	got  [][]byte
	recs []telemetry.FlowRecord
	seen chan struct{}
}

func (s *headSpy) More(b []byte) bool { return s.more(b) }

func (s *headSpy) Head(rec func() telemetry.FlowRecord, b []byte) {
	s.mu.Lock()
	s.got = append(s.got, append([]byte(nil), b...))
	s.recs = append(s.recs, rec())
	s.mu.Unlock()
	s.seen <- struct{}{}
}

// TestOpaqueHeadBytes: with an observer that always wants more, an opaque flow's first reads go
// through user space: every byte still arrives once and in order, the FIN is passed on, the
// record counts them all, and the observer is shown a prefix of what the client sent.
func TestOpaqueHeadBytes(t *testing.T) {
	const upN, downN = 4 << 20, 1 << 20
	got := make(chan [32]byte, 1)
	up := upstreamServer(t, func(c *net.TCPConn) {
		defer c.Close()
		h := sha256.New()
		io.Copy(h, c) // until the proxied FIN
		var sum [32]byte
		copy(sum[:], h.Sum(nil))
		got <- sum
		writeRandom(c, downN, 4)
		c.CloseWrite()
	})
	spy := &headSpy{more: func([]byte) bool { return true }, seen: make(chan struct{}, 1)}
	h := newHarnessWith(t, up, Limits{IdleTimeout: time.Minute}, nil, func(o *Options) { o.OpaqueHead = spy })
	c, err := net.Dial("tcp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sent := writeRandom(c, upN, 3)
	c.(*net.TCPConn).CloseWrite()
	n, _ := io.Copy(io.Discard, c)
	if n != downN {
		t.Fatalf("read back %d bytes, want %d", n, downN)
	}
	if sum := <-got; sum != sent {
		t.Fatal("the upstream got other bytes than the client sent")
	}
	rec := h.sink.next(t)
	if rec.BytesUp != upN || rec.BytesDown != downN {
		t.Fatalf("record counts %d up, %d down; want %d, %d", rec.BytesUp, rec.BytesDown, upN, downN)
	}
	<-spy.seen
	head := spy.got[0]
	if len(head) == 0 || len(head) > OpaqueHeadMax || !bytes.Equal(head, randomBytes(upN, 3)[:len(head)]) {
		t.Fatalf("the observer was shown %d bytes, not a prefix of the stream (at most %d)", len(head), OpaqueHeadMax)
	}
	if r := spy.recs[0]; r.OrigDst != up || r.Client != c.LocalAddr().String() || r.TLS != string(Plaintext) {
		t.Fatalf("the observer's record: %+v", r)
	}
}

// TestOpaqueHeadServerFirst: a server that speaks first still does while the observer waits for
// the client's first bytes (the tap reads only the client's direction).
func TestOpaqueHeadServerFirst(t *testing.T) {
	up := upstreamServer(t, func(c *net.TCPConn) {
		defer c.Close()
		io.WriteString(c, "220 hello\r\n")
		line, _ := bufio.NewReader(c).ReadString('\n')
		io.WriteString(c, "250 "+line)
	})
	spy := &headSpy{more: inventory.More, seen: make(chan struct{}, 1)}
	h := newHarnessWith(t, up, Limits{IdleTimeout: time.Minute}, nil, func(o *Options) { o.OpaqueHead = spy })
	c, err := net.Dial("tcp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	if l, err := r.ReadString('\n'); err != nil || l != "220 hello\r\n" {
		t.Fatalf("greeting %q, %v", l, err)
	}
	io.WriteString(c, "EHLO x\r\n")
	if l, err := r.ReadString('\n'); err != nil || l != "250 EHLO x\r\n" {
		t.Fatalf("answer %q, %v", l, err)
	}
	<-spy.seen
	if string(spy.got[0]) != "EHLO x\r\n" {
		t.Fatalf("the observer was shown %q", spy.got[0])
	}
}

// TestOpaqueHeadInventory: an MCP initialize over a flow no route inspects is answered as
// usual and shows up in the inventory as an uncovered server.
func TestOpaqueHeadInventory(t *testing.T) {
	srv := upstreamServer(t, func(c *net.TCPConn) {
		defer c.Close()
		br := bufio.NewReader(c)
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		io.Copy(io.Discard, req.Body)
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}")
	})
	inv := inventory.New(inventory.Limits{})
	h := newHarnessWith(t, srv, Limits{IdleTimeout: time.Minute}, nil, func(o *Options) { o.OpaqueHead = inv })
	body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`
	req, _ := http.NewRequest("POST", "http://"+srv+"/mcp", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	tr := &http.Transport{Dial: func(string, string) (net.Conn, error) { return net.Dial("tcp", h.addr) }}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	h.sink.next(t) // the flow's record: written after the observer saw the head
	snap := inv.Snapshot()
	if len(snap.Servers) != 1 {
		t.Fatalf("inventory %+v, want one server", snap.Servers)
	}
	s := snap.Servers[0]
	if s.Destination != srv || s.Path != "/mcp" || s.Covered || s.Level != 0 || s.Host != "" ||
		strings.Join(s.Versions, ",") != "2025-06-18" || strings.Join(s.Methods, ",") != "initialize" ||
		strings.Join(s.Clients, ",") != "127.0.0.1" {
		t.Fatalf("inventory entry %+v", s)
	}
}
