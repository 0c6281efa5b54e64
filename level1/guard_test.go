package level1

import (
	"bufio"
	"context"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"
)

// assertUsable sends an allowed request after a refusal and checks that it, and only it, reaches
// the upstream: the refused request never left, and the connection is still HTTP.
func assertUsable(t *testing.T, e *env, br *bufio.Reader) {
	t.Helper()
	next := mcpPost("ping", "x", "{}")
	if strings.Contains(next, "Mcp-Method") {
		next = strings.Replace(next, "Content-Type", "MCP-Protocol-Version: 2026-07-28\r\nContent-Type", 1)
	}
	write(t, e.client, next)
	if got := readN(t, e.server, len(next)); string(got) != next {
		t.Fatalf("upstream got %q, want only the next request", got)
	}
	write(t, e.server, okResponse("next"))
	if resp, body := readResponse(t, br, e.client, "POST"); resp.StatusCode != 200 || body != "next" {
		t.Fatalf("next: %d %q", resp.StatusCode, body)
	}
}

// TestProxyUpgradeRefused: "Upgrade/CONNECT on a route with awareness ≥ 1 is refused unless the
// route allows that protocol (after a 101 nothing can be judged)" (DESIGN.md); issue 8 case 1: a
// client that switches to h2c sends tools/call on an HTTP/2 stream Level 1 never sees. h2c is
// refused even when listed.
func TestProxyUpgradeRefused(t *testing.T) {
	tests := []struct {
		name   string
		allow  []string
		req    string
		method string
		reason string
	}{
		{name: "websocket not allowed", req: "GET /ws HTTP/1.1\r\nHost: s\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
			reason: "protocol upgrade to websocket is not allowed on this route"},
		{name: "h2c upgrade, even when listed", allow: []string{"h2c", "websocket"},
			req:    "GET /mcp HTTP/1.1\r\nHost: s\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n\r\n",
			reason: "protocol upgrade to h2c is never allowed"},
		{name: "h2c the way Go's h2c handler accepts it (no Connection: upgrade)", allow: []string{"websocket"},
			req:    "GET /mcp HTTP/1.1\r\nHost: s\r\nConnection: HTTP2-Settings\r\nUpgrade: H2C\r\n\r\n",
			reason: "h2c"},
		{name: "HTTP2-Settings without Upgrade is an h2c attempt", allow: []string{"websocket"},
			req:    "GET /mcp HTTP/1.1\r\nHost: s\r\nHTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n\r\n",
			reason: "h2c"},
		{name: "h2c behind an allowed protocol", allow: []string{"websocket"},
			req:    "GET /mcp HTTP/1.1\r\nHost: s\r\nConnection: upgrade\r\nUpgrade: websocket, h2c\r\n\r\n",
			reason: "h2c"},
		{name: "second Upgrade line names another protocol", allow: []string{"websocket"},
			req:    "GET /ws HTTP/1.1\r\nHost: s\r\nConnection: upgrade\r\nUpgrade: WebSocket/13\r\nUpgrade: foo/2\r\n\r\n",
			reason: "protocol upgrade to foo is not allowed"},
		{name: "empty Upgrade", allow: []string{"websocket"},
			req:    "GET /ws HTTP/1.1\r\nHost: s\r\nConnection: upgrade\r\nUpgrade: \r\n\r\n",
			reason: "protocol upgrade without a protocol"},
		{name: "CONNECT not allowed", allow: []string{"websocket"},
			req: "CONNECT mcp.example:443 HTTP/1.1\r\nHost: mcp.example:443\r\n\r\n", method: "CONNECT",
			reason: "CONNECT is not allowed on this route"},
		{name: "h2c upgrade on a POST carrying tools/call: the body is discarded, not forwarded",
			req: "POST /mcp HTTP/1.1\r\nHost: s\r\nContent-Type: application/json\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AA\r\nContent-Length: 52\r\n\r\n" +
				`{"jsonrpc":"2.0","id":1,"method":"tools/call","a":1}`,
			method: "POST", reason: "h2c"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			called := false
			d := deciderFunc(func(context.Context, *RequestInfo) Verdict { called = true; return Verdict{Action: ActionAllow} })
			e := newEnv(t, d, Options{AllowUpgrade: tt.allow})
			write(t, e.client, tt.req)
			br := bufio.NewReader(e.client)
			method := tt.method
			if method == "" {
				method = "GET"
			}
			resp, body := readResponse(t, br, e.client, method)
			if resp.StatusCode != 403 || !strings.Contains(body, tt.reason) || resp.Close {
				t.Fatalf("got %d %q close=%v; want 403 naming %q, connection kept", resp.StatusCode, body, resp.Close, tt.reason)
			}
			if called {
				t.Error("the Decider was asked about a refused protocol switch")
			}
			assertUsable(t, e, br)
			e.client.Close()
			e.wait(t)
			recs := e.rec.all()
			if len(recs) != 2 || recs[0].Verdict.Action != ActionDeny || recs[0].Status != 403 ||
				!strings.Contains(recs[0].Verdict.Reason, tt.reason) || recs[0].Upgraded != "" {
				t.Errorf("records %+v", recs)
			}
		})
	}
}

