package exchange

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// FuzzProxy drives whole connections through Serve: arbitrary client bytes (requests, garbage,
// truncations, pipelining) against arbitrary upstream bytes, with stages that copy, answer, read
// and replace bodies and events. Serve must never panic and must always return once both peers
// are done, whatever they sent.
func FuzzProxy(f *testing.F) {
	seeds := [][2]string{
		{"POST /mcp HTTP/1.1\r\nHost: x\r\nMcp-Method: tools/call\r\nMcp-Name: echo\r\nContent-Length: 2\r\n\r\n{}",
			"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"},
		{"POST /mcp HTTP/1.1\r\nHost: x\r\nMcp-Name: deny-me\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n",
			"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"},
		{"GET /sse HTTP/1.1\r\nAccept: text/event-stream\r\n\r\n", "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\nevent: endpoint\ndata: /messages\n\n"},
		{"GET / HTTP/1.1\r\nConnection: upgrade\r\nUpgrade: x\r\n\r\nraw", "HTTP/1.1 101 Switching\r\nUpgrade: x\r\n\r\nraw back"},
		{"HEAD / HTTP/1.1\r\n\r\n", "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n"},
		{"\x16\x03\x01garbage", "garbage"},
		{"POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n", ""},
		{"GET / HTTP/1.1\r\nMcp-Name: =?base64?Y2Fm6Q==?=\r\n\r\n", "HTTP/1.1 200 OK\r\n\r\nclose-delimited"},
		{"GET /mcp HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABk\r\n\r\n",
			"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00"},
		{"GET /mcp HTTP/1.1\r\nHost: x\r\nHTTP2-Settings: AAMAAABk\r\n\r\nPRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"},
		{"GET /ws HTTP/1.1\r\nHost: x\r\nConnection: upgrade\r\nUpgrade: WebSocket/13, foo\r\n\r\nGET /ws HTTP/1.1\r\nHost: x\r\nConnection: upgrade\r\nUpgrade: websocket\r\n\r\n\x81\x00",
			"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n\x81\x05hello"},
		{"CONNECT x:443 HTTP/1.1\r\nHost: x:443\r\n\r\nopaque", "HTTP/1.1 200 Connection established\r\n\r\nopaque back"},
		{"POST /mcp HTTP/1.1\r\nHost: X.:80\r\nContent-Type: application/json\r\nAccept: application/json\r\naccept: */*;q=0, text/*\r\nMCP-Protocol-Version: 2025-11-25\r\nMcp-Method: tools/call\r\nMcp-Name: https://u:p@h/r?sig=1#f\r\nContent-Length: 2\r\n\r\n{}",
			"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"},
		{"POST /mcp HTTP/1.1\r\nHost: [::1]:8080\r\nContent-Type: application/vnd.x+json\r\nMcp-Method: a\r\nMcp-Method: b\r\nContent-Length: 100\r\n\r\n{", ""},
	}
	for _, s := range seeds {
		f.Add([]byte(s[0]), []byte(s[1]))
	}
	f.Fuzz(func(t *testing.T, clientBytes, serverBytes []byte) {
		c, pc := tcpPair(t)
		pu, s := tcpPair(t)
		defer c.Close()
		defer s.Close()
		o := Options{HeaderTimeout: 300 * time.Millisecond, IdleTimeout: time.Second, BodyTimeout: 500 * time.Millisecond}
		// The input picks the stages too: header-only (the copy path), or ones that read bodies
		// and events, replace some and abort on others, so every path of the loop is reached.
		stages := []Stage{denyName("deny")}
		switch len(clientBytes) % 4 {
		case 1:
			stages = append(stages, &fuzzBodies{max: int64(len(serverBytes) % 97), overflow: Overflow(len(serverBytes) % 2)})
		case 2:
			stages = append(stages, &fuzzBodies{max: 1 << 20, events: true, replace: len(serverBytes)%2 == 0})
		case 3:
			stages = append(stages, &fuzzBodies{max: 16, events: true, overflow: OverflowForward, replace: true})
		}
		stages = append(stages, doneFunc(func(*Exchange) {}))
		done := make(chan struct{})
		go func() {
			defer close(done)
			Serve(context.Background(), pc, pu, stages, o, slog.New(slog.DiscardHandler))
		}()
		go func() {
			s.SetDeadline(time.Now().Add(3 * time.Second))
			s.Write(serverBytes)
			s.CloseWrite()
			io.Copy(io.Discard, s)
		}()
		c.SetDeadline(time.Now().Add(3 * time.Second))
		c.Write(clientBytes)
		c.CloseWrite()
		io.Copy(io.Discard, c)
		c.Close()
		s.Close()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatalf("Serve did not return after both peers closed (client %q, server %q)", clientBytes, serverBytes)
		}
	})
}

// fuzzBodies asks for bodies (and events), replaces some and aborts on a marker.
type fuzzBodies struct {
	Base
	max      int64
	overflow Overflow
	events   bool
	replace  bool
}

func (b *fuzzBodies) RequestHead(_ context.Context, x *Exchange) Result {
	x.WantRequestBody(b.max)
	x.SetRequestHeader("X-Fuzz", "1")
	return Continue
}

func (b *fuzzBodies) RequestBody(_ context.Context, x *Exchange) Result {
	if bytes.Contains(x.RequestBody(), []byte("abort")) {
		x.Abort("fuzz")
		return Stop
	}
	if b.replace {
		x.SetRequestBody(bytes.ToUpper(x.RequestBody()))
	}
	return Continue
}

func (b *fuzzBodies) ResponseHead(_ context.Context, x *Exchange) Result {
	if b.events {
		x.WantEvents(int(b.max))
	}
	x.WantResponseBody(b.max, b.overflow)
	x.DelResponseHeader("Server")
	return Continue
}

func (b *fuzzBodies) ResponseBody(_ context.Context, x *Exchange) Result {
	if b.replace {
		x.SetResponseBody(append([]byte("x"), x.ResponseBody()...))
	}
	return Continue
}

func (b *fuzzBodies) Event(_ context.Context, x *Exchange, ev *Event) Result {
	switch {
	case ev.Type == "abort":
		x.Abort("fuzz")
		return Stop
	case ev.Type == "drop":
		ev.Drop()
	case b.replace && ev.HasData:
		e := *ev
		e.Data = strings.ToUpper(e.Data)
		ev.Replace(EncodeEvent(e))
	}
	return Continue
}
