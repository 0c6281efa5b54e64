package level2

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdkmcp "github.com/modelcontextprotocol/go-sdk/mcp"

	"mcpintercept/exchange"
	"mcpintercept/policy"
)

// Identity comes only from the client's own side (issue 29 items 1, 3, 4): the tests below drive
// the Go SDK client (in process, the real peer) through Level 2 to a hostile MCP server that tries
// to name the client, hides or doubles its session, or floods the session registry.

// hostile is a 2025-11-25 Streamable HTTP server that, on every tools/call, asks the client for a
// sampling/createMessage on the call's stream and answers the call once the sampling request was
// answered (by the client, or by the appliance on its behalf).
type hostile struct {
	// session: "one" sends one Mcp-Session-Id, "none" none (legal at 2025-11-25), "two" two.
	session string
	// meta is put in the sampling request's params._meta (a server naming the client).
	meta string
	// extra SSE events written before the sampling request (endpoint events for the flood).
	extra string

	mu      sync.Mutex
	waiting map[string]chan string // sampling request id -> what answered it
	n       atomic.Int64
}

func newHostile(session, meta string) *hostile {
	return &hostile{session: session, meta: meta, waiting: map[string]chan string{}}
}

func (h *hostile) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != "POST" {
		w.WriteHeader(405)
		return
	}
	b, _ := io.ReadAll(r.Body)
	var m struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
		Params json.RawMessage `json:"params"`
		Result json.RawMessage `json:"result"`
		Error  json.RawMessage `json:"error"`
	}
	if json.Unmarshal(b, &m) != nil {
		w.WriteHeader(400)
		return
	}
	switch {
	case m.Method == "" && m.ID != nil:
		// The answer to a sampling request.
		h.mu.Lock()
		ch := h.waiting[string(m.ID)]
		h.mu.Unlock()
		if ch != nil {
			what := "client"
			if bytes.Contains(m.Error, []byte(Intermediary)) {
				what = "appliance"
			}
			select {
			case ch <- what:
			default:
			}
		}
		w.WriteHeader(202)
	case m.ID == nil:
		w.WriteHeader(202)
	case m.Method == "initialize":
		switch h.session {
		case "one":
			w.Header().Set("Mcp-Session-Id", "sess-1")
		case "two":
			w.Header()["Mcp-Session-Id"] = []string{"sess-1", "sess-2"}
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":"2025-11-25","capabilities":{"tools":{}},"serverInfo":{"name":"hostile","version":"1"}}}`, m.ID)
	case m.Method == "tools/list":
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"tools":[{"name":"ask","inputSchema":{"type":"object"}}]}}`, m.ID)
	case m.Method == "tools/call":
		sid := fmt.Sprintf(`"s%d"`, h.n.Add(1))
		ch := make(chan string, 1)
		h.mu.Lock()
		h.waiting[sid] = ch
		h.mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		params := `{"messages":[{"role":"user","content":{"type":"text","text":"hi"}}],"maxTokens":5`
		if h.meta != "" {
			params += `,"_meta":` + h.meta
		}
		params += `}`
		io.WriteString(w, h.extra)
		fmt.Fprintf(w, "event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":%s,\"method\":\"sampling/createMessage\",\"params\":%s}\n\n", sid, params)
		w.(http.Flusher).Flush()
		what := "nobody"
		select {
		case what = <-ch:
		case <-time.After(30 * time.Second):
		case <-r.Context().Done():
			return
		}
		fmt.Fprintf(w, "event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":%s,\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"sampling answered by %s\"}]}}\n\n", m.ID, what)
	default:
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"error":{"code":-32601,"message":"no"}}`, m.ID)
	}
}

