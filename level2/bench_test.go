package level2

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"mcpintercept/exchange"
	"mcpintercept/level1"
	"mcpintercept/mcp"
	"mcpintercept/policy"
)

// toolsCall1K is a tools/call request of about 1 KiB, the shape a client sends.
var toolsCall1K = func() []byte {
	pad := strings.Repeat("lorem ipsum ", 60)
	b := fmt.Sprintf(`{"jsonrpc":"2.0","id":42,"method":"tools/call","params":{"name":"search_documents",`+
		`"arguments":{"query":"quarterly report","limit":10,"filters":{"owner":"alice","tags":["finance","q3"]},"note":%q},`+
		`"_meta":{"progressToken":"p-42","traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}}}`, pad)
	return []byte(b)
}()

// benchExchange runs b.N tools/call exchanges on one keep-alive connection through the exchange
// pipeline with the given stages, against a loopback server that answers a 1 KiB JSON result.
func benchExchange(b *testing.B, stages func() []exchange.Stage) {
	result := []byte(`{"jsonrpc":"2.0","id":42,"result":{"content":[{"type":"text","text":"` + strings.Repeat("x", 900) + `"}]}}`)
	srvLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer srvLn.Close()
	go func() {
		for {
			c, err := srvLn.Accept()
			if err != nil {
				return
			}
			go func() {
				br := bufio.NewReader(c)
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						c.Close()
						return
					}
					io.Copy(io.Discard, req.Body)
					fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(result), result)
				}
			}()
		}
	}()
	pxLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer pxLn.Close()
	go func() {
		c, err := pxLn.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", srvLn.Addr().String())
		if err != nil {
			return
		}
		exchange.Serve(context.Background(), c, up, stages(), exchange.Options{}, nil)
	}()
	c, err := net.Dial("tcp", pxLn.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	req := []byte(fmt.Sprintf("POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: %d\r\n\r\n%s", len(toolsCall1K), toolsCall1K))
	br := bufio.NewReader(c)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := c.Write(req); err != nil {
			b.Fatal(err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Fatalf("status %d", resp.StatusCode)
		}
	}
}

// BenchmarkExchangeLevel1 is the baseline: the Level 1 classifier only, bodies copied.
func BenchmarkExchangeLevel1(b *testing.B) {
	benchExchange(b, func() []exchange.Stage { return []exchange.Stage{level1.NewClassifier(level1.Guards{})} })
}

// BenchmarkExchangeLevel2 adds the Level 2 stage with two rules: both bodies read, decoded,
// judged and recorded.
func BenchmarkExchangeLevel2(b *testing.B) {
	set, err := policy.Compile([]policy.RuleSpec{
		{Name: "no-delete", When: `mcp.method == "tools/call" && mcp.name.startsWith("delete_")`, Action: "deny"},
		{Name: "no-etc", When: `mcp.method == "tools/call" && "path" in mcp.arguments && mcp.arguments.path.startsWith("/etc")`, Action: "deny"},
	})
	if err != nil {
		b.Fatal(err)
	}
	benchExchange(b, func() []exchange.Stage {
		f := &Flow{Rules: func() Evaluator { return set }, Sessions: NewSessions(0), Record: func(*Record) {}}
		return []exchange.Stage{level1.NewClassifier(level1.Guards{}), f.Stage()}
	})
}

// BenchmarkJudge is the per-message cost of Level 2 alone: decode a 1 KiB tools/call and evaluate
// two rules on its method, name and arguments.
func BenchmarkJudge(b *testing.B) {
	set, err := policy.Compile([]policy.RuleSpec{
		{Name: "no-delete", When: `mcp.method == "tools/call" && mcp.name.startsWith("delete_")`, Action: "deny"},
		{Name: "no-etc", When: `mcp.method == "tools/call" && "path" in mcp.arguments && mcp.arguments.path.startsWith("/etc")`, Action: "deny"},
	})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		m, err := mcp.DecodeMessage(toolsCall1K, mcp.DecodeOptions{})
		if err != nil {
			b.Fatal(err)
		}
		body := messageBody{st: &xstate{}, m: m}
		d := set.Evaluate(&policy.Input{Vars: policy.Vars{MCP: &policy.Message{Method: m.Method, Name: m.Name(),
			Direction: ClientToServer, Kind: m.Kind.String(), Body: &body}}})
		if d.Action != policy.ActionAllow {
			b.Fatal(d)
		}
	}
}
