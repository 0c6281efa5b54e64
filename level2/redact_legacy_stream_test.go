package level2

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"mcpintercept/policy"
)

// Issue 29 item 5, the class: a call's log and progress notifications (and the requests the
// server makes while answering it) do not always come on the call's own stream. On the
// 2024-11-05 HTTP+SSE transport everything, the result too, comes on the GET stream; on 2025-x
// a server may send them on the standalone GET stream, and a client (the TypeScript SDK) routes
// progress by its progressToken whatever the stream. A redact (or deny) rule on the call covers
// them there too, and every message still arrives, in its own event.

// redactLeaky redacts the canary in what the server sends for calls of the tool "leaky" only.
var redactLeaky = policy.RuleSpec{Name: "redact-leaky", When: `mcp.direction == "server_to_client" && mcp.method == "tools/call" && mcp.name == "leaky"`,
	Action: "redact", Redact: &policy.Redact{Patterns: []string{`CANARY-[0-9A-Za-z]+`}, Marker: "[REDACTED]"}}

// denyLeaky withholds everything the server sends for calls of "leaky".
var denyLeaky = policy.RuleSpec{Name: "deny-leaky", When: `mcp.direction == "server_to_client" && mcp.method == "tools/call" && mcp.name == "leaky"`,
	Action: "deny", Reason: "no leaky output"}

const (
	legacyLog      = `{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"log CANARY-log1"}}`
	legacyProgress = `{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"p","progress":1,"message":"progress CANARY-prog1"}}`
	legacySampling = `{"jsonrpc":"2.0","id":"s1","method":"sampling/createMessage","params":{"messages":[{"role":"user","content":{"type":"text","text":"sampling CANARY-samp1"}}],"maxTokens":5}}`
)

func callWithToken(id int, tool, token string) string {
	return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":%q,"arguments":{},"_meta":{"progressToken":%s}}}`, id, tool, token)
}

