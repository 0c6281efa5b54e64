package level2

import (
	"bytes"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"mcpintercept/integrity"
	"mcpintercept/mcp"
	"mcpintercept/policy"
)

// BenchmarkListFilter1000: a tools/list of 1,000 tools (every tenth denied by name) filtered for
// one client, with the lab's rule shapes: one probe per tool.
func BenchmarkListFilter1000(b *testing.B) {
	raw := tools1000()
	set, err := policy.Compile(listBenchRules())
	if err != nil {
		b.Fatal(err)
	}
	msg := &policy.Message{Direction: ClientToServer, Kind: "request"}
	in := policy.Input{Vars: policy.Vars{Client: &policy.Client{Address: "10.200.1.2"}, MCP: msg}, Probe: true}
	allowed := func(k *listKind, name string) (bool, string) {
		msg.Method, msg.Name = k.probeMethod, name
		d := set.Evaluate(&in)
		return d.Action == policy.ActionAllow, d.Rule
	}
	b.SetBytes(int64(len(raw)))
	b.ReportAllocs()
	for b.Loop() {
		msgs, _, err := mcp.Decode(raw, mcp.DecodeOptions{})
		if err != nil {
			b.Fatal(err)
		}
		f := filterList(msgs[0].Raw, listMethods["tools/list"], true, allowed)
		if len(f.hidden) != 100 {
			b.Fatalf("hid %d", len(f.hidden))
		}
	}
}

// tools1000 is a tools/list response of 1,000 tools, every tenth named denied_*.
func tools1000() []byte {
	var sb strings.Builder
	sb.WriteString(`{"jsonrpc":"2.0","id":1,"result":{"tools":[`)
	for i := range 1000 {
		if i > 0 {
			sb.WriteByte(',')
		}
		name := fmt.Sprintf("tool_%d", i)
		if i%10 == 0 {
			name = fmt.Sprintf("denied_%d", i)
		}
		fmt.Fprintf(&sb, `{"name":%q,"description":"does thing %d","inputSchema":{"type":"object","properties":{"text":{"type":"string"}}}}`, name, i)
	}
	sb.WriteString(`],"nextCursor":"next"}}`)
	return []byte(sb.String())
}

// listBenchRules are the lab's rule shapes.
func listBenchRules() []policy.RuleSpec {
	return []policy.RuleSpec{
		{Name: "deny-denied-tools", When: `mcp.method == "tools/call" && mcp.name.startsWith("denied_")`, Action: "deny"},
		{Name: "deny-forbidden-echo", When: `mcp.method == "tools/call" && mcp.name == "echo" && "text" in mcp.arguments && mcp.arguments.text.contains("forbidden")`, Action: "deny"},
		{Name: "tools-call-rate", When: `mcp.method == "tools/call"`, Action: "rate_limit", RateLimit: &policy.RateLimit{Key: "client.address", Rate: 50, Burst: 200}},
	}
}

// BenchmarkListIntegrity1000 is BenchmarkListFilter1000 on a route with tool_pins: learn (the
// real guard, in memory): the same list of 1,000 tools seen again (the steady state), each
// definition judged by the guard (Observe), then filtered with its verdict in mcp.tool_* (one
// probe per tool, and a rule on the findings besides the lab's).
func BenchmarkListIntegrity1000(b *testing.B) {
	raw := tools1000()
	set, err := policy.Compile(append(listBenchRules(),
		policy.RuleSpec{Name: "no-hidden-text", When: `mcp.method == "tools/call" && ("zero_width" in mcp.tool_findings || "tag" in mcp.tool_findings)`, Action: "deny"}))
	if err != nil {
		b.Fatal(err)
	}
	g, err := integrity.Open(integrity.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer g.Close()
	rg := g.Route(integrity.RouteOptions{Mode: integrity.ModeLearn})
	srv := integrity.Server{Key: "10.200.2.2:3011/mcp"}
	p := &prober{rs: set}
	p.msg = policy.Message{Direction: ClientToServer, Kind: "request"}
	p.in = policy.Input{Vars: policy.Vars{Client: &policy.Client{Address: "10.200.1.2"}, MCP: &p.msg}, Probe: true}
	kinds := listMethods["tools/list"]
	once := func() filtered {
		msgs, _, err := mcp.Decode(raw, mcp.DecodeOptions{})
		if err != nil {
			b.Fatal(err)
		}
		defs := listDefs(msgs[0].Raw, kinds)
		vs, _ := rg.Observe(srv, "10.200.1.2", defs, false)
		return filterJudged(msgs[0].Raw, kinds, true, vs, p)
	}
	once() // first sight: every tool pinned
	b.SetBytes(int64(len(raw)))
	b.ReportAllocs()
	for b.Loop() {
		if f := once(); len(f.hidden) != 100 || f.quarantined != 0 {
			b.Fatalf("hid %d, %d quarantined", len(f.hidden), f.quarantined)
		}
	}
}

// BenchmarkRedact1MiB: the added latency of redaction on a 1 MiB tools/call result (one canary
// among 64 text blocks of 16 KiB), decode included as Level 2 does it.
func BenchmarkRedact1MiB(b *testing.B) {
	var sb bytes.Buffer
	sb.WriteString(`{"jsonrpc":"2.0","id":1,"result":{"content":[`)
	block := strings.Repeat("lorem ipsum dolor sit amet ", 16<<10/27)
	for i := range 64 {
		if i > 0 {
			sb.WriteByte(',')
		}
		text := block
		if i == 32 {
			text = block[:1000] + "CANARY-0123456789abcdef" + block[1000:]
		}
		fmt.Fprintf(&sb, `{"type":"text","text":%q}`, text)
	}
	sb.WriteString(`]}}`)
	raw := sb.Bytes()
	reds := []*policy.Redaction{{Rule: "redact-canary", Marker: "[REDACTED]", Patterns: []*regexp.Regexp{regexp.MustCompile(`CANARY-[0-9A-Za-z]+`)}}}
	b.Run("decode only", func(b *testing.B) {
		b.SetBytes(int64(len(raw)))
		b.ReportAllocs()
		for b.Loop() {
			if _, _, err := mcp.Decode(raw, mcp.DecodeOptions{MaxSize: 4 << 20}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decode and redact", func(b *testing.B) {
		b.SetBytes(int64(len(raw)))
		b.ReportAllocs()
		for b.Loop() {
			msgs, _, err := mcp.Decode(raw, mcp.DecodeOptions{MaxSize: 4 << 20})
			if err != nil {
				b.Fatal(err)
			}
			if _, _, n := redactJSON(msgs[0].Raw, reds, "result"); n != 1 {
				b.Fatalf("%d redactions", n)
			}
		}
	})
}
