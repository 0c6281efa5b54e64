package level1

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

const testTimeout = 5 * time.Second

func tcpPair(t testing.TB) (*net.TCPConn, *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			accepted <- nil
			return
		}
		accepted <- c
	}()
	a, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b := <-accepted
	if b == nil {
		t.Fatal("accept failed")
	}
	return a.(*net.TCPConn), b.(*net.TCPConn)
}

type memRecorder struct {
	mu  sync.Mutex
	exs []Exchange
}

func (m *memRecorder) Record(ex *Exchange) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.exs = append(m.exs, *ex)
}

func (m *memRecorder) all() []Exchange {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]Exchange(nil), m.exs...)
}

type deciderFunc func(ctx context.Context, info *RequestInfo) Verdict

func (f deciderFunc) Decide(ctx context.Context, info *RequestInfo) Verdict { return f(ctx, info) }

// env is one client connection through Proxy to a test server, all on loopback TCP.
type env struct {
	client   *net.TCPConn // the test's client end
	server   *net.TCPConn // the test's upstream end
	rec      *memRecorder
	finished chan struct{}
	err      error
}

func newEnv(t testing.TB, d Decider, o Options) *env {
	t.Helper()
	c, pc := tcpPair(t)
	pu, s := tcpPair(t)
	e := &env{client: c, server: s, rec: &memRecorder{}, finished: make(chan struct{})}
	log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
	go func() {
		defer close(e.finished)
		e.err = Proxy(t.Context(), pc, pu, d, e.rec, o, log)
	}()
	t.Cleanup(func() {
		c.Close()
		s.Close()
		e.wait(t)
	})
	return e
}

func (e *env) wait(t testing.TB) error {
	t.Helper()
	select {
	case <-e.finished:
		return e.err
	case <-time.After(testTimeout):
		t.Fatal("Proxy did not return")
		return nil
	}
}

func deadline(c net.Conn) { c.SetDeadline(time.Now().Add(testTimeout)) }

func readN(t *testing.T, c net.Conn, n int) []byte {
	t.Helper()
	deadline(c)
	b := make([]byte, n)
	if _, err := io.ReadFull(c, b); err != nil {
		t.Fatalf("read %d bytes: %v (got %q)", n, err, b)
	}
	return b
}

func expectEOF(t *testing.T, c net.Conn) {
	t.Helper()
	deadline(c)
	b, err := io.ReadAll(c)
	if err != nil || len(b) != 0 {
		t.Fatalf("want EOF, got %q, %v", b, err)
	}
}

func write(t *testing.T, c net.Conn, s string) {
	t.Helper()
	deadline(c)
	if _, err := io.WriteString(c, s); err != nil {
		t.Fatalf("write: %v", err)
	}
}

func mcpPost(method, name, body string) string {
	return "POST /mcp HTTP/1.1\r\nHost: s\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n" +
		"Mcp-Method: " + method + "\r\nMcp-Name: " + name + "\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
}

func chunk(data string) string {
	return strconv.FormatInt(int64(len(data)), 16) + "\r\n" + data + "\r\n"
}

func okResponse(body string) string {
	return "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
}

// ---- byte exactness ----

type genExchange struct {
	method string
	req    []byte
	resp   [][]byte // response pieces, written one by one
}

func (g genExchange) respBytes() []byte { return bytes.Join(g.resp, nil) }

func randCase(rng *rand.Rand, s string) string {
	b := []byte(s)
	for i, c := range b {
		if rng.IntN(2) == 0 {
			if 'a' <= c && c <= 'z' {
				b[i] = c - 32
			} else if 'A' <= c && c <= 'Z' {
				b[i] = c + 32
			}
		}
	}
	return string(b)
}

func randBytes(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.IntN(256))
	}
	return b
}

func randWS(rng *rand.Rand) string { return []string{"", " ", "  ", "\t", " \t "}[rng.IntN(5)] }

func chunkedBody(rng *rand.Rand, eol string, data []byte) []byte {
	var b bytes.Buffer
	for len(data) > 0 {
		n := min(len(data), 1+rng.IntN(3000))
		fmt.Fprintf(&b, "%x", n)
		if rng.IntN(3) == 0 {
			b.WriteString(";ext=" + strconv.Itoa(rng.IntN(100)) + ";q=\"a b\"")
		}
		b.WriteString(eol)
		b.Write(data[:n])
		b.WriteString(eol)
		data = data[n:]
	}
	b.WriteString("0" + eol)
	if rng.IntN(3) == 0 {
		b.WriteString("X-Checksum:" + randWS(rng) + "abc" + eol)
	}
	b.WriteString(eol)
	return b.Bytes()
}

