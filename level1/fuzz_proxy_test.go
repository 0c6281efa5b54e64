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
		// The input picks the route options too, so each of the checks before policy is reached.
		o := Options{HeaderTimeout: 300 * time.Millisecond, IdleTimeout: time.Second, BodyTimeout: 500 * time.Millisecond}
		if len(clientBytes)%2 == 1 {
			o.StrictMCPHeaders = true
		}
		if len(clientBytes)%3 != 0 {
			o.ExpectedHost = "x"
		}
		if len(serverBytes)%2 == 1 {
			o.AllowUpgrade = []string{"websocket", "connect", "h2c"}
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			Proxy(context.Background(), pc, pu, d, &memRecorder{}, o, slog.New(slog.DiscardHandler))
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

// FuzzRedactURI: whatever a name holds, what RedactURI leaves has no query, fragment or userinfo
// in a URI, and non-URI names are untouched.
func FuzzRedactURI(f *testing.F) {
	for _, s := range []string{
		"https://user:pass@host/x?X-Amz-Signature=abc&access_token=def#frag", "get_weather", "mailto:a@b",
		"s3://bucket/key?x=1", "https://u:p/w@h/x", "a:", "file:///a b#c", "x://@", "HTTP://[::1]:80/?#@",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := RedactURI(s)
		if schemeEnd(s) < 0 {
			if got != s {
				t.Fatalf("non-URI %q changed to %q", s, got)
			}
			return
		}
		if strings.ContainsAny(got, "?#") {
			t.Fatalf("RedactURI(%q) = %q keeps a query or fragment", s, got)
		}
		if !strings.HasPrefix(s, got[:schemeEnd(got)+1]) || len(got) > len(s) {
			t.Fatalf("RedactURI(%q) = %q is not a cut of its input", s, got)
		}
		if rest := got[schemeEnd(got)+1:]; strings.HasPrefix(rest, "//") {
			auth := rest[2:]
			if i := strings.IndexByte(auth, '/'); i >= 0 {
				auth = auth[:i]
			}
			if strings.Contains(auth, "@") {
				t.Fatalf("RedactURI(%q) = %q keeps userinfo", s, got)
			}
		}
		if again := RedactURI(got); again != got {
			t.Fatalf("not idempotent: %q → %q → %q", s, got, again)
		}
	})
}
