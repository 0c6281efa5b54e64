package level2

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"mcpintercept/exchange"
	"mcpintercept/integrity"
	"mcpintercept/level1"
	"mcpintercept/mcp"
	"mcpintercept/policy"
	"mcpintercept/tracing"
)

// FuzzStage drives whole exchanges through the exchange pipeline with the Level 2 stage: a request
// body and headers from the fuzzer, a response (JSON or an event stream) from the fuzzer. It must
// never panic or hang; a request that reaches the server reaches it byte for byte as the client
// sent it; a refusal is a JSON-RPC error naming the appliance; and a denied tool never reaches the
// server.
func FuzzStage(f *testing.F) {
	f.Add([]byte(call(1, "echo", `{"text":"hi"}`)), []byte(`{"jsonrpc":"2.0","id":1,"result":{}}`), uint8(0))
	f.Add([]byte(callWithMeta(1, "echo")), []byte("data: "+samplingRequest+"\n\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"isError\":true}}\n\n"), uint8(12))
	f.Add([]byte(call(2, "denied_delete", `{}`)), []byte(`{"jsonrpc":"2.0","id":2,"result":{}}`), uint8(1))
	f.Add([]byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","name":"denied_x"}}`), []byte(`{}`), uint8(2))
	f.Add([]byte(`[`+call(1, "echo", `{}`)+`]`), []byte("event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n\n"), uint8(3))
	f.Add([]byte(`{"jsonrpc":"2.0","method":"notifications/initialized"}`), []byte("data: {\"jsonrpc\":\"2.0\",\"method\":\"x\"}\r\rdata: {\r\n\r\n"), uint8(4))
	f.Add([]byte(`not json`), []byte(`{"jsonrpc":"2.0","id":"a","error":{"code":-1,"message":"m"}}`), uint8(5))
	// Tool integrity: a guard quarantines every definition named q_*.
	f.Add([]byte(`{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}`), []byte(`{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"q_rug"},{"name":"echo"}]}}`), uint8(0))
	f.Add([]byte(call(3, "q_rug", `{}`)), []byte(`{"jsonrpc":"2.0","id":3,"result":{}}`), uint8(0))
	f.Add([]byte(`[`+call(1, "echo", `{}`)+`,{"jsonrpc":"2.0","id":2,"method":"prompts/get","params":{"name":"q_p"}}]`), []byte(`[]`), uint8(1))
	f.Add([]byte(`{"jsonrpc":"2.0","id":1,"method":"server/discover"}`), []byte("data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/tools/list_changed\"}\n\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"prompts\":[{\"name\":\"q_x\"}],\"resourceTemplates\":[{\"uriTemplate\":\"q_{x}\"}]}}\n\n"), uint8(6))
	set, err := policy.Compile([]policy.RuleSpec{{Name: "no-delete", When: `mcp.method == "tools/call" && mcp.name.startsWith("denied_")`, Action: "deny"}})
	if err != nil {
		f.Fatal(err)
	}
	// Mode bit 8 traces (record only, so the server still gets the client's bytes): spans
	// started, ended and dropped past the queue under whatever the fuzzer sends.
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer sink.Close()
	tr, err := tracing.Open(context.Background(), tracing.Config{Endpoint: sink.URL, Insecure: true, Ratio: 1, MaxQueue: 64}, nil, nil)
	if err != nil {
		f.Fatal(err)
	}
	defer tr.Shutdown(context.Background())
	f.Fuzz(func(t *testing.T, body, resp []byte, mode uint8) {
		if len(body) > 1<<16 || len(resp) > 1<<16 {
			return
		}
		headers := "Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
		switch mode % 4 {
		case 1:
			headers += "MCP-Protocol-Version: 2025-03-26\r\n"
		case 2:
			headers += "MCP-Protocol-Version: 2026-07-28\r\nMcp-Method: tools/call\r\nMcp-Name: echo\r\n"
		case 3:
			headers = "Content-Type: text/plain\r\n"
		}
		respType := "application/json"
		if mode&4 != 0 {
			respType = "text/event-stream"
		}
		cli, cliSide := net.Pipe()
		up, upSide := net.Pipe()
		got := make(chan []byte, 1)
		go func() { // the server
			defer upSide.Close()
			req, err := http.ReadRequest(bufio.NewReader(upSide))
			if err != nil {
				got <- nil
				return
			}
			b, _ := io.ReadAll(req.Body)
			got <- b
			fmt.Fprintf(upSide, "HTTP/1.1 200 OK\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n%s", respType, len(resp), resp)
		}()
		g := newFakeGuard()
		g.unknown = integrity.Verdict{} // learn: what the guard does not know passes
		fl := &Flow{Rules: func() Evaluator { return set }, Options: Options{MaxBody: 1 << 15}, Sessions: NewSessions(4), Tools: quarantineQ{g}}
		if mode&8 != 0 {
			fl.Tracer = tr
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		done := make(chan struct{})
		go func() {
			exchange.Serve(ctx, cliSide, up, []exchange.Stage{level1.NewClassifier(level1.Guards{}), fl.Stage()}, exchange.Options{}, nil)
			close(done)
		}()
		cli.SetDeadline(time.Now().Add(5 * time.Second))
		go fmt.Fprintf(cli, "POST /mcp HTTP/1.1\r\nHost: x\r\n%sContent-Length: %d\r\n\r\n%s", headers, len(body), body)
		r, err := http.ReadResponse(bufio.NewReader(cli), nil)
		var out []byte
		if err == nil {
			out, _ = io.ReadAll(r.Body)
		}
		cli.Close()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("Serve did not return")
		}
		var server []byte
		select {
		case server = <-got:
		default:
		}
		if server != nil && !bytes.Equal(server, body) {
			t.Fatalf("the server got %q, the client sent %q", server, body)
		}
		if server != nil {
			if ms, _, err := mcp.Decode(server, mcp.DecodeOptions{AllowBatch: true}); err == nil {
				for _, m := range ms {
					if m.Method == "tools/call" && len(m.Name()) >= 7 && m.Name()[:7] == "denied_" {
						t.Fatalf("a denied call reached the server: %q", server)
					}
					if (m.Method == "tools/call" || m.Method == "prompts/get") && strings.HasPrefix(m.Name(), "q_") {
						t.Fatalf("a quarantined call reached the server: %q", server)
					}
				}
			}
		}
		if err == nil && server != nil {
			// The client never sees a quarantined definition in a list it gets (in a stream:
			// the first event's data; a stream without one carries no message).
			got := out
			if mode&4 != 0 {
				got = sseData(out)
			}
			if ms, _, derr := mcp.Decode(trimLenient(got), mcp.DecodeOptions{AllowBatch: true}); derr == nil {
				for _, m := range ms {
					if m.Kind != mcp.KindResponse {
						continue
					}
					for _, k := range []listKind{toolsKind, promptsKind, templatesKind} {
						for _, d := range listDefs(m.Raw, []listKind{k}) {
							if strings.HasPrefix(d.Name, "q_") && listMethodOf(body, m) {
								t.Fatalf("quarantined %s %q reached the client: %q", d.Kind, d.Name, out)
							}
						}
					}
				}
			}
		}
		if err == nil && server == nil && r.StatusCode != 200 {
			// Refused locally: a JSON-RPC error (or a batch of them) naming the appliance.
			if !json.Valid(out) || !bytes.Contains(out, []byte(Intermediary)) {
				t.Fatalf("local refusal %d %q is not a JSON-RPC error naming %s", r.StatusCode, out, Intermediary)
			}
		}
	})
}

// quarantineQ is a guard that quarantines every definition whose name starts with q_.
type quarantineQ struct{ *fakeGuard }

func (g quarantineQ) Observe(srv integrity.Server, viewer string, defs []integrity.Def, whole bool) ([]integrity.Verdict, []integrity.Event) {
	vs := make([]integrity.Verdict, len(defs))
	for i, d := range defs {
		vs[i].Quarantined = strings.HasPrefix(d.Name, "q_")
	}
	return vs, nil
}

func (g quarantineQ) Lookup(srv integrity.Server, viewer string, kind integrity.Kind, name string) (integrity.Verdict, bool) {
	return integrity.Verdict{Quarantined: strings.HasPrefix(name, "q_"), Reason: "quarantined"}, true
}

// sseData is the data of the first SSE event in b (nil: none).
func sseData(b []byte) []byte {
	s := string(b)
	i := strings.Index(s, "data:")
	if i < 0 {
		return nil
	}
	s = s[i+5:]
	if j := strings.IndexByte(s, '\n'); j >= 0 {
		s = s[:j]
	}
	return []byte(s)
}

// listMethodOf reports whether the response m answers a list request of the client's body
// (only list results are filtered: a tools/call result holding a tools array is left alone).
func listMethodOf(body []byte, m *mcp.Message) bool {
	reqs, _, err := mcp.Decode(trimLenient(body), mcp.DecodeOptions{AllowBatch: true})
	if err != nil {
		return false
	}
	for _, q := range reqs {
		if q.Kind == mcp.KindRequest && idKey(q) == idKey(m) {
			_, ok := listMethods[q.Method]
			return ok
		}
	}
	return false
}