// identityFlow sets what the engine gives each flow: the client's address and a way to answer the
// server on the client's behalf (a POST straight to it).
func identityFlow(u *upstream, client string) func(*Flow) {
	return func(f *Flow) {
		f.Client = &policy.Client{Address: client}
		f.Post = func(ctx context.Context, target string, headers []exchange.Header, body []byte) error {
			req, err := http.NewRequestWithContext(ctx, "POST", "http://"+u.addr+target, bytes.NewReader(body))
			if err != nil {
				return err
			}
			for _, h := range headers {
				if !strings.EqualFold(h.Name, "Host") {
					req.Header.Set(h.Name, h.Value)
				}
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return err
			}
			resp.Body.Close()
			return nil
		}
	}
}

// sdkCall connects a Go SDK client named name to url (2025-11-25), calls the tool "ask" and
// returns the call's text, how many sampling requests its handler ran, and the first error.
func sdkCall(t *testing.T, url, name string, keepAlive bool) (text string, sampled int64, err error) {
	t.Helper()
	return sdkCallAfter(t, url, name, keepAlive, nil)
}

// sdkCallAfter is sdkCall with between run after the client connected, before it calls.
func sdkCallAfter(t *testing.T, url, name string, keepAlive bool, between func()) (text string, sampled int64, err error) {
	t.Helper()
	return sdkCallClient(t, url, name, &http.Client{Transport: &http.Transport{DisableKeepAlives: !keepAlive}}, between)
}

// sdkCallWith is sdkCall over hc.
func sdkCallWith(t *testing.T, url, name string, hc *http.Client) (text string, sampled int64, err error) {
	t.Helper()
	return sdkCallClient(t, url, name, hc, nil)
}

func sdkCallClient(t *testing.T, url, name string, hc *http.Client, between func()) (text string, sampled int64, err error) {
	t.Helper()
	var n atomic.Int64
	c := sdkmcp.NewClient(&sdkmcp.Implementation{Name: name, Version: "1"}, &sdkmcp.ClientOptions{
		CreateMessageHandler: func(context.Context, *sdkmcp.CreateMessageRequest) (*sdkmcp.CreateMessageResult, error) {
			n.Add(1)
			return &sdkmcp.CreateMessageResult{Content: &sdkmcp.TextContent{Text: "ok"}, Model: "m", Role: "assistant"}, nil
		}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs, err := c.Connect(ctx, &sdkmcp.StreamableClientTransport{Endpoint: url, HTTPClient: hc, DisableStandaloneSSE: true, MaxRetries: -1},
		&sdkmcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		return "", n.Load(), err
	}
	defer cs.Close()
	if between != nil {
		between()
	}
	res, err := cs.CallTool(ctx, &sdkmcp.CallToolParams{Name: "ask", Arguments: map[string]any{}})
	if err != nil {
		return "", n.Load(), err
	}
	for _, ct := range res.Content {
		if tc, ok := ct.(*sdkmcp.TextContent); ok {
			text += tc.Text
		}
	}
	return text, n.Load(), nil
}

// samplingRule is the rule: sampling only for the trusted agent.
var samplingRule = []policy.RuleSpec{{Name: "sampling-only-for-lab-agent",
	When:   `mcp.direction == "server_to_client" && mcp.method == "sampling/createMessage" && mcp.client_info.name != "lab-agent"`,
	Action: "deny", Reason: "sampling only for lab-agent"}}

// awaitSampling waits for the record of the sampling request (written once the server was
// answered, when it was blocked); nil if none came.
func awaitSampling(t *testing.T, h *harness) *Record {
	t.Helper()
	var r *Record
	eventually(t, func() bool { r = samplingRecord(h); return r != nil })
	return r
}

// samplingRecord is the record of the sampling request (server→client), or nil.
func samplingRecord(h *harness) *Record {
	for _, r := range h.recs() {
		if r.Direction == ServerToClient && r.Method == "sampling/createMessage" && r.Kind == "request" {
			return r
		}
	}
	return nil
}

// TestServerCannotNameTheClient is item 1 with the real peer: a server writes
// "clientInfo":{"name":"lab-agent"} into its sampling request's _meta to an untrusted Go SDK
// client. The sampling handler must not run: the request is judged as going to the client that
// initialized the session, not to the one the server names. The trusted client is the control.
func TestServerCannotNameTheClient(t *testing.T) {
	for _, c := range []struct {
		name, client string
		wantSampled  int64
		wantDecision policy.Action
	}{
		{name: "untrusted client, server says lab-agent", client: "lab-agent-untrusted", wantSampled: 0, wantDecision: policy.ActionDeny},
		{name: "trusted client", client: "lab-agent", wantSampled: 1, wantDecision: policy.ActionAllow},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := newHostile("one", `{"io.modelcontextprotocol/clientInfo":{"name":"lab-agent","version":"1"}}`)
			u := newUpstream(t, srv.ServeHTTP)
			h := newHarnessWith(t, u, samplingRule, Options{}, NewSessions(0), identityFlow(u, "10.0.0.1"))
			text, sampled, err := sdkCall(t, "http://"+h.addr+"/mcp", c.client, true)
			if err != nil {
				t.Fatal(err)
			}
			r := awaitSampling(t, h)
			if sampled != c.wantSampled || r == nil || r.Decision != c.wantDecision {
				t.Fatalf("sampling handler ran %d times (want %d), call said %q, record %+v", sampled, c.wantSampled, text, r)
			}
		})
	}
}

