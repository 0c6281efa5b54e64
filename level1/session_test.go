package level1

import (
	"bufio"
	"context"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"

	"mcpintercept/exchange"
	"mcpintercept/policy"
)

// TestRepeatedSessionIDRefused (issue 29 item 3): a request carrying Mcp-Session-Id twice is read
// as its first value by Level 1 (mcp.session) and Go servers, and as both joined by Node's: a rule
// on mcp.session would judge another session than the server resumes. Level 1 refuses it (400)
// before any rule runs; one Mcp-Session-Id passes.
func TestRepeatedSessionIDRefused(t *testing.T) {
	for _, c := range []struct {
		name, headers string
		status        int
		forwarded     bool
	}{
		{name: "one", headers: "Mcp-Session-Id: a\r\n", status: 200, forwarded: true},
		{name: "two", headers: "Mcp-Session-Id: a\r\nMcp-Session-Id: b\r\n", status: 400},
		{name: "two spellings", headers: "Mcp-Session-Id: a\r\nmcp-session-id: b\r\n", status: 400},
	} {
		t.Run(c.name, func(t *testing.T) {
			cl, pc := tcpPair(t)
			pu, s := tcpPair(t)
			var reached atomic.Bool
			go func() {
				br := bufio.NewReader(s)
				if _, err := http.ReadRequest(br); err == nil {
					reached.Store(true)
					s.Write([]byte("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"))
				}
			}()
			rules := ruleSetFunc(func(*policy.Input) policy.Decision { return policy.Decision{Action: policy.ActionAllow} })
			flow := &Flow{Rules: func() RuleSet { return rules }, Client: &policy.Client{}, Conn: &policy.Conn{}}
			go exchange.Serve(context.Background(), pc, pu, Stages(Guards{}, flow), exchange.Options{}, nil)
			body := `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`
			cl.Write([]byte("POST /mcp HTTP/1.1\r\nHost: s\r\nContent-Type: application/json\r\n" + c.headers +
				"Content-Length: " + itoa(len(body)) + "\r\n\r\n" + body))
			resp, err := http.ReadResponse(bufio.NewReader(cl), nil)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != c.status || reached.Load() != c.forwarded {
				t.Fatalf("status %d (want %d), forwarded %v (want %v)", resp.StatusCode, c.status, reached.Load(), c.forwarded)
			}
			cl.Close()
			s.Close()
		})
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