// TestProxyH2CPriorKnowledge: the HTTP/2 connection preface is refused with 400, never forwarded.
func TestProxyH2CPriorKnowledge(t *testing.T) {
	e := newEnv(t, nil, Options{AllowUpgrade: []string{"h2c"}})
	write(t, e.client, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x12\x04\x00\x00\x00\x00\x00")
	resp, body := readResponse(t, bufio.NewReader(e.client), e.client, "GET")
	if resp.StatusCode != 400 || !strings.Contains(body, "h2c") || !resp.Close {
		t.Fatalf("got %d %q close=%v", resp.StatusCode, body, resp.Close)
	}
	expectEOF(t, e.client)
	e.server.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	if n, _ := e.server.Read(make([]byte, 1)); n != 0 {
		t.Error("the upstream received the preface")
	}
}

// TestProxyUpgradeAllowed: an allowed switch goes through and its record says which protocol; a
// switch the client did not ask for (or to another protocol) ends the connection instead.
func TestProxyUpgradeAllowed(t *testing.T) {
	tests := []struct {
		name     string
		allow    []string
		req      string
		method   string
		resp     string
		upgraded string // "" = the proxy must close instead of switching
	}{
		{name: "websocket with version", allow: []string{"websocket"},
			req:  "GET /ws HTTP/1.1\r\nHost: s\r\nConnection: Upgrade\r\nUpgrade: WebSocket/13\r\n\r\n",
			resp: "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n", upgraded: "websocket"},
		{name: "connect", allow: []string{"connect"}, method: "CONNECT",
			req:  "CONNECT mcp.example:443 HTTP/1.1\r\nHost: mcp.example:443\r\n\r\n",
			resp: "HTTP/1.1 200 Connection Established\r\n\r\n", upgraded: "connect"},
		{name: "server switches to a protocol not asked for", allow: []string{"websocket"},
			req:  "GET /ws HTTP/1.1\r\nHost: s\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
			resp: "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n"},
		{name: "server switches unasked", allow: []string{"websocket"},
			req:  "GET /mcp HTTP/1.1\r\nHost: s\r\n\r\n",
			resp: "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, nil, Options{AllowUpgrade: tt.allow})
			write(t, e.client, tt.req)
			readN(t, e.server, len(tt.req))
			write(t, e.server, tt.resp)
			if got := readN(t, e.client, len(tt.resp)); string(got) != tt.resp {
				t.Fatalf("got %q", got)
			}
			if tt.upgraded == "" {
				expectEOF(t, e.client)
				e.wait(t)
				if recs := e.rec.all(); len(recs) != 1 || recs[0].Upgraded != "" || recs[0].Err == "" {
					t.Errorf("records %+v", recs)
				}
				return
			}
			const opaque = "\x00\x01 not http \r\n\r\n"
			write(t, e.client, opaque)
			if got := readN(t, e.server, len(opaque)); string(got) != opaque {
				t.Fatalf("got %q", got)
			}
			e.client.Close()
			e.server.Close()
			e.wait(t)
			if recs := e.rec.all(); len(recs) != 1 || recs[0].Upgraded != tt.upgraded || recs[0].Verdict.Action != ActionAllow {
				t.Errorf("records %+v", recs)
			}
		})
	}
}

