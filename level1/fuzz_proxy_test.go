package level1

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// FuzzProxy drives whole connections through Proxy: arbitrary client bytes (requests, garbage,
// truncations, pipelining) against arbitrary upstream bytes. Proxy must never panic and must
// always return once both peers are done, whatever they sent.
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
	}
	for _, s := range seeds {
		f.Add([]byte(s[0]), []byte(s[1]))
	}
	d := deciderFunc(func(ctx context.Context, info *RequestInfo) Verdict {
		if strings.HasPrefix(info.MCPName, "deny") {
			return Verdict{Action: ActionDeny, Reason: "fuzz"}
		}
		return Verdict{Action: ActionAllow}
	})
	f.Fuzz(func(t *testing.T, clientBytes, serverBytes []byte) {
		c, pc := tcpPair(t)
		pu, s := tcpPair(t)
		defer c.Close()
		defer s.Close()
		done := make(chan struct{})
		go func() {
			defer close(done)
			Proxy(context.Background(), pc, pu, d, &memRecorder{},
				Options{HeaderTimeout: 300 * time.Millisecond, IdleTimeout: time.Second}, slog.New(slog.DiscardHandler))
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
			t.Fatalf("Proxy did not return after both peers closed (client %q, server %q)", clientBytes, serverBytes)
		}
	})
}
