package inventory

import (
	"fmt"
	"strings"
	"testing"
)

const initBody = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"c","version":"1"}}}`

func post(headers, body string) string {
	return "POST /mcp?x=1 HTTP/1.1\r\nHost: Srv.Example:3010\r\n" + headers + "\r\n" + body
}

func TestRecognise(t *testing.T) {
	for _, c := range []struct {
		name, in string
		ok       bool
		want     Head
	}{
		{"streamable initialize", post("Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n", initBody), true,
			Head{Method: "POST", Path: "/mcp", Host: "srv.example", Version: "2025-06-18", MCPMethod: "initialize", Why: "accept"}},
		{"json-rpc body only", post("Content-Type: application/json\r\n", initBody), true,
			Head{Method: "POST", Path: "/mcp", Host: "srv.example", Version: "2025-06-18", MCPMethod: "initialize", Why: "json-rpc initialize"}},
		{"batch", post("Content-Type: application/json\r\n", `[{"jsonrpc":"2.0","id":2,"method":"tools/list"}]`), true,
			Head{Method: "POST", Path: "/mcp", Host: "srv.example", MCPMethod: "tools/list", Why: "json-rpc tools/list"}},
		{"body cut short", post("Content-Type: application/json\r\n", initBody[:70]), true,
			Head{Method: "POST", Path: "/mcp", Host: "srv.example", MCPMethod: "initialize", Why: "json-rpc initialize"}},
		{"chunked body", post("Transfer-Encoding: chunked\r\nContent-Type: application/json\r\n", "40\r\n"+`{"jsonrpc":"2.0","method":"notifications/initialized"}`), true,
			Head{Method: "POST", Path: "/mcp", Host: "srv.example", MCPMethod: "notifications/initialized", Why: "json-rpc notifications/initialized"}},
		{"session header on a GET", "GET /mcp HTTP/1.1\r\nHost: [fd00::2]:80\r\nMcp-Session-Id: s\r\nMCP-Protocol-Version: 2025-11-25\r\n\r\n", true,
			Head{Method: "GET", Path: "/mcp", Host: "fd00::2", Version: "2025-11-25", Why: "header Mcp-Session-Id"}},
		{"version header", "DELETE /x HTTP/1.1\r\nmcp-protocol-version: 2025-06-18\r\n\r\n", true,
			Head{Method: "DELETE", Path: "/x", Version: "2025-06-18", Why: "header MCP-Protocol-Version"}},
		{"method header", post("Mcp-Method: tools/call\r\n", ""), true,
			Head{Method: "POST", Path: "/mcp", Host: "srv.example", MCPMethod: "tools/call", Why: "header Mcp-Method"}},
		{"absolute-form target", "POST http://h/a/mcp HTTP/1.1\r\nMcp-Session-Id: s\r\n\r\n", true,
			Head{Method: "POST", Path: "/a/mcp", Why: "header Mcp-Session-Id"}},
		{"headers cut short keep what came", "POST /mcp HTTP/1.1\r\nMcp-Session-Id: s\r\nAcc", true,
			Head{Method: "POST", Path: "/mcp", Why: "header Mcp-Session-Id"}},

		{"plain JSON API", post("Content-Type: application/json\r\nAccept: */*\r\n", `{"query":"x"}`), false, Head{}},
		{"JSON-RPC, not MCP", post("Content-Type: application/json\r\n", `{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber"}`), false, Head{}},
		{"method without jsonrpc", post("Content-Type: application/json\r\n", `{"id":1,"method":"initialize"}`), false, Head{}},
		{"nested method", post("Content-Type: application/json\r\n", `{"jsonrpc":"2.0","params":{"method":"initialize"}}`), false, Head{}},
		{"form body", post("Content-Type: application/x-www-form-urlencoded\r\n", initBody), false, Head{}},
		{"accept wildcards", post("Content-Type: application/json\r\nAccept: */*, text/*\r\n", `{}`), false, Head{}},
		{"GET with accept", "GET /sse HTTP/1.1\r\nAccept: application/json, text/event-stream\r\n\r\n", false, Head{}},
		{"TLS", "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", false, Head{}},
		{"SSH", "SSH-2.0-OpenSSH_9.6\r\n", false, Head{}},
		{"HTTP/2 preface", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", false, Head{}},
		{"request line only, cut", "POST /mcp HTTP/1.", false, Head{}},
		{"lower-case method", "post /mcp HTTP/1.1\r\nMcp-Session-Id: s\r\n\r\n", false, Head{}},
		{"empty", "", false, Head{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			h, ok := Recognise([]byte(c.in))
			if ok != c.ok {
				t.Fatalf("ok %v, want %v (%+v)", ok, c.ok, h)
			}
			if ok && h != c.want {
				t.Fatalf("got  %+v\nwant %+v", h, c.want)
			}
		})
	}
}

func TestMore(t *testing.T) {
	full := post(fmt.Sprintf("Content-Type: application/json\r\nContent-Length: %d\r\n", len(initBody)), initBody)
	for _, c := range []struct {
		in   string
		want bool
	}{
		{"", true}, // nothing yet (the engine reads once anyway)
		{"PO", true},
		{"GE", true},
		{"\x16\x03", false},
		{"SSH-2.0", false},
		{"PUT /x HTTP/1.1\r\n", false},
		{"POST /mcp HTTP/1.1\r\nHost: x\r\n", true},            // the headers go on
		{"GET /mcp HTTP/1.1\r\nHost: x\r\n\r\n", false},        // no body to wait for
		{"POST /mcp HTTP/1.1\r\nHost: x\r\n\r\n", false},       // no body announced
		{post("Content-Length: 150\r\n", ""), true},            // the body has not begun
		{post("Content-Length: 150\r\n", initBody[:50]), true}, // nor is it all there
		{full, false},
		{post("Content-Length: 99999999999999999999\r\n", strings.Repeat("x", 1024)), false}, // enough of it
		{post("Transfer-Encoding: chunked\r\n", "5\r\n"), true},
		{strings.Repeat("POST ", MaxHead/5+1), false}, // full
	} {
		if got := More([]byte(c.in)); got != c.want {
			t.Errorf("More(%q): %v, want %v", c.in, got, c.want)
		}
	}
}

// FuzzRecognise: any bytes are read without panic, within MaxHead, and what is recognised has a
// method Recognise reads, a reason, and fields within their bounds.
func FuzzRecognise(f *testing.F) {
	f.Add([]byte(post("Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n", initBody)))
	f.Add([]byte("GET /mcp HTTP/1.1\r\nMcp-Session-Id: s\r\n\r\n"))
	f.Add([]byte(post("Transfer-Encoding: chunked\r\n", "5\r\n[{\"jsonrpc\":\"2.0\",\"method\":\"ping\"")))
	f.Add([]byte("\x16\x03\x01\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		More(b)
		h, ok := Recognise(b)
		if !ok {
			return
		}
		if h.Why == "" || (h.Method != "POST" && h.Method != "GET" && h.Method != "DELETE") {
			t.Fatalf("recognised %+v", h)
		}
		if len(h.Host) > maxField || len(h.Path) > maxField || len(h.MCPMethod) > maxField || len(h.Version) > maxVersion {
			t.Fatalf("fields past their bounds: %+v", h)
		}
		if len(b) > MaxHead {
			if h2, ok2 := Recognise(b[:MaxHead]); !ok2 || h2 != h {
				t.Fatalf("bytes past MaxHead changed the answer: %+v, %+v", h, h2)
			}
		}
	})
}