// TestProxyStrictMCPHeaders: issue 8 cases 2 and 3. Level 1 sees headers only; on a strict route
// they must be present, single, and at a version whose server checks them against the body.
func TestProxyStrictMCPHeaders(t *testing.T) {
	const body = `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"delete_repo"}}`
	post := func(headers string) string {
		return "POST /mcp HTTP/1.1\r\nHost: s\r\nContent-Type: application/json\r\n" + headers +
			"Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
	}
	tests := []struct {
		name   string
		strict bool
		req    string
		method string
		status int    // 0: forwarded
		reason string // in the refusal
	}{
		{name: "forged Mcp-Name at 2025-11-25", strict: true,
			req:    post("Accept: application/json, text/event-stream\r\nMcp-Method: tools/call\r\nMcp-Name: read_file\r\nMCP-Protocol-Version: 2025-11-25\r\n"),
			status: 400, reason: "older than 2026-07-28"},
		{name: "forged Mcp-Name at 2025-11-25 on a non-strict route is forwarded",
			req: post("Accept: application/json, text/event-stream\r\nMcp-Method: tools/call\r\nMcp-Name: read_file\r\nMCP-Protocol-Version: 2025-11-25\r\n")},
		{name: "2026-07-28 with headers", strict: true,
			req: post("Accept: application/json, text/event-stream\r\nMcp-Method: tools/call\r\nMcp-Name: read_file\r\nMCP-Protocol-Version: 2026-07-28\r\n")},
		{name: "a later version", strict: true,
			req: post("Mcp-Method: tools/call\r\nMcp-Name: read_file\r\nMCP-Protocol-Version: 2027-01-15\r\n")},
		{name: "malformed version", strict: true,
			req:    post("Mcp-Method: tools/call\r\nMCP-Protocol-Version: 2026-7-28\r\n"),
			status: 400, reason: "malformed MCP-Protocol-Version"},
		{name: "empty version", strict: true,
			req:    post("Mcp-Method: tools/call\r\nMCP-Protocol-Version: \r\n"),
			status: 400, reason: "malformed MCP-Protocol-Version"},
		{name: "no Mcp-* headers, Accept */*", strict: true,
			req: post("Accept: */*\r\n"), status: 400, reason: "requires the Mcp-Method header"},
		{name: "no Mcp-* headers, Accept over two lines", strict: true,
			req: post("Accept: application/json\r\nAccept: text/event-stream\r\n"), status: 400, reason: "requires the Mcp-Method header"},
		{name: "no Mcp-* headers, no Accept", strict: true,
			req: post(""), status: 400, reason: "requires the Mcp-Method header"},
		{name: "+json media type with parameters", strict: true,
			req: strings.Replace(post(""), "application/json", "Application/Vnd.Example+JSON; charset=utf-8", 1), status: 400, reason: "requires the Mcp-Method header"},
		{name: "MCP GET without Mcp-Method", strict: true, method: "GET",
			req: "GET /mcp HTTP/1.1\r\nHost: s\r\nAccept: text/event-stream\r\nMcp-Session-Id: abc\r\n\r\n", status: 400, reason: "requires the Mcp-Method header"},
		{name: "duplicate Mcp-Name", strict: true,
			req:    post("Mcp-Method: tools/call\r\nMcp-Name: read_file\r\nMcp-Name: delete_repo\r\nMCP-Protocol-Version: 2026-07-28\r\n"),
			status: 400, reason: "duplicate Mcp-Name"},
		{name: "duplicate Mcp-Method", strict: true,
			req:    post("Mcp-Method: tools/call\r\nmcp-method: tools/list\r\nMCP-Protocol-Version: 2026-07-28\r\n"),
			status: 400, reason: "duplicate mcp-method"},
		{name: "plain GET is not MCP", strict: true, method: "GET", req: "GET /index.html HTTP/1.1\r\nHost: s\r\n\r\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, denyName("delete_repo"), Options{StrictMCPHeaders: tt.strict})
			method := tt.method
			if method == "" {
				method = "POST"
			}
			write(t, e.client, tt.req)
			br := bufio.NewReader(e.client)
			if tt.status == 0 {
				if got := readN(t, e.server, len(tt.req)); string(got) != tt.req {
					t.Fatalf("upstream got %q", got)
				}
				write(t, e.server, okResponse("ok"))
				if resp, _ := readResponse(t, br, e.client, method); resp.StatusCode != 200 {
					t.Fatalf("got %d", resp.StatusCode)
				}
				return
			}
			resp, got := readResponse(t, br, e.client, method)
			if resp.StatusCode != tt.status || !strings.Contains(got, tt.reason) || resp.Header.Get("Content-Type") != "text/plain; charset=utf-8" {
				t.Fatalf("got %d %q; want %d naming %q", resp.StatusCode, got, tt.status, tt.reason)
			}
			assertUsable(t, e, br)
		})
	}
}