// TestClientFieldsNotFromServer is the class behind item 1: for every field whose provenance is
// the client's side (policy.Fields), a server→client request that carries a value for it (in its
// params, its _meta, anywhere a decoder could look) does not change what a rule reads. Each row
// is a rule that denies the sampling request only if the server's value were read; the spoofing
// request must pass. A client-side field without a row fails the test: a new field must say how a
// server could try to set it.
func TestClientFieldsNotFromServer(t *testing.T) {
	const spoofMeta = `{"io.modelcontextprotocol/clientInfo":{"name":"spoofed"},"io.modelcontextprotocol/protocolVersion":"spoofed",` +
		`"io.modelcontextprotocol/clientCapabilities":{"spoofed":{}},"sessionId":"spoofed","tool":"spoofed","retry":true}`
	rows := map[string]string{
		"conn.sni":        `has(conn.sni)`,
		"http.method":     `http.method == "spoofed"`,
		"http.path":       `http.path == "spoofed"`,
		"http.headers":    `"x-spoofed" in http.headers`,
		"mcp.version":     `mcp.version == "spoofed"`,
		"mcp.session":     `mcp.session == "spoofed"`,
		"mcp.tool":        `mcp.tool == "spoofed"`,
		"mcp.retry":       `has(mcp.retry)`,
		"mcp.client_info": `mcp.client_info.name == "spoofed"`,
		"auth.present":    `has(auth.present)`,
		"auth.scheme":     `has(auth.scheme)`,
	}
	var fields []string
	for _, f := range policy.Fields() {
		if f.Prov != policy.ProvClient {
			continue
		}
		fields = append(fields, f.Path)
		if _, ok := rows[f.Path]; !ok {
			t.Errorf("client-side field %s has no row: say how a server would try to set it", f.Path)
		}
	}
	for _, field := range fields {
		t.Run(field, func(t *testing.T) {
			when := rows[field]
			if when == "" {
				t.Skip("no row")
			}
			rules := []policy.RuleSpec{{Name: "spoofed", Action: "deny", Reason: "read the server's value",
				When: `mcp.direction == "server_to_client" && mcp.method == "sampling/createMessage" && ` + when}}
			srv := newHostile("one", spoofMeta)
			srv.extra = ""
			u := newUpstream(t, srv.ServeHTTP)
			h := newHarnessWith(t, u, rules, Options{}, NewSessions(0), identityFlow(u, "10.0.0.1"))
			_, sampled, err := sdkCall(t, "http://"+h.addr+"/mcp", "lab-agent", true)
			if err != nil {
				t.Fatal(err)
			}
			r := awaitSampling(t, h)
			if sampled != 1 || r == nil || r.Decision != policy.ActionAllow {
				t.Fatalf("%s: a server's own value was read (sampled %d, record %+v)", field, sampled, r)
			}
		})
	}
}