func TestRedactCoversLegacyCallStream(t *testing.T) {
	for _, c := range []struct {
		name   string
		rules  []policy.RuleSpec
		legacy bool     // 2024-11-05 HTTP+SSE (else 2025-x with an Mcp-Session-Id)
		calls  []string // POSTed, all outstanding when the stream's messages are sent
		on     int      // where the messages come: -1 the GET stream, i the SSE answer to calls[i]
		stream []string // the messages
		events int      // data events the client must get on that stream
		leaks  int      // canaries the client may get there
	}{
		{name: "legacy: the one pending call's log, progress and result", rules: []policy.RuleSpec{labRedact}, legacy: true,
			calls: []string{call(7, "leaky", `{}`)}, on: -1,
			stream: []string{legacyLog, legacyProgress, legacySampling, `{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"done CANARY-res1"}]}}`},
			events: 4},
		{name: "legacy: two calls pending, the rule names one of them", rules: []policy.RuleSpec{redactLeaky}, legacy: true,
			calls: []string{call(7, "benign", `{}`), call(8, "leaky", `{}`)}, on: -1,
			stream: []string{legacyLog, legacyProgress, `{"jsonrpc":"2.0","id":8,"result":{"content":[{"type":"text","text":"done CANARY-res1"}]}}`},
			events: 3},
		// Control: with no call of the rule's tool pending, the stream goes as the server sent it.
		{name: "legacy: no call of the rule's tool pending", rules: []policy.RuleSpec{redactLeaky}, legacy: true,
			calls: []string{call(7, "benign", `{}`)}, on: -1,
			stream: []string{legacyLog, legacyProgress, `{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"done CANARY-res1"}]}}`},
			events: 3, leaks: 3},
		{name: "legacy: a deny rule on the pending call drops its notifications", rules: []policy.RuleSpec{denyLeaky}, legacy: true,
			calls: []string{call(7, "leaky", `{}`)}, on: -1,
			stream: []string{legacyLog, legacyProgress, `{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"done CANARY-res1"}]}}`},
			events: 1}, // the result, replaced by the appliance's error
		{name: "2025 standalone GET: log and progress while the call is pending", rules: []policy.RuleSpec{redactLeaky},
			calls: []string{callWithToken(7, "leaky", `"tok"`)}, on: -1,
			stream: []string{legacyLog, `{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"tok","progress":1,"message":"progress CANARY-prog1"}}`},
			events: 2},
		// The TypeScript SDK reads "7" and 7 as one token (Number(token)).
		{name: "2025 another call's stream: progress by the pending call's token", rules: []policy.RuleSpec{redactLeaky},
			calls: []string{callWithToken(7, "leaky", `7`), call(8, "benign", `{}`)}, on: 1,
			stream: []string{`{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"7","progress":1,"message":"progress CANARY-prog1"}}`,
				`{"jsonrpc":"2.0","id":8,"result":{"content":[{"type":"text","text":"benign"}]}}`},
			events: 2},
		// Control: a token no pending call of the rule's tool holds is not that call's.
		{name: "2025 another call's stream: progress with an unknown token", rules: []policy.RuleSpec{redactLeaky},
			calls: []string{callWithToken(7, "leaky", `"tok"`), call(8, "benign", `{}`)}, on: 1,
			stream: []string{`{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"other","progress":1,"message":"progress CANARY-prog1"}}`,
				`{"jsonrpc":"2.0","id":8,"result":{"content":[{"type":"text","text":"benign"}]}}`},
			events: 2, leaks: 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			var mu sync.Mutex
			arrived := 0
			all := make(chan struct{}) // every call reached the server
			release := make(chan struct{})
			var once sync.Once
			defer once.Do(func() { close(release) })
			writeStream := func(w http.ResponseWriter) {
				w.Header().Set("Content-Type", "text/event-stream")
				for _, m := range c.stream {
					fmt.Fprintf(w, "event: message\ndata: %s\n\n", m)
				}
				w.(http.Flusher).Flush()
			}
			u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
				if r.Method == "GET" {
					w.Header().Set("Content-Type", "text/event-stream")
					if c.legacy {
						io.WriteString(w, "event: endpoint\ndata: /messages?sessionId=L\n\n")
					}
					w.(http.Flusher).Flush()
					if c.on >= 0 {
						<-r.Context().Done()
						return
					}
					<-all
					writeStream(w) // then the stream ends: the client reads to its end
					return
				}
				b, _ := io.ReadAll(r.Body)
				mu.Lock()
				arrived++
				i := -1
				for j, cl := range c.calls {
					if cl == string(b) {
						i = j
					}
				}
				if arrived == len(c.calls) {
					close(all)
				}
				mu.Unlock()
				if c.legacy {
					w.WriteHeader(202)
					return
				}
				if i == c.on {
					<-all
					writeStream(w)
					return
				}
				<-release // still outstanding while the stream's messages pass
				w.Header().Set("Content-Type", "application/json")
				fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%d,"result":{"content":[]}}`, 7+i)
			})
			h := newHarness(t, u, c.rules, Options{}, NewSessions(0))
			dial := func() net.Conn {
				conn, err := net.Dial("tcp", h.addr)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { conn.Close() })
				conn.SetDeadline(time.Now().Add(10 * time.Second))
				return conn
			}
			session := "Mcp-Session-Id: S\r\nMCP-Protocol-Version: 2025-06-18\r\n"
			target := "/mcp"
			var stream *bufio.Reader
			if c.legacy || c.on < 0 {
				g := dial()
				hdr := session
				if c.legacy {
					hdr = ""
				}
				fmt.Fprintf(g, "GET /sse HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n%s\r\n", hdr)
				resp, err := http.ReadResponse(bufio.NewReader(g), nil)
				if err != nil {
					t.Fatal(err)
				}
				stream = bufio.NewReader(resp.Body)
				if c.legacy {
					for {
						l, err := stream.ReadString('\n')
						if err != nil {
							t.Fatal(err)
						}
						if strings.HasPrefix(l, "data: /messages") {
							break
						}
					}
					target, session = "/messages?sessionId=L", ""
				}
			}
			posts := make([]*bufio.Reader, len(c.calls))
			for i, body := range c.calls {
				p := dial()
				fmt.Fprintf(p, "POST %s HTTP/1.1\r\nHost: x\r\n%s%sContent-Length: %d\r\n\r\n%s", target, jsonHeaders, session, len(body), body)
				posts[i] = bufio.NewReader(p)
				if c.legacy {
					if r, err := http.ReadResponse(posts[i], nil); err != nil || r.StatusCode != 202 {
						t.Fatalf("POST: %v %v", r, err)
					}
				}
			}
			if c.on >= 0 {
				resp, err := http.ReadResponse(posts[c.on], nil)
				if err != nil {
					t.Fatal(err)
				}
				stream = bufio.NewReader(resp.Body)
			}
			b, _ := io.ReadAll(stream)
			var events []string
			for _, l := range strings.Split(string(b), "\n") {
				if strings.HasPrefix(l, "data:") {
					events = append(events, l)
				}
			}
			once.Do(func() { close(release) })
			if leaks := canaryRE.FindAllString(strings.Join(events, "\n"), -1); len(leaks) != c.leaks {
				t.Errorf("%d canaries reached the client, want %d: %q\n%s", len(leaks), c.leaks, leaks, strings.Join(events, "\n"))
			}
			if len(events) != c.events {
				t.Errorf("%d events, want %d:\n%s", len(events), c.events, strings.Join(events, "\n"))
			}
			for _, rec := range h.recs() {
				if canaryRE.MatchString(rec.Reason + rec.Err) {
					t.Errorf("a record carries the canary: %+v", rec)
				}
			}
		})
	}
}