// TestProxyExpectedHost: issue 8 case 6. On a terminated flow the route was chosen by the SNI;
// a request for another host on it is misdirected (421), so Host cannot pick other rules.
func TestProxyExpectedHost(t *testing.T) {
	tests := []struct {
		name     string
		expected string
		req      string
		status   int // 0: forwarded
	}{
		{name: "same host", expected: "mcp.example.com", req: "GET /mcp HTTP/1.1\r\nHost: mcp.example.com\r\n\r\n"},
		{name: "port, case and trailing dot ignored", expected: "mcp.example.com", req: "GET /mcp HTTP/1.1\r\nHost: MCP.Example.com.:8443\r\n\r\n"},
		{name: "expected with trailing dot", expected: "MCP.example.com.", req: "GET /mcp HTTP/1.1\r\nHost: mcp.example.com\r\n\r\n"},
		{name: "ipv6 in brackets", expected: "2001:db8::1", req: "GET /mcp HTTP/1.1\r\nHost: [2001:DB8:0::1]:443\r\n\r\n"},
		{name: "ipv4", expected: "10.0.0.1", req: "GET /mcp HTTP/1.1\r\nHost: 10.0.0.1:80\r\n\r\n"},
		{name: "other host", expected: "mcp.example.com", req: "GET /mcp HTTP/1.1\r\nHost: admin.example.com\r\n\r\n", status: 421},
		{name: "suffix is not the host", expected: "example.com", req: "GET /mcp HTTP/1.1\r\nHost: evil-example.com\r\n\r\n", status: 421},
		{name: "other ip", expected: "2001:db8::1", req: "GET /mcp HTTP/1.1\r\nHost: [2001:db8::2]\r\n\r\n", status: 421},
		{name: "absolute-form target names another host", expected: "mcp.example.com", req: "GET http://admin.example.com/mcp HTTP/1.1\r\nHost: mcp.example.com\r\n\r\n", status: 421},
		{name: "absolute-form target, same host", expected: "mcp.example.com", req: "GET https://mcp.example.com:443/mcp HTTP/1.1\r\nHost: mcp.example.com\r\n\r\n"},
		{name: "empty host", expected: "mcp.example.com", req: "GET /mcp HTTP/1.1\r\nHost: \r\n\r\n", status: 421},
		{name: "missing host on http/1.1", expected: "mcp.example.com", req: "GET /mcp HTTP/1.1\r\n\r\n", status: 400},
		{name: "no expectation", req: "GET /mcp HTTP/1.1\r\nHost: anything\r\n\r\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, nil, Options{ExpectedHost: tt.expected})
			write(t, e.client, tt.req)
			br := bufio.NewReader(e.client)
			if tt.status == 0 {
				if got := readN(t, e.server, len(tt.req)); string(got) != tt.req {
					t.Fatalf("upstream got %q", got)
				}
				write(t, e.server, okResponse("ok"))
				if resp, _ := readResponse(t, br, e.client, "GET"); resp.StatusCode != 200 {
					t.Fatalf("got %d", resp.StatusCode)
				}
				return
			}
			resp, body := readResponse(t, br, e.client, "GET")
			if resp.StatusCode != tt.status || !strings.HasPrefix(body, "mcpintercept: ") {
				t.Fatalf("got %d %q", resp.StatusCode, body)
			}
			e.server.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
			if n, _ := e.server.Read(make([]byte, 1)); n != 0 {
				t.Error("the upstream received a misdirected request")
			}
		})
	}
}

