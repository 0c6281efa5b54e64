//go:build linux

package e2e

import (
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Level 2 end to end, with real peers and the lab's Level 2 routes (examples/lab.yaml: 3011-3014
// plaintext, 8444 terminate). The draft's Level 2 "MUST parse JSON-RPC message bodies" and may
// decide on them; with a single backend it "MUST NOT fabricate responses on behalf of the backend"
// (Level 2 Requirements): a refusal is a JSON-RPC error whose data names the intermediary.

// everythingL2 is server-everything (Streamable HTTP) on 3013 and its legacy HTTP+SSE transport on
// 3014 (GET /sse, POSTs answered on the stream).
func everythingL2(t *testing.T) {
	t.Helper()
	js := filepath.Join(repoRoot, "e2e/node/node_modules/@modelcontextprotocol/server-everything/dist/index.js")
	shared(t, "server-everything-3013", "listening on port 3013", "env", "PORT=3013", "node", js, "streamableHttp")
	shared(t, "server-everything-sse-3014", "running on port 3014", "env", "PORT=3014", "node", js, "sse")
}

type nodeCall struct {
	Tool    string `json:"tool"`
	IsError bool   `json:"is_error"`
	Text    string `json:"text"`
	Error   *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
		Data    struct {
			Intermediary string `json:"intermediary"`
			Rule         string `json:"rule"`
			Reason       string `json:"reason"`
		} `json:"data"`
	} `json:"error"`
}

func nodeCallTool(t *testing.T, url, tool, args string) nodeCall {
	t.Helper()
	out := runNodeArgs(t, "", url, "--call", tool, args)
	var c nodeCall
	if err := json.Unmarshal([]byte(out), &c); err != nil {
		t.Fatalf("node --call output %q: %v", out, err)
	}
	return c
}

