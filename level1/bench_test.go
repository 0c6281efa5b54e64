package level1

import (
	"context"
	"io"
	"net"
	"strconv"
	"sync/atomic"
	"testing"

	"mcpintercept/exchange"
	"mcpintercept/policy"
)

// mcpRequest is a Streamable HTTP tools/call as an SDK sends it: ten headers and a small body.
const mcpBody = `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"get_weather","arguments":{"city":"Paris"}}}`

var mcpRequest = "POST /mcp HTTP/1.1\r\n" +
	"Host: mcp.example.com:8080\r\n" +
	"User-Agent: node\r\n" +
	"Accept: application/json, text/event-stream\r\n" +
	"Content-Type: application/json\r\n" +
	"Mcp-Protocol-Version: 2026-07-28\r\n" +
	"Mcp-Method: tools/call\r\n" +
	"Mcp-Name: get_weather\r\n" +
	"Mcp-Session-Id: 5f1c2a9e-4b7d-4e3f-a1c2-0c9d8e7f6a5b\r\n" +
	"Authorization: Bearer eyJhbGciOiJSUzI1NiJ9.payload.signature\r\n" +
	"Content-Length: " + strconv.Itoa(len(mcpBody)) + "\r\n\r\n" + mcpBody

func BenchmarkClassify(b *testing.B) {
	h := mustHead(b, mcpRequest)
	b.ReportAllocs()
	for b.Loop() {
		Classify(h)
	}
}

var mcpResponse = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 62\r\n\r\n" +
	`{"jsonrpc":"2.0","id":7,"result":{"content":[],"isError":false}}`[:62]

// serveFixed answers every request on c with mcpResponse, until c closes.
func serveFixed(c net.Conn) {
	r := NewReader(c, Limits{})
	for {
		h, err := r.ReadRequestHead()
		if err != nil {
			return
		}
		if _, err := r.CopyBody(io.Discard, h); err != nil {
			return
		}
		if _, err := io.WriteString(c, mcpResponse); err != nil {
			return
		}
	}
}

type ruleSetFunc func(*policy.Input) policy.Decision

func (f ruleSetFunc) Evaluate(in *policy.Input) policy.Decision { return f(in) }

// BenchmarkLevel1Request is one keep-alive round trip through exchange.Serve with Level 1's
// stages (classification and guards, header policy with a rule set that reads mcp.name, and a
// stage that counts records, as the engine's does); compare it with exchange's
// BenchmarkDirectRequest and BenchmarkL4RelayRequest. wrapped hides the sockets behind plain
// net.Conns, as the engine's activity wrapper does.
func BenchmarkLevel1Request(b *testing.B) {
	for _, wrapped := range []bool{false, true} {
		b.Run("wrapped="+strconv.FormatBool(wrapped), func(b *testing.B) {
			c, pc := tcpPair(b)
			pu, s := tcpPair(b)
			go serveFixed(s)
			rules := ruleSetFunc(func(in *policy.Input) policy.Decision {
				if in.MCP["name"] == "rm" {
					return policy.Decision{Action: policy.ActionDeny}
				}
				return policy.Decision{Action: policy.ActionAllow}
			})
			flow := &Flow{Rules: func() RuleSet { return rules }, Client: &policy.Client{}, Conn: &policy.Conn{}}
			var n atomic.Int64
			stages := append(Stages(Guards{}, flow), doneCounter{n: &n})
			done := make(chan struct{})
			go func() {
				defer close(done)
				var cl, ul net.Conn = pc, pu
				if wrapped {
					cl, ul = plainConn{pc}, plainConn{pu}
				}
				exchange.Serve(context.Background(), cl, ul, stages, exchange.Options{IdleTimeout: 60e9}, nil)
			}()
			req := []byte(mcpRequest)
			resp := make([]byte, len(mcpResponse))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.Write(req); err != nil {
					b.Fatal(err)
				}
				if _, err := io.ReadFull(c, resp); err != nil {
					b.Fatal(err)
				}
			}
			c.Close()
			<-done
			s.Close()
		})
	}
}

type doneCounter struct {
	exchange.Base
	n *atomic.Int64
}

func (d doneCounter) Done(*exchange.Exchange) { d.n.Add(1) }

// plainConn is a net.Conn and nothing more (no SyscallConn, no CloseWrite).
type plainConn struct{ net.Conn }