// TestProxyBodyTimeout: issue 8 case 13. A request body that trickles is bounded by BodyTimeout
// from its head; a response body (an SSE stream) is not.
func TestProxyBodyTimeout(t *testing.T) {
	const timeout = 300 * time.Millisecond
	tests := []struct {
		name    string
		decider Decider
		head    string
		first   string // body bytes sent at once; the rest never comes
	}{
		{name: "content-length", head: "POST /mcp HTTP/1.1\r\nHost: s\r\nContent-Length: 100\r\n\r\n", first: "{\"jsonrpc\""},
		{name: "chunked", head: "POST /mcp HTTP/1.1\r\nHost: s\r\nTransfer-Encoding: chunked\r\n\r\n", first: "5\r\nhello\r\n"},
		{name: "refused request whose body trickles", decider: denyName("x"),
			head: "POST /mcp HTTP/1.1\r\nHost: s\r\nMcp-Method: tools/call\r\nMcp-Name: x\r\nContent-Length: 100\r\n\r\n", first: "{"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, tt.decider, Options{BodyTimeout: timeout})
			start := time.Now()
			write(t, e.client, tt.head+tt.first)
			deadline(e.server)
			got, _ := io.ReadAll(e.server) // the partial request (if forwarded), then the close
			if tt.decider == nil && string(got) != tt.head+tt.first {
				t.Errorf("upstream got %q", got)
			}
			if tt.decider != nil && len(got) != 0 {
				t.Errorf("upstream got %q of a refused request", got)
			}
			deadline(e.client)
			io.ReadAll(e.client)                                         // a refusal, if any, then the close
			if d := time.Since(start); d < timeout-50*time.Millisecond { // a lower bound only: a loaded machine may be late, never early
				t.Errorf("closed after %v", d)
			}
			e.wait(t)
			recs := e.rec.all()
			if len(recs) != 1 || !strings.Contains(recs[0].Err, "request body timeout") {
				t.Errorf("records %+v", recs)
			}
		})
	}

	t.Run("a slow response body is not bounded", func(t *testing.T) {
		e := newEnv(t, nil, Options{BodyTimeout: 100 * time.Millisecond})
		req := mcpPost("tools/call", "x", "{}")
		write(t, e.client, req)
		readN(t, e.server, len(req))
		head := "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
		write(t, e.server, head+chunk("data: 1\n\n"))
		readN(t, e.client, len(head)+len(chunk("data: 1\n\n")))
		time.Sleep(300 * time.Millisecond)
		write(t, e.server, chunk("data: 2\n\n")+"0\r\n\r\n")
		if got := readN(t, e.client, len(chunk("data: 2\n\n"))+5); string(got) != chunk("data: 2\n\n")+"0\r\n\r\n" {
			t.Fatalf("got %q", got)
		}
		// And the next request, with a body arriving in time, is fine.
		write(t, e.client, req)
		readN(t, e.server, len(req))
	})
}