func genRequest(rng *rand.Rand) (string, []byte) {
	eol := "\r\n"
	if rng.IntN(10) == 0 {
		eol = "\n"
	}
	method := []string{"GET", "POST", "POST", "POST", "DELETE", "HEAD"}[rng.IntN(6)]
	var b bytes.Buffer
	b.WriteString(method + " /mcp?r=" + strconv.Itoa(rng.IntN(1000)) + " HTTP/1.1" + eol)
	b.WriteString(randCase(rng, "host") + ":" + randWS(rng) + "example" + randWS(rng) + eol)
	b.WriteString(randCase(rng, "mcp-method") + ": tools/call" + eol)
	b.WriteString("Mcp-Name: =?base64?5aSp5rCX?=" + eol)
	for i := range rng.IntN(6) {
		b.WriteString("X-R" + strconv.Itoa(i) + ":" + randWS(rng) + strings.Repeat("v", rng.IntN(200)) + randWS(rng) + eol)
	}
	if method != "POST" {
		b.WriteString(eol)
		return method, b.Bytes()
	}
	body := randBytes(rng, rng.IntN(6000))
	if rng.IntN(2) == 0 {
		b.WriteString("Content-Length: " + strconv.Itoa(len(body)) + eol + eol)
		b.Write(body)
	} else {
		b.WriteString("Transfer-Encoding: chunked" + eol + eol)
		b.Write(chunkedBody(rng, eol, body))
	}
	return method, b.Bytes()
}

func genResponse(rng *rand.Rand, method string, last bool) [][]byte {
	var pieces [][]byte
	if method == "POST" && rng.IntN(5) == 0 {
		pieces = append(pieces, []byte("HTTP/1.1 100 Continue\r\n\r\n"))
	}
	switch k := rng.IntN(5); {
	case method == "HEAD":
		pieces = append(pieces, []byte("HTTP/1.1 200 OK\r\nContent-Length: 1234\r\n\r\n"))
	case last && k == 0:
		// Close-delimited SSE, the HTTP+SSE way: the body runs until the server closes.
		pieces = append(pieces, []byte("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n"))
		for i := range 1 + rng.IntN(20) {
			pieces = append(pieces, []byte("event: message\ndata: {\"n\":"+strconv.Itoa(i)+"}\n\n"))
		}
	case k == 1:
		pieces = append(pieces, []byte("HTTP/1.1 204 No Content\r\n\r\n"))
	case k == 2:
		// Streamable HTTP SSE: each event is its own chunk and its own write.
		pieces = append(pieces, []byte("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"))
		for i := range 1 + rng.IntN(30) {
			ev := "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progress\":" + strconv.Itoa(i) + "}}\n\n"
			pieces = append(pieces, []byte(fmt.Sprintf("%x\r\n%s\r\n", len(ev), ev)))
		}
		pieces = append(pieces, []byte("0\r\n\r\n"))
	case k == 3:
		var b bytes.Buffer
		b.WriteString("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
		b.Write(chunkedBody(rng, "\r\n", randBytes(rng, rng.IntN(20000))))
		pieces = append(pieces, b.Bytes())
	default:
		body := randBytes(rng, rng.IntN(70000))
		pieces = append(pieces, []byte("HTTP/1.1 200 OK\r\nContent-Length: "+strconv.Itoa(len(body))+"\r\n\r\n"), body)
	}
	return pieces
}

func genExchanges(rng *rand.Rand, n int) []genExchange {
	exs := make([]genExchange, n)
	for i := range exs {
		method, req := genRequest(rng)
		exs[i] = genExchange{method: method, req: req, resp: genResponse(rng, method, i == n-1)}
	}
	return exs
}

// closeDelimited reports whether the generated exchange ends with the server closing.
func (g genExchange) closeDelimited() bool {
	h, err := NewReader(bytes.NewReader(g.respBytes()), Limits{}).ReadResponseHead(g.method)
	for err == nil && h.Status < 200 {
		r := NewReader(bytes.NewReader(g.respBytes()[len(h.Raw):]), Limits{})
		h, err = r.ReadResponseHead(g.method)
	}
	return err == nil && h.CloseDelimited
}

// TestProxyByteExact sends random valid exchanges through Proxy and requires every byte to arrive
// unchanged, both ways: "MUST forward all messages (including initialization handshakes) without
// modification" (draft, Level 1 Requirements).
func TestProxyByteExact(t *testing.T) {
	for _, pipelined := range []bool{false, true} {
		for seed := range uint64(12) {
			t.Run(fmt.Sprintf("pipelined=%v/seed=%d", pipelined, seed), func(t *testing.T) {
				t.Parallel()
				rng := rand.New(rand.NewPCG(seed, 42))
				exs := genExchanges(rng, 1+rng.IntN(15))
				e := newEnv(t, nil, Options{})

				serverErr := make(chan error, 1)
				go func() {
					serverErr <- func() error {
						deadline(e.server)
						for i, ex := range exs {
							got := make([]byte, len(ex.req))
							if _, err := io.ReadFull(e.server, got); err != nil {
								return fmt.Errorf("request %d: %w", i, err)
							}
							if !bytes.Equal(got, ex.req) {
								return fmt.Errorf("request %d differs:\n got %q\nwant %q", i, got, ex.req)
							}
							for _, p := range ex.resp {
								if _, err := e.server.Write(p); err != nil {
									return fmt.Errorf("response %d: %w", i, err)
								}
							}
						}
						if exs[len(exs)-1].closeDelimited() {
							return e.server.Close()
						}
						return nil
					}()
				}()

				writeErr := make(chan error, 1)
				if pipelined {
					go func() {
						var all []byte
						for _, ex := range exs {
							all = append(all, ex.req...)
						}
						// Odd-sized writes, so request boundaries fall anywhere in a read.
						for len(all) > 0 {
							n := min(len(all), 1+rng.IntN(9000))
							if _, err := e.client.Write(all[:n]); err != nil {
								writeErr <- err
								return
							}
							all = all[n:]
						}
						writeErr <- nil
					}()
				}
				var up, down int64
				for i, ex := range exs {
					if !pipelined {
						write(t, e.client, string(ex.req))
					}
					want := ex.respBytes()
					got := readN(t, e.client, len(want))
					if !bytes.Equal(got, want) {
						t.Fatalf("response %d differs:\n got %q\nwant %q", i, got, want)
					}
					up += int64(len(ex.req))
					down += int64(len(want))
				}
				if pipelined {
					if err := <-writeErr; err != nil {
						t.Fatal(err)
					}
				}
				if err := <-serverErr; err != nil {
					t.Fatal(err)
				}
				if exs[len(exs)-1].closeDelimited() {
					expectEOF(t, e.client)
				} else {
					e.client.Close()
				}
				if err := e.wait(t); err != nil {
					t.Errorf("Proxy: %v", err)
				}
				var gotUp, gotDown int64
				recs := e.rec.all()
				for _, r := range recs {
					gotUp += r.BytesUp
					gotDown += r.BytesDown
					if r.Err != "" || r.Verdict.Action != ActionAllow || r.Info.Kind != KindMCP {
						t.Errorf("record %+v", r)
					}
				}
				if len(recs) != len(exs) || gotUp != up || gotDown != down {
					t.Errorf("records: %d, up %d, down %d; want %d, %d, %d", len(recs), gotUp, gotDown, len(exs), up, down)
				}
			})
		}
	}
}

// TestProxySSENotHeldBack: "Streams are forwarded as they arrive: never hold SSE events back to
// fill a buffer or merge several into one write" (DESIGN.md). The server writes B only after the
// client has received A, so A must have travelled alone and at once.
func TestProxySSENotHeldBack(t *testing.T) {
	tests := []struct {
		name       string
		head       string
		a, b, tail string
	}{
		{
			name: "chunked",
			head: "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n",
			a:    chunk("event: message\ndata: {\"method\":\"notifications/progress\"}\n\n"),
			b:    chunk("event: message\ndata: {\"id\":1,\"result\":{}}\n\n"),
			tail: "0\r\n\r\n",
		},
		{
			name: "close-delimited",
			head: "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n",
			a:    "event: endpoint\ndata: /messages?sessionId=1\n\n",
			b:    "event: message\ndata: {}\n\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, nil, Options{})
			req := "GET /sse HTTP/1.1\r\nAccept: text/event-stream\r\n\r\n"
			write(t, e.client, req)
			readN(t, e.server, len(req))
			gotA := make(chan struct{})
			go func() {
				e.server.Write([]byte(tt.head))
				e.server.Write([]byte(tt.a))
				select {
				case <-gotA:
				case <-time.After(testTimeout):
					return
				}
				e.server.Write([]byte(tt.b))
				if tt.tail != "" {
					e.server.Write([]byte(tt.tail))
				} else {
					e.server.Close()
				}
			}()
			if got := readN(t, e.client, len(tt.head)+len(tt.a)); string(got) != tt.head+tt.a {
				t.Fatalf("got %q", got)
			}
			close(gotA)
			if got := readN(t, e.client, len(tt.b)+len(tt.tail)); string(got) != tt.b+tt.tail {
				t.Fatalf("got %q", got)
			}
		})
	}
}

