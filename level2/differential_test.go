package level2

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdkmcp "github.com/modelcontextprotocol/go-sdk/mcp"

	"mcpintercept/exchange"
	"mcpintercept/level1"
	"mcpintercept/mcp"
	"mcpintercept/policy"
)

// FuzzPeerDifferential runs the Go SDK's own JSON-RPC decoding (go-sdk jsonrpc.DecodeMessage and
// its mcp.CallToolParams, in process) over what Level 2 lets through, on both sides of a whole
// exchange driven through the real pipeline: the bytes the server receives, read as the Go SDK
// server reads a POST, and the bytes the client receives, read as the Go SDK clients read a JSON
// body or an event stream (Streamable HTTP and the legacy HTTP+SSE GET stream). It fails when the
// SDK would dispatch a message that Level 2 did not judge (no record names it), a message that
// policy denies (a tools/call of denied_*, any sampling/createMessage), or a value that policy
// redacts (CANARY-…). The inputs that showed the review's bypasses are its seeds; the corpus is
// committed under testdata/fuzz/FuzzPeerDifferential. The TypeScript SDK's readings are checked
// the same way end to end (e2e/differential_ts_test.go), through node.
//
// The SDK's SSE line scanner is unexported (mcp/event.go scanEvents); sdkEvents below restates
// it line for line: LF line ends only, `name:value` lines (no colon ends the stream), data values
// bytes.TrimSpace'd and joined with LF.
func FuzzPeerDifferential(f *testing.F) {
	seeds := []struct {
		req, resp string
		mode      uint8
	}{
		{call(1, "echo", `{}`), samplingRequest, 0},
		{call(1, "echo", `{}`), `[` + samplingRequest + `,{"jsonrpc":"2.0","id":1,"result":{}}]`, 0},
		{call(1, "echo", `{}`), "data: \v" + samplingRequest + "\n\n", 1},
		{call(1, "echo", `{}`), "data: \f" + samplingRequest + "\n\n", 1},
		{call(1, "echo", `{}`), "data: \u00a0" + samplingRequest + "\n\n", 1},
		{call(1, "echo", `{}`), "data:\r" + samplingRequest + "\n\n", 1},
		{call(1, "echo", `{}`), "data:\r\r" + samplingRequest + "\n\n", 1},
		{"", "event: endpoint\ndata: /m?sessionId=a\n\nevent: endpoint\ndata: " + samplingRequest + "\n\n", 2},
		{"", "event: endpoint\ndata: /m?sessionId=a\n\nevent: other\ndata: " + samplingRequest + "\n\n", 2},
		{"\ufeff" + `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"denied_delete"}}`, `{"jsonrpc":"2.0","id":7,"result":{}}`, 0 | 1<<4},
		{`{"jsonrpc":"2.0","id":1.0,"method":"tools/list"}`, `{"jsonrpc":"2.0","id":1,"result":{"tools":[],"x":"CANARY-1"}}`, 0},
		{`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`, `{"jsonrpc":"2.0","id":1.0,"result":{"x":"CANARY-1"}}`, 0},
		{call(1, "echo", `{}`), `{"jsonrpc":"2.0","id":1,"error":{"code":1,"message":"CANARY-2"}}`, 0},
		{call(1, "echo", `{}`), `{"jsonrpc":"2.0","id":1,"result":{"a":"\u0043ANARY-3"}}`, 0},
		{call(1, "echo", `{}`), "data: {\"jsonrpc\":\"2.0\",\ndata:  \"id\":1,\"result\":{\"t\":\"CANARY-4\"}}\n\n", 1},
		{call(1, "echo", `{}`), "", 0},
	}
	for _, s := range seeds {
		f.Add([]byte(s.req), []byte(s.resp), s.mode)
	}
	set := differentialRules(f)
	f.Fuzz(func(t *testing.T, req, resp []byte, mode uint8) {
		if len(req) > 1<<14 || len(resp) > 1<<14 {
			return
		}
		runDifferential(t, set, req, resp, mode)
	})
}

// requestTypes are Content-Types a client might send; respTypes those of the response. Each is
// one the Go SDK or the TypeScript SDK reads as JSON (or a stream), spelt as a lenient peer
// forgives.
var (
	requestTypes = []string{"application/json", "\xa0application/json", "text/plain; q=application/json", "", "Application/JSON ; charset=utf-8"}
	jsonTypes    = []string{"application/json", "application/json; charset=utf-8", " application/json", "text/plain, application/json", ""}
)

