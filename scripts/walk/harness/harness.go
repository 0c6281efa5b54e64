// Package harness drives the one Level 2 request that scripts/walk.sh measures: an MCP client
// and a loopback MCP server that talk through whatever chain a walk test puts between them
// (level2's stage behind exchange.Serve, or the whole engine). It imports nothing of the
// project, so that only the chain under test runs project code.
//
// The walk is the one tools/call request, and its JSON response, sent between Begin and End
// after a warm-up (initialize, notifications/initialized and two tools/call on the same
// connection and session), so that one-time work (session memory, lazily built tables) is done
// before it.
package harness

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"
)

// Enabled says whether a walk test should run: only scripts/walk.sh sets MCPI_WALK.
func Enabled() bool { return os.Getenv("MCPI_WALK") != "" }

// Begin and End mark the walk; walk.sh's probes count function entries between them. They
// must stay real calls.
//
//go:noinline
func Begin() { beginEnd++ }

//go:noinline
func End() { beginEnd++ }

var beginEnd int

const (
	protocolVersion = "2025-06-18"
	sessionID       = "walk-session-1"
)

// ToolsCall is the measured request's body (about 1 KiB, the shape a client sends; the same
// as level2's BenchmarkExchangeLevel2).
var ToolsCall = func() string {
	pad := strings.Repeat("lorem ipsum ", 60)
	return fmt.Sprintf(`{"jsonrpc":"2.0","id":42,"method":"tools/call","params":{"name":"search_documents",`+
		`"arguments":{"query":"quarterly report","limit":10,"filters":{"owner":"alice","tags":["finance","q3"]},"note":%q},`+
		`"_meta":{"progressToken":"p-42","traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}}}`, pad)
}()

const initialize = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"` + protocolVersion +
	`","capabilities":{},"clientInfo":{"name":"walk-client","version":"1.0"}}}`

const initialized = `{"jsonrpc":"2.0","method":"notifications/initialized"}`

// Upstream starts a loopback MCP server (HTTP/1.1 keep-alive, JSON responses) and returns its
// address.
func Upstream(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	toolResult := `{"content":[{"type":"text","text":"` + strings.Repeat("x", 900) + `"}]}`
	initResult := `{"protocolVersion":"` + protocolVersion + `","capabilities":{"tools":{}},"serverInfo":{"name":"walk-server","version":"1.0"}}`
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					body, _ := io.ReadAll(req.Body)
					s := string(body)
					switch {
					case strings.Contains(s, `"method":"notifications/`):
						fmt.Fprintf(c, "HTTP/1.1 202 Accepted\r\nContent-Length: 0\r\n\r\n")
					case strings.Contains(s, `"method":"initialize"`):
						resp := `{"jsonrpc":"2.0","id":1,"result":` + initResult + `}`
						fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nMcp-Session-Id: %s\r\nContent-Length: %d\r\n\r\n%s", sessionID, len(resp), resp)
					default:
						resp := `{"jsonrpc":"2.0","id":42,"result":` + toolResult + `}`
						fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(resp), resp)
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// Run is the client: it connects to addr (the chain in front of Upstream), warms up, and sends
// the measured tools/call between Begin and End. settle is how long End waits after the
// response was read, so that work the chain does after forwarding it (records, metrics) is
// inside the walk.
func Run(t testing.TB, addr string, settle time.Duration) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	send := func(body string, session bool) {
		t.Helper()
		h := "POST /mcp HTTP/1.1\r\nHost: walk.test\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
		if session {
			h += "Mcp-Session-Id: " + sessionID + "\r\nMCP-Protocol-Version: " + protocolVersion + "\r\n"
		}
		if _, err := fmt.Fprintf(c, "%sContent-Length: %d\r\n\r\n%s", h, len(body), body); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			t.Fatalf("status %d: %s", resp.StatusCode, b)
		}
		if strings.Contains(string(b), `"error"`) {
			t.Fatalf("error response: %s", b)
		}
	}
	send(initialize, false)
	send(initialized, true)
	send(ToolsCall, true)
	send(ToolsCall, true)
	time.Sleep(settle)
	Begin()
	send(ToolsCall, true)
	time.Sleep(settle)
	End()
	t.Logf("walk done")
}