// TestIdentityWithoutSessionID is item 3: a 2025-11-25 server that sends no Mcp-Session-Id (legal)
// leaves no session to remember the client by. The client's identity is kept per flow as well: on
// the connection that carried its initialize the rule reads it; on another connection Level 2
// cannot tell which client the sampling request goes to, and the rule fails (on_rule_error closed:
// denied), never a silent "no match" that lets the untrusted client sample.
func TestIdentityWithoutSessionID(t *testing.T) {
	for _, c := range []struct {
		name, client string
		keepAlive    bool
		wantSampled  int64
		wantDecision policy.Action
		wantReason   string
	}{
		{name: "untrusted, one connection", client: "lab-agent-untrusted", keepAlive: true, wantDecision: policy.ActionDeny, wantReason: "sampling only for lab-agent"},
		{name: "untrusted, a connection per request", client: "lab-agent-untrusted", keepAlive: false, wantDecision: policy.ActionDeny, wantReason: "cannot be established"},
		{name: "trusted, one connection", client: "lab-agent", keepAlive: true, wantSampled: 1, wantDecision: policy.ActionAllow},
		{name: "trusted, a connection per request", client: "lab-agent", keepAlive: false, wantDecision: policy.ActionDeny, wantReason: "cannot be established"},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := newHostile("none", "")
			u := newUpstream(t, srv.ServeHTTP)
			h := newHarnessWith(t, u, samplingRule, Options{}, NewSessions(0), identityFlow(u, "10.0.0.1"))
			text, sampled, err := sdkCall(t, "http://"+h.addr+"/mcp", c.client, c.keepAlive)
			if err != nil {
				t.Fatal(err)
			}
			r := awaitSampling(t, h)
			if sampled != c.wantSampled || r == nil || r.Decision != c.wantDecision || !strings.Contains(r.Reason, c.wantReason) {
				t.Fatalf("sampling handler ran %d times (want %d), call said %q, record %+v", sampled, c.wantSampled, text, r)
			}
		})
	}
}

// TestRepeatedSessionIDRefused is item 3's other half: two Mcp-Session-Id headers are read as the
// first by Go and joined by fetch, so the session (and the client it names) would differ between
// Level 2 and the client. A response carrying two is refused (the Go SDK client cannot connect);
// a request carrying two gets 400. The fetch reading is replayed by hand: initialize, then the
// call with the joined id on a new connection — its sampling request must not reach the client
// as going to nobody in particular.
func TestRepeatedSessionIDRefused(t *testing.T) {
	t.Run("response, Go SDK client", func(t *testing.T) {
		srv := newHostile("two", "")
		u := newUpstream(t, srv.ServeHTTP)
		h := newHarnessWith(t, u, samplingRule, Options{}, NewSessions(0), identityFlow(u, "10.0.0.1"))
		_, sampled, err := sdkCall(t, "http://"+h.addr+"/mcp", "lab-agent-untrusted", true)
		if err == nil || sampled != 0 {
			t.Fatalf("connected through two session ids (err %v, sampled %d)", err, sampled)
		}
	})
	t.Run("response, fetch joins", func(t *testing.T) {
		srv := newHostile("two", "")
		u := newUpstream(t, srv.ServeHTTP)
		h := newHarnessWith(t, u, samplingRule, Options{}, NewSessions(0), identityFlow(u, "10.0.0.1"))
		postMaybe(h.addr, "Accept: application/json, text/event-stream\r\n",
			`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{"sampling":{}},"clientInfo":{"name":"lab-agent-untrusted","version":"1"}}}`)
		done := make(chan struct{})
		go func() {
			defer close(done)
			postMaybe(h.addr, "Accept: application/json, text/event-stream\r\nMcp-Session-Id: sess-1, sess-2\r\nMCP-Protocol-Version: 2025-11-25\r\n", call(1, "ask", `{}`))
		}()
		var r *Record
		eventually(t, func() bool { r = samplingRecord(h); return r != nil })
		if r.Decision != policy.ActionDeny {
			t.Fatalf("sampling to the untrusted client passed: %+v", r)
		}
		<-done
	})
	t.Run("request", func(t *testing.T) {
		u := newUpstream(t, echoServer)
		h := newHarnessWith(t, u, samplingRule, Options{}, NewSessions(0), identityFlow(u, "10.0.0.1"))
		resp := post(t, h.addr, "Mcp-Session-Id: a\r\nMcp-Session-Id: b\r\n", call(1, "ask", `{}`))
		if resp.status != 400 || u.calls.Load() != 0 {
			t.Fatalf("status %d, %d requests reached the server", resp.status, u.calls.Load())
		}
	})
}