var canaryRE = regexp.MustCompile(`CANARY-[0-9A-Za-z]+`)

func runDifferential(t *testing.T, set *policy.Set, req, resp []byte, mode uint8) {
	stream := mode & 3 // 0 JSON body, 1 event stream on a POST, 2 legacy GET stream, 3 event stream typed loosely
	reqType := requestTypes[int(mode>>4)%len(requestTypes)]
	respType := jsonTypes[int(mode>>2)%4]
	switch stream {
	case 1, 2:
		respType = "text/event-stream"
	case 3:
		respType = "text/event-stream; charset=utf-8"
	}
	cli, cliSide := net.Pipe()
	up, upSide := net.Pipe()
	got := make(chan []byte, 1)
	go func() { // the server: reads one request, answers with resp
		defer upSide.Close()
		r, err := http.ReadRequest(bufio.NewReader(upSide))
		if err != nil {
			got <- nil
			return
		}
		b, _ := io.ReadAll(r.Body)
		got <- b
		fmt.Fprintf(upSide, "HTTP/1.1 200 OK\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n%s", respType, len(resp), resp)
	}()
	var mu sync.Mutex
	var recs []*Record
	fl := &Flow{Rules: func() Evaluator { return set }, Options: Options{MaxBody: 1 << 15}, Sessions: NewSessions(4),
		Record: func(r *Record) { mu.Lock(); recs = append(recs, r); mu.Unlock() }}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	done := make(chan struct{})
	go func() {
		exchange.Serve(ctx, cliSide, up, []exchange.Stage{level1.NewClassifier(level1.Guards{}), fl.Stage()}, exchange.Options{CloseUnsolicited: true}, nil)
		close(done)
	}()
	cli.SetDeadline(time.Now().Add(20 * time.Second))
	go func() {
		if stream == 2 {
			io.WriteString(cli, "GET /sse HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n")
			return
		}
		ct := ""
		if reqType != "" {
			ct = "Content-Type: " + reqType + "\r\n"
		}
		fmt.Fprintf(cli, "POST /mcp HTTP/1.1\r\nHost: x\r\n%sAccept: application/json, text/event-stream\r\nContent-Length: %d\r\n\r\n%s", ct, len(req), req)
	}()
	r, err := http.ReadResponse(bufio.NewReader(cli), nil)
	var out []byte
	if err == nil {
		out, _ = io.ReadAll(r.Body)
	}
	cli.Close()
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatal("Serve did not return")
	}
	var server []byte
	select {
	case server = <-got:
	default:
	}
	mu.Lock()
	defer mu.Unlock()

	// The server side, as the Go SDK server reads a POST (readBatch, then CallToolParams).
	if server != nil && stream != 2 {
		for _, m := range sdkServerMessages(server) {
			rq, ok := m.(*jsonrpc.Request)
			if !ok {
				continue
			}
			if !judged(recs, ClientToServer, rq.Method, rq.ID) {
				t.Fatalf("the server would dispatch %s (id %v) that Level 2 did not judge; body %q, records %s", rq.Method, rq.ID.Raw(), server, dumpRecords(recs))
			}
			if rq.Method == "tools/call" {
				var p sdkmcp.CallToolParams
				if json.Unmarshal(rq.Params, &p) == nil && strings.HasPrefix(p.Name, "denied_") {
					t.Fatalf("a denied call reached the server as the Go SDK reads it: %q", server)
				}
			}
		}
	}
	if err != nil {
		return // the client got no answer it could read: nothing dispatched
	}
	// The client side, as the Go SDK clients read the answer.
	for _, m := range sdkClientMessages(r.Header.Get("Content-Type"), out, stream == 2) {
		switch v := m.msg.(type) {
		case *jsonrpc.Request:
			if v.Method == "sampling/createMessage" {
				t.Fatalf("the client would dispatch a denied sampling request: %q", out)
			}
			if !judged(recs, ServerToClient, v.Method, v.ID) {
				t.Fatalf("the client would dispatch %s that Level 2 did not judge: %q; records %s", v.Method, out, dumpRecords(recs))
			}
		case *jsonrpc.Response:
			if !judged(recs, "", "", v.ID) && !bytes.Contains(m.raw, []byte(Intermediary)) {
				t.Fatalf("the client would dispatch a response (id %v) that Level 2 did not judge: %q; records %s", v.ID.Raw(), out, dumpRecords(recs))
			}
		}
		if canary := findCanary(m.raw); canary != "" {
			t.Fatalf("the client would read %s, which policy redacts: %q", canary, out)
		}
	}
}