// TestLevel2 runs real clients through Level 2 with the lab's rules and compares every result
// with a direct run; then denies by tool and by argument value for clients that send no Mcp-*
// headers, and checks the log names each tool.
func TestLevel2(t *testing.T) {
	needLab(t)
	goSrv := goServer(t)
	statelessServer(t)
	tlsServer(t)
	everythingL2(t)
	caDir := filepath.Join(t.TempDir(), "ca")
	cfg := tlsConfig(t, caDir)

	type peer struct {
		name string
		run  func(ca string) string
	}
	goPeer := func(url string) func(string) string {
		return func(ca string) string {
			args := []string{"-url", url}
			if strings.HasPrefix(url, "https") {
				if ca == "" {
					ca = labPKI("server-ca.pem")
				}
				args = append(args, "-ca", ca)
			}
			return runT(t, 60*time.Second, nsClient, bin("mcpclient"), args...)
		}
	}
	nodePeer := func(url string, extra ...string) func(string) string {
		return func(ca string) string {
			if ca == "" {
				ca = labPKI("server-ca.pem")
			}
			return runNodeArgs(t, ca, append([]string{url}, extra...)...)
		}
	}
	peers := []peer{
		{"node (2025-11-25, no Mcp-* headers) -> server-everything", nodePeer("http://10.200.2.2:3013/mcp")},
		{"node legacy HTTP+SSE -> server-everything sse", nodePeer("http://10.200.2.2:3014/sse", "--sse")},
		{"go -> stateful go server (2025-11-25)", goPeer("http://10.200.2.2:3011/mcp")},
		{"go -> stateless go server (2026-07-28)", goPeer("http://10.200.2.2:3012/mcp")},
		{"go -> terminate + Level 2", goPeer("https://mcp.lab.test:8444/mcp")},
		{"node -> terminate + Level 2", nodePeer("https://mcp.lab.test:8444/mcp")},
	}
	direct := map[string]string{}
	for _, p := range peers {
		direct[p.name] = p.run("")
	}
	directProgress := runNodeArgs(t, "", "http://10.200.2.2:3013/mcp", "--progress", "5")

	a := startAppliance(t, "nftables-tproxy", cfg)
	applianceCA := exportCA(t, cfg)
	for _, p := range peers {
		// Surface control: the tools the lab's rules deny (denied_*) are not advertised.
		if got, want := canonical(t, p.run(applianceCA)), withoutDenied(t, direct[p.name]); got != want {
			t.Errorf("%s through Level 2 differs from direct (without denied_*):\n%s\nwant\n%s", p.name, got, want)
		}
	}

	// Progress notifications still arrive one by one before the result.
	got := runNodeArgs(t, "", "http://10.200.2.2:3013/mcp", "--progress", "5")
	var prog struct{ Progress int }
	json.Unmarshal([]byte(got), &prog)
	if got != directProgress || prog.Progress != 5 {
		t.Errorf("node progress through Level 2: %s (direct: %s); want all 5", got, directProgress)
	}
	if pr, err := callTool(t, "http://10.200.2.2:3012/mcp", "", "progress", `{"steps":4}`); err != nil || pr.ProgressNotifications != 4 {
		t.Errorf("go progress through Level 2: %+v, %v; want 4 notifications", pr, err)
	}

	// Deny by tool and by argument value, for a client that sends no Mcp-* headers: the client
	// gets the documented JSON-RPC error and the tool never runs.
	before := toolRuns(goSrv)
	c := nodeCallTool(t, "http://10.200.2.2:3011/mcp", "denied_delete", `{"path":"/repo"}`)
	if c.Error == nil || c.Error.Code != -31000 || c.Error.Data.Intermediary != "mcpintercept" || c.Error.Data.Rule != "deny-denied-tools" {
		t.Errorf("node denied_delete through Level 2: %+v; want JSON-RPC error -31000 naming mcpintercept and the rule", c)
	}
	c = nodeCallTool(t, "http://10.200.2.2:3011/mcp", "echo", `{"text":"a forbidden word"}`)
	if c.Error == nil || c.Error.Code != -31000 || c.Error.Data.Rule != "deny-forbidden-echo" {
		t.Errorf("node echo with a forbidden argument: %+v; want the rule's JSON-RPC error", c)
	}
	if c := nodeCallTool(t, "http://10.200.2.2:3011/mcp", "echo", `{"text":"fine"}`); c.Error != nil || c.Text != "fine" {
		t.Errorf("node echo with an allowed argument: %+v", c)
	}
	if r, err := callTool(t, "http://10.200.2.2:3011/mcp", "", "denied_delete", `{"path":"/repo"}`); err == nil && !r.IsError && r.TransportError == "" {
		t.Errorf("go denied_delete through Level 2 succeeded: %+v", r)
	}
	if n := toolRuns(goSrv); n != before {
		t.Errorf("denied_delete ran %d times through Level 2", n-before)
	}

	// SEP-2243 against the real stateless server: a forged Mcp-Name is refused with 400/-32020
	// before the server sees it.
	s := rawRequest(t, "10.200.2.2:3012", postCall("10.200.2.2:3012",
		"Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2026-07-28\r\nMcp-Method: tools/call\r\nMcp-Name: echo\r\n", deleteCall26))
	if s != http.StatusBadRequest {
		t.Errorf("forged Mcp-Name through Level 2: %d, want 400", s)
	}
	if n := toolRuns(goSrv); n != before {
		t.Errorf("a mismatched request ran the tool")
	}

	recs := a.stopGracefully(t)
	var level2, nodeEcho, denied, forbidden, mismatch, legacy, terminate int
	for _, r := range recs {
		if r.Level == nil || *r.Level != 2 {
			continue
		}
		level2++
		if strings.HasSuffix(r.OrigDst, ":3013") && r.MCPMethod == "tools/call" && r.MCPName == "echo" && r.Decision == "allow" {
			nodeEcho++
		}
		if r.MCPName == "denied_delete" && r.Decision == "deny" && r.Rule == "deny-denied-tools" && r.JSONRPCID != "" && r.Direction == "client_to_server" {
			denied++
		}
		if r.Rule == "deny-forbidden-echo" {
			forbidden++
		}
		if r.Status == 400 && r.Rule == "header-mismatch" {
			mismatch++
		}
		if strings.HasSuffix(r.OrigDst, ":3014") && r.MCPMethod == "tools/call" && r.MCPName == "echo" {
			legacy++
		}
		if r.TLS == "terminate" && strings.HasSuffix(r.OrigDst, ":8444") && r.MCPMethod == "tools/call" && r.MCPName == "echo" {
			terminate++
		}
	}
	if nodeEcho == 0 || denied < 2 || forbidden != 1 || mismatch != 1 || legacy == 0 || terminate < 2 {
		t.Errorf("flow log (%d level 2 records): node echo %d, denied_delete %d (want >= 2), forbidden %d (want 1), mismatch %d (want 1), legacy-SSE echo %d, terminate echo %d (want >= 2)\n%s",
			level2, nodeEcho, denied, forbidden, mismatch, legacy, terminate, a.stdout)
	}
}
