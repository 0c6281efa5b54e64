package policy

import "testing"

// level2Rules is a realistic Level 2 rule set: a deny on a tool name, a per-client rate limit on
// calls, and a deny on an argument.
var level2Rules = []RuleSpec{
	{Name: "no-delete", When: `mcp.method == "tools/call" && mcp.name == "delete_repo"`, Action: RuleDeny},
	{Name: "per-client", When: `mcp.method == "tools/call"`, Action: RuleRateLimit,
		RateLimit: &RateLimit{Key: "client.address", Rate: 1e9, Burst: 1e9}},
	{Name: "no-etc", When: `mcp.method == "tools/call" && "path" in mcp.arguments && mcp.arguments.path.startsWith("/etc")`,
		Action: RuleDeny},
}

// decodeArgs stands for Level 2's decode of params.arguments: both forms pay it once per message.
func decodeArgs() map[string]any { return map[string]any{"path": "/tmp/report.txt", "mode": "r"} }

type benchBody struct{}

func (benchBody) Arguments() map[string]any  { return decodeArgs() }
func (benchBody) Result() any                { return nil }
func (benchBody) ClientInfo() map[string]any { return nil }

// BenchmarkEvaluateLevel2 measures one tools/call message as Level 2 judges it, building the
// input included (the per-flow client and conn facts are built once, outside the loop): the map
// form as the callers build it today, and the typed form with lazy arguments.
func BenchmarkEvaluateLevel2(b *testing.B) {
	s := mustCompile(b, level2Rules)
	headers := map[string]string{"content-type": "application/json", "mcp-method": "tools/call"}
	b.Run("maps", func(b *testing.B) {
		client := map[string]any{"address": "10.200.1.2", "port": int64(40000)}
		conn := map[string]any{"orig_dst": "10.200.2.2:8080", "orig_ip": "10.200.2.2", "orig_port": int64(8080),
			"mechanism": "nftables-tproxy", "tls": "plaintext"}
		b.ReportAllocs()
		for b.Loop() {
			mcp := map[string]any{"direction": "client_to_server", "kind": "request", "method": "tools/call",
				"name": "read_file", "id": "7", "version": "2026-07-28"}
			if s.Reads("arguments") {
				mcp["arguments"] = decodeArgs()
			}
			in := &Input{Client: client, Conn: conn, MCP: mcp,
				HTTP: map[string]any{"method": "POST", "path": "/mcp", "headers": headers}}
			if d := s.Evaluate(in); d.Action != ActionAllow {
				b.Fatal(d)
			}
		}
	})
	b.Run("typed", func(b *testing.B) {
		client := &Client{Address: "10.200.1.2", Port: 40000}
		conn := &Conn{OrigDst: "10.200.2.2:8080", OrigIP: "10.200.2.2", OrigPort: 8080, Mechanism: "nftables-tproxy", TLS: "plaintext"}
		// The caller keeps one Message and one Input per exchange and refills them.
		var msg Message
		var req Request
		var in Input
		b.ReportAllocs()
		for b.Loop() {
			msg = Message{Direction: "client_to_server", Kind: "request", Method: "tools/call", Name: "read_file",
				ID: "7", Version: "2026-07-28", Body: benchBody{}}
			req = Request{Method: "POST", Path: "/mcp", Headers: HeaderMap(headers)}
			in = Input{Vars: Vars{Client: client, Conn: conn, HTTP: &req, MCP: &msg}}
			if d := s.Evaluate(&in); d.Action != ActionAllow {
				b.Fatal(d)
			}
		}
	})
}