// judged reports a record of a message with that direction ("" any), method ("" any) and id.
func judged(recs []*Record, dir, method string, id jsonrpc.ID) bool {
	for _, r := range recs {
		if (dir == "" || r.Direction == dir) && (method == "" || r.Method == method) && sameID(r, id) {
			return true
		}
	}
	return false
}

func sameID(r *Record, id jsonrpc.ID) bool {
	switch v := id.Raw().(type) {
	case nil:
		return r.ID == ""
	case string:
		q, _ := json.Marshal(v)
		return r.key == idKey(&mcp.Message{ID: q}) || (r.key == "" && r.ID == v)
	case int64:
		return r.key == fmt.Sprintf("n:%d", v)
	}
	return false
}

func dumpRecords(recs []*Record) string {
	var b strings.Builder
	for _, r := range recs {
		fmt.Fprintf(&b, "\n  %s %s %s id=%q key=%q %s %s", r.Direction, r.Kind, r.Method, r.ID, r.key, r.Decision, r.Reason)
	}
	return b.String()
}

// findCanary decodes raw as a JSON value the way a client does (escapes undone) and returns a
// string or key that the redact rule's pattern matches.
func findCanary(raw []byte) string {
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return canaryRE.FindString(string(raw))
	}
	var walk func(any) string
	walk = func(v any) string {
		switch x := v.(type) {
		case string:
			return canaryRE.FindString(x)
		case map[string]any:
			for k, e := range x {
				if c := canaryRE.FindString(k); c != "" {
					return c
				}
				if c := walk(e); c != "" {
					return c
				}
			}
		case []any:
			for _, e := range x {
				if c := walk(e); c != "" {
					return c
				}
			}
		}
		return ""
	}
	return walk(v)
}

// sdkServerMessages is mcp/transport.go readBatch of go-sdk v1.8: an array of messages first,
// else one message, each through jsonrpc.DecodeMessage.
func sdkServerMessages(body []byte) []jsonrpc.Message {
	var batch []json.RawMessage
	if json.Unmarshal(body, &batch) == nil {
		var out []jsonrpc.Message
		for _, raw := range batch {
			m, err := jsonrpc.DecodeMessage(raw)
			if err != nil {
				return nil
			}
			out = append(out, m)
		}
		return out
	}
	if m, err := jsonrpc.DecodeMessage(body); err == nil {
		return []jsonrpc.Message{m}
	}
	return nil
}

type sdkMessage struct {
	msg jsonrpc.Message
	raw []byte
}

// sdkClientMessages is what the Go SDK clients dispatch from an answer: a JSON body (by
// mime.ParseMediaType) decoded whole; an event stream's events, of type message (Streamable
// HTTP) or of any type after the first endpoint event (the legacy SSE client).
func sdkClientMessages(ctype string, body []byte, legacy bool) []sdkMessage {
	mt, _, _ := mime.ParseMediaType(ctype)
	var out []sdkMessage
	add := func(data []byte) {
		if m, err := jsonrpc.DecodeMessage(data); err == nil {
			out = append(out, sdkMessage{m, data})
		}
	}
	switch mt {
	case "application/json":
		add(body)
	case "text/event-stream":
		for i, ev := range sdkEvents(body) {
			switch {
			case legacy && i == 0:
				// the endpoint event
			case legacy, ev.name == "" || ev.name == "message":
				if len(ev.data) > 0 {
					add(ev.data)
				}
			}
		}
	}
	return out
}

type sdkEvent struct {
	name string
	data []byte
}

// sdkEvents restates go-sdk v1.8 mcp/event.go scanEvents.
func sdkEvents(body []byte) []sdkEvent {
	var out []sdkEvent
	var ev sdkEvent
	var data *bytes.Buffer
	flush := func() {
		if data != nil {
			ev.data = data.Bytes()
		}
		out = append(out, ev)
		ev, data = sdkEvent{}, nil
	}
	for len(body) > 0 {
		line := body
		eof := true
		if i := bytes.IndexByte(body, '\n'); i >= 0 {
			line, body, eof = body[:i+1], body[i+1:], false
		} else {
			body = nil
		}
		line = bytes.TrimRight(line, "\r\n")
		if len(line) == 0 {
			flush()
			continue
		}
		before, after, found := bytes.Cut(line, []byte{':'})
		if !found {
			return out
		}
		switch string(before) {
		case "event":
			ev.name = strings.TrimSpace(string(after))
		case "data":
			if data == nil {
				data = new(bytes.Buffer)
			} else {
				data.WriteByte('\n')
			}
			data.Write(bytes.TrimSpace(after))
		}
		if eof {
			flush()
		}
	}
	return out
}