// ---- refusals ----

func denyName(name string) Decider {
	return deciderFunc(func(_ context.Context, info *RequestInfo) Verdict {
		if info.MCPName == name {
			return Verdict{Action: ActionDeny, Reason: "tool " + name + " is not allowed", Rule: "no-" + name}
		}
		return Verdict{Action: ActionAllow}
	})
}

func readResponse(t *testing.T, br *bufio.Reader, c net.Conn, method string) (*http.Response, string) {
	t.Helper()
	deadline(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: method})
	if err != nil {
		t.Fatalf("read response: %v", err)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read body: %v", err)
	}
	return resp, string(body)
}

// TestProxyDeny: Level 1 "MAY inspect transport-layer headers for policy decisions (rate limiting,
// logging, access control)" and refuses with an HTTP status, never a JSON-RPC body; the upstream
// never sees the refused request, and the connection stays usable.
func TestProxyDeny(t *testing.T) {
	e := newEnv(t, denyName("delete_all"), Options{})
	br := bufio.NewReader(e.client)
	denied := mcpPost("tools/call", "delete_all", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"delete_all"}}`)
	allowed := mcpPost("tools/call", "get_weather", `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"get_weather"}}`)

	write(t, e.client, denied)
	resp, body := readResponse(t, br, e.client, "POST")
	if resp.StatusCode != 403 || body != "mcpintercept: tool delete_all is not allowed\n" ||
		resp.Header.Get("Content-Type") != "text/plain; charset=utf-8" || resp.Close {
		t.Fatalf("refusal: %d %q %v close=%v", resp.StatusCode, body, resp.Header, resp.Close)
	}

	write(t, e.client, allowed)
	// The first bytes the upstream sees are the allowed request's: the refused one never left.
	if got := readN(t, e.server, len(allowed)); string(got) != allowed {
		t.Fatalf("upstream got %q", got)
	}
	write(t, e.server, okResponse(`{"ok":true}`))
	resp, body = readResponse(t, br, e.client, "POST")
	if resp.StatusCode != 200 || body != `{"ok":true}` {
		t.Fatalf("allowed: %d %q", resp.StatusCode, body)
	}
	e.client.Close()
	e.wait(t)
	recs := e.rec.all()
	if len(recs) != 2 {
		t.Fatalf("records: %+v", recs)
	}
	for _, r := range recs {
		switch r.Info.MCPName {
		case "delete_all":
			if r.Verdict.Action != ActionDeny || r.Status != 403 || r.Verdict.Rule != "no-delete_all" || r.BytesUp != int64(len(denied)) {
				t.Errorf("denied record %+v", r)
			}
		case "get_weather":
			if r.Verdict.Action != ActionAllow || r.Status != 200 || r.BytesUp != int64(len(allowed)) {
				t.Errorf("allowed record %+v", r)
			}
		default:
			t.Errorf("record %+v", r)
		}
	}
}

// TestProxyPipelinedDenyOrdering: "Nothing the client sent is lost or reordered on the allowed
// path" (DESIGN.md): a refusal is written in its turn, after the responses owed before it.
func TestProxyPipelinedDenyOrdering(t *testing.T) {
	e := newEnv(t, denyName("b"), Options{})
	a := mcpPost("tools/call", "a", `{"id":1}`)
	b := mcpPost("tools/call", "b", `{"id":2}`)
	c := "GET /mcp HTTP/1.1\r\nMcp-Session-Id: x\r\n\r\n"
	write(t, e.client, a+b+c)
	go func() {
		deadline(e.server)
		readN(t, e.server, len(a))
		time.Sleep(100 * time.Millisecond) // the refusal of b is ready long before a's answer
		e.server.Write([]byte(okResponse("A")))
		readN(t, e.server, len(c))
		e.server.Write([]byte(okResponse("C")))
	}()
	br := bufio.NewReader(e.client)
	for _, want := range []string{"200 A", "403 mcpintercept: tool b is not allowed\n", "200 C"} {
		resp, body := readResponse(t, br, e.client, "POST")
		if got := strconv.Itoa(resp.StatusCode) + " " + body; got != want {
			t.Fatalf("got %q, want %q", got, want)
		}
	}
}

func TestProxyRefusalStatuses(t *testing.T) {
	tests := []struct {
		name       string
		verdict    Verdict
		head       string
		status     int
		retryAfter string
		body       string
	}{
		{name: "rate limited", verdict: Verdict{Action: ActionRateLimited, Reason: "slow down", RetryAfter: 1500 * time.Millisecond}, status: 429, retryAfter: "2", body: "mcpintercept: slow down\n"},
		{name: "rate limited without delay", verdict: Verdict{Action: ActionRateLimited, Reason: "slow down"}, status: 429, retryAfter: "1", body: "mcpintercept: slow down\n"},
		{name: "strict refusal", verdict: Verdict{Action: ActionDeny, Status: 400, Reason: "missing Mcp-Method"}, status: 400, body: "mcpintercept: missing Mcp-Method\n"},
		{name: "unknown action fails closed", verdict: Verdict{Action: "quarantine"}, status: 403, body: "mcpintercept: request refused\n"},
		{name: "control characters in reason", verdict: Verdict{Action: ActionDeny, Reason: "a\r\nInjected: 1"}, status: 403, body: "mcpintercept: a  Injected: 1\n"},
		{name: "invalid Mcp-Name refused without asking policy", verdict: Verdict{Action: ActionAllow},
			head: "POST /mcp HTTP/1.1\r\nMcp-Method: tools/call\r\nMcp-Name: =?base64?%%%?=\r\nContent-Length: 2\r\n\r\n{}", status: 400,
			body: "mcpintercept: invalid MCP header: malformed http: invalid base64 header value\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, deciderFunc(func(context.Context, *RequestInfo) Verdict { return tt.verdict }), Options{})
			head := tt.head
			if head == "" {
				head = mcpPost("tools/call", "x", "{}")
			}
			write(t, e.client, head)
			br := bufio.NewReader(e.client)
			resp, body := readResponse(t, br, e.client, "POST")
			if resp.StatusCode != tt.status || body != tt.body || resp.Header.Get("Retry-After") != tt.retryAfter {
				t.Fatalf("got %d %q Retry-After %q", resp.StatusCode, body, resp.Header.Get("Retry-After"))
			}
			// Still usable: the next refusal arrives on the same connection.
			write(t, e.client, head)
			if resp, _ := readResponse(t, br, e.client, "POST"); resp.StatusCode != tt.status {
				t.Fatalf("second: %d", resp.StatusCode)
			}
		})
	}
}

func TestProxyRefusalClosing(t *testing.T) {
	deny := deciderFunc(func(context.Context, *RequestInfo) Verdict { return Verdict{Action: ActionDeny, Reason: "no"} })
	tests := []struct {
		name   string
		req    string
		method string
		then   string // sent after reading the refusal; it must not matter
	}{
		{name: "expect 100-continue: no body will come", req: "POST /mcp HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 100000\r\n\r\n", method: "POST"},
		{name: "body beyond MaxDeniedBody", req: "POST /mcp HTTP/1.1\r\nContent-Length: 5000\r\n\r\n" + strings.Repeat("x", 5000), method: "POST"},
		{name: "connection close", req: "GET /mcp HTTP/1.1\r\nConnection: close\r\n\r\n", method: "GET"},
		{name: "http/1.0", req: "GET /mcp HTTP/1.0\r\n\r\n", method: "GET"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, deny, Options{MaxDeniedBody: 1000})
			write(t, e.client, tt.req)
			resp, body := readResponse(t, bufio.NewReader(e.client), e.client, tt.method)
			if resp.StatusCode != 403 || body != "mcpintercept: no\n" {
				t.Fatalf("got %d %q", resp.StatusCode, body)
			}
			expectEOF(t, e.client)
		})
	}
}

func TestProxyHEADRefusalHasNoBody(t *testing.T) {
	e := newEnv(t, deciderFunc(func(context.Context, *RequestInfo) Verdict { return Verdict{Action: ActionDeny, Reason: "no"} }), Options{})
	write(t, e.client, "HEAD /mcp HTTP/1.1\r\n\r\n")
	want := "HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 17\r\n\r\n"
	if got := readN(t, e.client, len(want)); string(got) != want {
		t.Fatalf("got %q", got)
	}
	e.client.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	if n, _ := e.client.Read(make([]byte, 1)); n != 0 {
		t.Fatal("HEAD refusal carried a body")
	}
}

// ---- bad input: a clear, bounded answer ----

func TestProxyBadRequests(t *testing.T) {
	tests := []struct {
		name   string
		send   string
		status int
		// hold keeps the head incomplete, so only the header timeout can answer it.
		hold bool
	}{
		{name: "malformed request line", send: "GET /\r\n\r\n", status: 400},
		{name: "content-length with transfer-encoding", send: "POST / HTTP/1.1\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", status: 400},
		{name: "differing content-lengths", send: "POST / HTTP/1.1\r\nContent-Length: 4\r\nContent-Length: 5\r\n\r\nabcde", status: 400},
		{name: "bad chunk size in the first read", send: "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n", status: 400},
		{name: "oversized head", send: "GET / HTTP/1.1\r\nX: " + strings.Repeat("a", 100<<10) + "\r\n\r\n", status: 431},
		{name: "slow head", send: "GET / HTTP/1.1\r\nHost: a\r\n", status: 408, hold: true},
		{name: "slow head behind empty lines", send: "\r\n\r\n\r\nGET / HTTP/1.1\r\n", status: 408, hold: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, nil, Options{HeaderTimeout: 300 * time.Millisecond})

			// Another client on another connection is served meanwhile, quickly.
			other := newEnv(t, nil, Options{HeaderTimeout: 300 * time.Millisecond})
			otherDone := make(chan error, 1)
			go func() {
				otherDone <- func() error {
					br := bufio.NewReader(other.client)
					for i := range 20 {
						req := mcpPost("ping", "x", "{}")
						other.client.Write([]byte(req))
						if _, err := io.ReadFull(other.server, make([]byte, len(req))); err != nil {
							return err
						}
						other.server.Write([]byte(okResponse(strconv.Itoa(i))))
						resp, err := http.ReadResponse(br, nil)
						if err != nil {
							return err
						}
						b, _ := io.ReadAll(resp.Body)
						if string(b) != strconv.Itoa(i) {
							return fmt.Errorf("other client got %q", b)
						}
					}
					return nil
				}()
			}()

			start := time.Now()
			go e.client.Write([]byte(tt.send))
			resp, body := readResponse(t, bufio.NewReader(e.client), e.client, "GET")
			if resp.StatusCode != tt.status || !strings.HasPrefix(body, "mcpintercept: ") || !resp.Close {
				t.Fatalf("got %d %q close=%v", resp.StatusCode, body, resp.Close)
			}
			if tt.hold && time.Since(start) < 250*time.Millisecond {
				t.Errorf("408 after %v, before the header timeout", time.Since(start))
			}
			expectEOF(t, e.client)
			e.server.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
			if n, _ := e.server.Read(make([]byte, 1)); n != 0 {
				t.Error("the upstream received bytes of a refused request")
			}
			select {
			case err := <-otherDone:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(testTimeout):
				t.Fatal("the other client was held up")
			}
			if tt.hold {
				return
			}
			e.wait(t)
			if recs := e.rec.all(); len(recs) != 1 || recs[0].Status != tt.status || recs[0].Verdict.Action != ActionDeny {
				t.Errorf("records %+v", recs)
			}
		})
	}
}

// ---- transport errors forwarded as they are ----

// TestProxyUpstreamReset: "Transport errors from the backend MUST be forwarded to the client as-is"
// (draft, Level 1 Requirements): a reset becomes a reset, not a made-up response.
func TestProxyUpstreamReset(t *testing.T) {
	e := newEnv(t, nil, Options{})
	req := mcpPost("tools/call", "x", "{}")
	write(t, e.client, req)
	readN(t, e.server, len(req))
	e.server.SetLinger(0)
	e.server.Close()
	deadline(e.client)
	b, err := io.ReadAll(e.client)
	if len(b) != 0 || !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("client got %q, %v; want a reset", b, err)
	}
	if err := e.wait(t); err == nil || !strings.Contains(err.Error(), "upstream reset") {
		t.Errorf("Proxy returned %v", err)
	}
	if recs := e.rec.all(); len(recs) != 1 || recs[0].Err != "upstream reset" || recs[0].Status != 0 {
		t.Errorf("records %+v", recs)
	}
}

func TestProxyUpstreamResetMidResponse(t *testing.T) {
	e := newEnv(t, nil, Options{})
	req := "GET /sse HTTP/1.1\r\nAccept: text/event-stream\r\n\r\n"
	write(t, e.client, req)
	readN(t, e.server, len(req))
	head := "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n"
	write(t, e.server, head)
	readN(t, e.client, len(head))
	e.server.SetLinger(0)
	e.server.Close()
	deadline(e.client)
	b, err := io.ReadAll(e.client)
	if len(b) != 0 || !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("client got %q, %v; want a reset", b, err)
	}
}

func TestProxyUpstreamClose(t *testing.T) {
	tests := []struct {
		name   string
		sent   string // by the server before it closes
		recErr string
		status int
	}{
		{name: "mid-response", sent: "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n0123456789", recErr: "upstream closed mid-response", status: 200},
		{name: "mid-head", sent: "HTTP/1.1 200 OK\r\nContent-Le", recErr: "upstream closed mid-response"},
		{name: "before responding", sent: "", recErr: "upstream closed before responding"},
		{name: "mid-chunk", sent: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n10\r\nabc", recErr: "upstream closed mid-response", status: 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, nil, Options{})
			req := mcpPost("tools/call", "x", "{}")
			write(t, e.client, req)
			readN(t, e.server, len(req))
			write(t, e.server, tt.sent)
			e.server.Close()
			deadline(e.client)
			b, err := io.ReadAll(e.client)
			// Exactly what the server sent, then a plain end: no fabricated response, no extra bytes.
			if err != nil || string(b) != tt.sent {
				t.Fatalf("client got %q, %v; want %q then EOF", b, err, tt.sent)
			}
			e.wait(t)
			if recs := e.rec.all(); len(recs) != 1 || recs[0].Err != tt.recErr || recs[0].Status != tt.status || recs[0].BytesDown != int64(len(tt.sent)) {
				t.Errorf("records %+v", recs)
			}
		})
	}
}

// TestProxyUpstreamIdleClose: an upstream closing its idle keep-alive connection is passed on at
// once, as without the proxy, so the client does not send its next request into a dead connection.
func TestProxyUpstreamIdleClose(t *testing.T) {
	e := newEnv(t, nil, Options{})
	req := mcpPost("ping", "x", "{}")
	write(t, e.client, req)
	readN(t, e.server, len(req))
	resp := okResponse("{}")
	write(t, e.server, resp+"HTTP/1.1 408 Request Timeout\r\nConnection: close\r\nContent-Length: 0\r\n\r\n")
	e.server.Close()
	deadline(e.client)
	b, err := io.ReadAll(e.client)
	if err != nil || string(b) != resp+"HTTP/1.1 408 Request Timeout\r\nConnection: close\r\nContent-Length: 0\r\n\r\n" {
		t.Fatalf("client got %q, %v", b, err)
	}
}

func TestProxyClientReset(t *testing.T) {
	e := newEnv(t, nil, Options{})
	req := "POST /mcp HTTP/1.1\r\nContent-Length: 100\r\n\r\nabc"
	write(t, e.client, req)
	readN(t, e.server, len(req))
	e.client.SetLinger(0)
	e.client.Close()
	deadline(e.server)
	_, err := io.ReadAll(e.server)
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("upstream got %v; want a reset", err)
	}
}

// TestProxyClientHalfClose: a FIN after the last request still lets the owed responses back.
func TestProxyClientHalfClose(t *testing.T) {
	e := newEnv(t, nil, Options{})
	a, b := mcpPost("ping", "x", `{"id":1}`), mcpPost("ping", "x", `{"id":2}`)
	write(t, e.client, a+b)
	e.client.CloseWrite()
	readN(t, e.server, len(a+b))
	expectEOF(t, e.server) // the FIN was passed on
	want := okResponse("1") + okResponse("2")
	write(t, e.server, want)
	deadline(e.client)
	got, err := io.ReadAll(e.client)
	if err != nil || string(got) != want {
		t.Fatalf("client got %q, %v", got, err)
	}
	if err := e.wait(t); err != nil {
		t.Errorf("Proxy: %v", err)
	}
}

// TestProxyEarlyResponse: a response that starts before the request body is complete reaches the
// client at once; the rest of the body still follows, and the connection goes on.
func TestProxyEarlyResponse(t *testing.T) {
	e := newEnv(t, nil, Options{})
	body := strings.Repeat("x", 1<<20)
	head := "POST /upload HTTP/1.1\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n"
	write(t, e.client, head+body[:1000])
	readN(t, e.server, len(head)+1000)
	early := "HTTP/1.1 413 Content Too Large\r\nContent-Length: 0\r\n\r\n"
	write(t, e.server, early)
	if got := readN(t, e.client, len(early)); string(got) != early {
		t.Fatalf("got %q", got)
	}
	serverDone := make(chan error, 1)
	go func() {
		if _, err := io.ReadFull(e.server, make([]byte, len(body)-1000)); err != nil {
			serverDone <- err
			return
		}
		next := "GET /mcp HTTP/1.1\r\n\r\n"
		if _, err := io.ReadFull(e.server, make([]byte, len(next))); err != nil {
			serverDone <- err
			return
		}
		_, err := e.server.Write([]byte(okResponse("next")))
		serverDone <- err
	}()
	write(t, e.client, body[1000:])
	write(t, e.client, "GET /mcp HTTP/1.1\r\n\r\n")
	if err := <-serverDone; err != nil {
		t.Fatal(err)
	}
	if got := readN(t, e.client, len(okResponse("next"))); string(got) != okResponse("next") {
		t.Fatalf("got %q", got)
	}
}

func TestProxy100Continue(t *testing.T) {
	e := newEnv(t, nil, Options{})
	head := "POST /mcp HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 4\r\n\r\n"
	write(t, e.client, head)
	readN(t, e.server, len(head))
	write(t, e.server, "HTTP/1.1 100 Continue\r\n\r\n")
	if got := readN(t, e.client, 25); string(got) != "HTTP/1.1 100 Continue\r\n\r\n" {
		t.Fatalf("got %q", got)
	}
	write(t, e.client, "body")
	readN(t, e.server, 4)
	write(t, e.server, okResponse("done"))
	if got := readN(t, e.client, len(okResponse("done"))); string(got) != okResponse("done") {
		t.Fatalf("got %q", got)
	}
	e.client.Close()
	e.wait(t)
	if recs := e.rec.all(); len(recs) != 1 || recs[0].Status != 200 || recs[0].BytesDown != int64(25+len(okResponse("done"))) {
		t.Errorf("records %+v", recs)
	}
}

func TestProxyUpgrade(t *testing.T) {
	e := newEnv(t, nil, Options{AllowUpgrade: []string{"websocket"}})
	req := "GET /ws HTTP/1.1\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n"
	write(t, e.client, req)
	readN(t, e.server, len(req))
	// The first frame rides in the same write as the 101: it must not be lost in the switch.
	resp := "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n"
	write(t, e.server, resp+"server-frame-1")
	if got := readN(t, e.client, len(resp)+14); string(got) != resp+"server-frame-1" {
		t.Fatalf("got %q", got)
	}
	// Not HTTP any more: these bytes would be malformed requests if still parsed.
	const opaque = "\x00\x01 not http \r\n\r\n"
	write(t, e.client, opaque)
	if got := readN(t, e.server, len(opaque)); string(got) != opaque {
		t.Fatalf("got %q", got)
	}
	// Half-close passes through in opaque mode too.
	e.client.CloseWrite()
	expectEOF(t, e.server)
	write(t, e.server, "last words")
	e.server.Close()
	deadline(e.client)
	if got, err := io.ReadAll(e.client); err != nil || string(got) != "last words" {
		t.Fatalf("got %q, %v", got, err)
	}
	e.wait(t)
	if recs := e.rec.all(); len(recs) != 1 || recs[0].Upgraded != "websocket" || recs[0].Status != 101 {
		t.Errorf("records %+v", recs)
	}
}

func TestProxyUpgradeDeclined(t *testing.T) {
	e := newEnv(t, nil, Options{AllowUpgrade: []string{"websocket"}})
	req := "GET /ws HTTP/1.1\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n"
	write(t, e.client, req)
	readN(t, e.server, len(req))
	write(t, e.server, okResponse("no"))
	readN(t, e.client, len(okResponse("no")))
	// Still HTTP: the next request is parsed and forwarded.
	next := mcpPost("ping", "x", "{}")
	write(t, e.client, next)
	readN(t, e.server, len(next))
	write(t, e.server, okResponse("yes"))
	readN(t, e.client, len(okResponse("yes")))
	e.client.Close()
	e.wait(t)
	if recs := e.rec.all(); len(recs) != 2 {
		t.Errorf("records %+v", recs)
	}
}

func TestProxyIdleTimeout(t *testing.T) {
	e := newEnv(t, nil, Options{IdleTimeout: 200 * time.Millisecond})
	req := mcpPost("ping", "x", "{}")
	write(t, e.client, req)
	readN(t, e.server, len(req))
	// A response that takes longer than the idle timeout is not cut: the timeout is between requests.
	time.Sleep(400 * time.Millisecond)
	write(t, e.server, okResponse("{}"))
	readN(t, e.client, len(okResponse("{}")))
	start := time.Now()
	expectEOF(t, e.client)
	if d := time.Since(start); d < 150*time.Millisecond {
		t.Errorf("closed after %v", d)
	}
}

func TestProxyContextCancel(t *testing.T) {
	c, pc := tcpPair(t)
	pu, s := tcpPair(t)
	defer c.Close()
	defer s.Close()
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- Proxy(ctx, pc, pu, nil, nil, Options{}, nil) }()
	time.Sleep(20 * time.Millisecond)
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Proxy returned %v", err)
		}
	case <-time.After(testTimeout):
		t.Fatal("Proxy ignored cancellation")
	}
	expectEOF(t, c)
}

// TestProxyNetPipe runs a keep-alive exchange over net.Pipe, which has no half-close and no
// resets: the proxy must not depend on either.
func TestProxyNetPipe(t *testing.T) {
	c, pc := net.Pipe()
	pu, s := net.Pipe()
	done := make(chan error, 1)
	go func() { done <- Proxy(t.Context(), pc, pu, denyName("no"), nil, Options{}, nil) }()
	go func() {
		br := bufio.NewReader(s)
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				s.Close()
				return
			}
			io.Copy(io.Discard, req.Body)
			s.Write([]byte(okResponse(req.Header.Get("Mcp-Name"))))
		}
	}()
	br := bufio.NewReader(c)
	for _, name := range []string{"a", "no", "b"} {
		deadline(c)
		go c.Write([]byte(mcpPost("tools/call", name, "{}")))
		resp, body := readResponse(t, br, c, "POST")
		if name == "no" {
			if resp.StatusCode != 403 {
				t.Fatalf("got %d", resp.StatusCode)
			}
			continue
		}
		if body != name {
			t.Fatalf("got %q", body)
		}
	}
	c.Close()
	select {
	case <-done:
	case <-time.After(testTimeout):
		t.Fatal("Proxy did not return")
	}
}

// TestProxyKeepAliveMany runs many requests on one connection, every seventh refused, with the
// upstream answering in chunked and Content-Length framing alternately.
func TestProxyKeepAliveMany(t *testing.T) {
	const n = 300
	e := newEnv(t, denyName("blocked"), Options{IdleTimeout: time.Minute})
	go func() {
		r := NewReader(e.server, Limits{})
		for i := 0; ; i++ {
			h, err := r.ReadRequestHead()
			if err != nil {
				return
			}
			r.CopyBody(io.Discard, h)
			name, _ := h.Get("Mcp-Name")
			if i%2 == 0 {
				e.server.Write([]byte(okResponse(name)))
			} else {
				e.server.Write([]byte("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + chunk(name) + "0\r\n\r\n"))
			}
		}
	}()
	br := bufio.NewReader(e.client)
	for i := range n {
		name := "tool" + strconv.Itoa(i)
		if i%7 == 3 {
			name = "blocked"
		}
		write(t, e.client, mcpPost("tools/call", name, `{"i":`+strconv.Itoa(i)+`}`))
		resp, body := readResponse(t, br, e.client, "POST")
		switch {
		case name == "blocked" && resp.StatusCode != 403:
			t.Fatalf("request %d: %d", i, resp.StatusCode)
		case name != "blocked" && (resp.StatusCode != 200 || body != name):
			t.Fatalf("request %d: %d %q", i, resp.StatusCode, body)
		}
	}
	e.client.Close()
	e.wait(t)
	if recs := e.rec.all(); len(recs) != n {
		t.Errorf("%d records, want %d", len(recs), n)
	}
}

// TestProxyMalformedBodyAfterForwarding: once part of a request is upstream, bad framing later in
// its body can no longer be answered in order; both connections are closed, nothing is made up.
func TestProxyMalformedBodyAfterForwarding(t *testing.T) {
	e := newEnv(t, nil, Options{})
	first := "POST /mcp HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n"
	write(t, e.client, first)
	readN(t, e.server, len(first))
	write(t, e.client, "zz\r\n")
	expectEOF(t, e.server)
	expectEOF(t, e.client)
	e.wait(t)
	if recs := e.rec.all(); len(recs) != 1 || !strings.HasPrefix(recs[0].Err, "malformed request body") {
		t.Errorf("records %+v", recs)
	}
}