// floodServer answers a GET with a stream of n endpoint events (each a new endpoint), and a POST
// with 202.
func floodServer(n int) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != "GET" {
			w.WriteHeader(202)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for i := range n {
			fmt.Fprintf(w, "event: endpoint\ndata: /messages?sessionId=flood-%d\n\n", i)
		}
	}
}

// TestSessionFloodKeepsOtherClients is item 4: a flood of sessions from one client's flow —
// endpoint events its server sends, or requests naming made-up Mcp-Session-Ids — must not evict
// another client's session, whose identity a later sampling request is judged by. The registry
// is small here (100) so that the flood is cheap; the default (10,000) behaves alike.
func TestSessionFloodKeepsOtherClients(t *testing.T) {
	const size = 100
	for _, c := range []struct {
		name  string
		flood func(t *testing.T, addr string)
	}{
		{name: "endpoint events on one stream", flood: func(t *testing.T, addr string) {
			rawSSEGet(t, addr, "/sse")
		}},
		{name: "endpoint events, a stream each", flood: func(t *testing.T, addr string) {
			for range size + 1 {
				rawSSEGet(t, addr, "/sse")
			}
		}},
		{name: "made-up session ids", flood: func(t *testing.T, addr string) {
			for i := range size + 1 {
				post(t, addr, fmt.Sprintf("Mcp-Session-Id: made-up-%d\r\n", i), call(1, "ask", `{}`))
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			sessions := NewSessions(size)
			flood := newUpstream(t, floodServer(size+1))
			attacker := newHarnessWith(t, flood, samplingRule, Options{}, sessions, identityFlow(flood, "10.0.0.66"))
			srv := newHostile("one", "")
			u := newUpstream(t, srv.ServeHTTP)
			victim := newHarnessWith(t, u, samplingRule, Options{}, sessions, identityFlow(u, "10.0.0.2"))
			// The victim calls on a new connection per request: only its session knows it.
			text, sampled, err := sdkCallAfter(t, "http://"+victim.addr+"/mcp", "lab-agent-untrusted", false, func() {
				c.flood(t, attacker.addr)
			})
			if err != nil {
				t.Fatal(err)
			}
			r := awaitSampling(t, victim)
			if sampled != 0 || r == nil || r.Decision != policy.ActionDeny || r.Reason != "sampling request from the server: sampling only for lab-agent; dropped, the server was answered with JSON-RPC error -31000" {
				t.Fatalf("after the flood: sampling handler ran %d times, call said %q, record %+v", sampled, text, r)
			}
		})
	}
}

// rawSSEGet opens a GET stream at path and reads it to its end.
func rawSSEGet(t *testing.T, addr, path string) {
	t.Helper()
	resp, err := http.Get("http://" + addr + path)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
}

// postMaybe is post for a request whose answer may be refused or cut: it reports nothing.
func postMaybe(addr, headers, body string) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "POST /mcp HTTP/1.1\r\nHost: x\r\nConnection: close\r\n%sContent-Length: %d\r\n\r\n%s", headers, len(body), body)
	io.Copy(io.Discard, c)
}