// TestPeerDifferentialSeeds runs the differential over each seed by name, so that a regression
// names the bypass it reopens.
func TestPeerDifferentialSeeds(t *testing.T) {
	set := differentialRules(t)
	// The oracle itself must see the tricks: each response below is one the Go SDK dispatches.
	for _, c := range []struct {
		name, ctype, body string
		legacy            bool
	}{
		{"sampling in a JSON body", "application/json", samplingRequest, false},
		{"vertical tab in SSE data", "text/event-stream", "data: \v" + samplingRequest + "\n\n", false},
		{"CR after data:", "text/event-stream", "data:\r" + samplingRequest + "\n\n", false},
		{"second endpoint event", "text/event-stream", "event: endpoint\ndata: /m\n\nevent: endpoint\ndata: " + samplingRequest + "\n\n", true},
	} {
		if ms := sdkClientMessages(c.ctype, []byte(c.body), c.legacy); len(ms) != 1 {
			t.Errorf("oracle %s: the Go SDK reading gives %d messages, want 1", c.name, len(ms))
		}
	}
	for _, mode := range []uint8{0, 1, 2, 1 << 4, 2 << 4, 4, 3} {
		for _, c := range []struct{ name, req, resp string }{
			{"sampling in JSON", call(1, "echo", `{}`), samplingRequest},
			{"sampling in a batch", call(1, "echo", `{}`), `[` + samplingRequest + `,{"jsonrpc":"2.0","id":1,"result":{}}]`},
			{"SSE \\v", call(1, "echo", `{}`), "data: \v" + samplingRequest + "\n\n"},
			{"SSE NBSP", call(1, "echo", `{}`), "data: \u00a0" + samplingRequest + "\n\n"},
			{"SSE CR", call(1, "echo", `{}`), "data:\r" + samplingRequest + "\n\n"},
			{"endpoint event", "", "event: endpoint\ndata: /m?sessionId=a\n\nevent: endpoint\ndata: " + samplingRequest + "\n\n"},
			{"BOM request", "\ufeff" + `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"denied_delete"}}`, `{"jsonrpc":"2.0","id":7,"result":{}}`},
			{"id 1.0", `{"jsonrpc":"2.0","id":1.0,"method":"tools/list"}`, `{"jsonrpc":"2.0","id":1,"result":{"x":"CANARY-1"}}`},
			{"server id 1.0", call(1, "echo", `{}`), `{"jsonrpc":"2.0","id":1.0,"result":{"x":"CANARY-1"}}`},
			{"error message canary", call(1, "echo", `{}`), `{"jsonrpc":"2.0","id":1,"error":{"code":1,"message":"CANARY-2"}}`},
			{"escaped canary", call(1, "echo", `{}`), `{"jsonrpc":"2.0","id":1,"result":{"a":"\u0043ANARY-3"}}`},
		} {
			t.Run(fmt.Sprintf("%s/mode%d", c.name, mode), func(t *testing.T) {
				runDifferential(t, set, []byte(c.req), []byte(c.resp), mode)
			})
		}
	}
}

// differentialRules deny every sampling request and denied_* tool and redact canaries, so that
// what a peer dispatches can be checked against them without knowing the client.
func differentialRules(tb testing.TB) *policy.Set {
	set, err := policy.Compile([]policy.RuleSpec{
		{Name: "deny-denied-tools", When: `mcp.method == "tools/call" && mcp.name.startsWith("denied_")`, Action: "deny"},
		{Name: "no-sampling", When: `mcp.direction == "server_to_client" && mcp.method == "sampling/createMessage"`, Action: "deny"},
		{Name: "redact-canary", When: `mcp.direction == "server_to_client"`, Action: "redact",
			Redact: &policy.Redact{Patterns: []string{`CANARY-[0-9A-Za-z]+`}}},
	})
	if err != nil {
		tb.Fatal(err)
	}
	return set
}
