//go:build linux

package e2e

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The tracing lab: a Go SDK server that traces its echo calls itself (-otlp, service
// lab-mcp-server) on 3023 behind a terminate + Level 2 route with trace_propagation: inject and
// the lab's Level 2 rules (denied_* tools denied); the appliance exports its spans to Jaeger.
const (
	tracedURL     = "https://10.200.2.2:3023/mcp"
	tracedService = "mcpintercept"
	// labServerService is the Go SDK server peer's service.name (e2e/peers/mcpserver/tracing.go).
	labServerService = "lab-mcp-server"
	// tracedQueue is telemetry.otlp.max_queue (and max_batch): small, so that a collector that
	// does not answer fills it within a few calls and the drops are counted.
	tracedQueue = 8
)

func tracingConfig(t *testing.T, caDir string) string {
	cfg := tlsConfig(t, caDir)
	cfg = strings.Replace(cfg, `"3000-3014"`, `"3000-3014", 3023`, 1)
	cfg = strings.Replace(cfg, "routes:\n", `routes:
  - name: traced
    match: {ports: [3023]}
    tls: terminate
    level: 2
    trace_propagation: inject
    rule_set: lab-level2
`, 1)
	return cfg + fmt.Sprintf(`telemetry:
  otlp:
    endpoint: %s
    insecure: true
    sampling_ratio: 1
    interval: 200ms
    max_queue: %d
    max_batch: %d
`, jaegerOTLP, tracedQueue, tracedQueue)
}

// randomID is n random bytes in hex, the first byte at least 0x10 (so no id is all zeros and
// none loses a leading zero anywhere).
func randomID(t *testing.T, n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	b[0] |= 0x10
	return hex.EncodeToString(b)
}

// tracedRecord is the part of a Level 2 flow-log record that names its span.
type tracedRecord struct {
	MCPMethod string `json:"mcp_method"`
	MCPName   string `json:"mcp_name"`
	Direction string `json:"direction"`
	Decision  string `json:"decision"`
	Rule      string `json:"rule"`
	TraceID   string `json:"trace_id"`
	SpanID    string `json:"span_id"`
}

func tracedRecords(flowLog string) []tracedRecord {
	var out []tracedRecord
	sc := bufio.NewScanner(strings.NewReader(flowLog))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var r tracedRecord
		if json.Unmarshal(sc.Bytes(), &r) == nil && r.MCPMethod == "tools/call" {
			out = append(out, r)
		}
	}
	return out
}

// waitRecord polls the appliance's flow log for a tools/call record that match accepts.
func waitRecord(t *testing.T, a *appliance, what string, match func(tracedRecord) bool) tracedRecord {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		for _, r := range tracedRecords(a.stdout.String()) {
			if match(r) {
				return r
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no flow-log record of %s:\n%s", what, grepLines(a.stdout.String(), "tools/call"))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// tracedCall calls tool once with the Go SDK client (extra flags appended) and returns its JSON
// output line; a transport failure is fatal, a JSON-RPC error is returned for the caller to judge.
func tracedCall(t *testing.T, ca, tool, args string, extra ...string) (text string, code int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, errOut, _ := run(ctx, nsClient, bin("mcpclient"), append([]string{"-url", tracedURL, "-ca", ca, "-tool", tool, "-args", args}, extra...)...)
	var r struct {
		Text  string `json:"text"`
		Error *struct {
			Code int64 `json:"code"`
		} `json:"error"`
		TransportError string `json:"transport_error"`
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &r); err != nil {
		t.Fatalf("mcpclient output %q (%s): %v", out, errOut, err)
	}
	if r.TransportError != "" {
		t.Fatalf("mcpclient %s: %s", tool, r.TransportError)
	}
	if r.Error != nil {
		return "", r.Error.Code
	}
	return r.Text, 0
}

// spansDropped reads mcpintercept_spans_dropped_total from the appliance's /metrics (-1: absent).
func spansDropped(t *testing.T) float64 {
	t.Helper()
	m := runT(t, 20*time.Second, nsAppliance, "curl", "-sS", "http://127.0.0.1:9464/metrics")
	for l := range strings.Lines(m) {
		if v, ok := strings.CutPrefix(l, "mcpintercept_spans_dropped_total "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				t.Fatalf("mcpintercept_spans_dropped_total %q: %v", v, err)
			}
			return f
		}
	}
	return -1
}

// TestTracingJaeger (issue 21 acceptance) with a real trace backend: Jaeger in the lab receives
// the appliance's spans (OTLP/HTTP) and the Go SDK server's own; its query API shows
//   - the Go SDK client's call (params._meta.traceparent with a trace id the test chose): the
//     appliance's span "tools/call echo" with mcp.method.name, gen_ai.tool.name and
//     mcpintercept.decision allow, in the client's trace, the client's span its parent; the
//     server's "server echo" span its child (inject rewrote _meta; tracestate led by mcpi, the
//     client's member kept);
//   - the TypeScript SDK client's call (no trace context): a trace of its own rooted at the
//     appliance's span, the server's span its child through the injected header;
//   - a denied call: a span with error status, decision deny and the rule;
//
// and the flow log's trace_id/span_id are Jaeger's; the mcp.client.operation.duration metric
// arrives over OTLP too. Then the collector goes away — stopped
// (connection refused), then unreachable (packets dropped): every call still succeeds, the failed
// export is logged and the spans the full queue could not hold are counted in
// mcpintercept_spans_dropped_total.
func TestTracingJaeger(t *testing.T) {
	needLab(t)
	jaeger := startJaeger(t)
	srv := startT(t, nsServer, bin("mcpserver"), "-listen", "10.200.2.2:3023",
		"-tls-cert", labPKI("server.pem"), "-tls-key", labPKI("server-key.pem"), "-otlp", jaegerOTLPURL)
	if err := srv.waitFor("READY", 60*time.Second); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfg := tracingConfig(t, filepath.Join(dir, "ca"))
	a := startAppliance(t, "nftables-tproxy", cfg)
	ca := exportCA(t, cfg)

	// The Go SDK client, in a trace of its own (the test chose the ids).
	traceID, clientSpan := randomID(t, 16), randomID(t, 8)
	if text, code := tracedCall(t, ca, "echo", `{"text":"traced-go"}`,
		"-traceparent", "00-"+traceID+"-"+clientSpan+"-01", "-tracestate", "lab=client"); code != 0 || text != "traced-go" {
		t.Fatalf("Go client's echo: %q, code %d", text, code)
	}
	// The TypeScript SDK client, no trace context.
	out := runNodeArgs(t, ca, tracedURL, "--call", "echo", `{"text":"traced-node"}`)
	if !strings.Contains(out, `"text":"traced-node"`) {
		t.Fatalf("Node client's echo: %s", out)
	}
	// A denied call, in another chosen trace.
	deniedTrace := randomID(t, 16)
	if _, code := tracedCall(t, ca, "denied_delete", `{"path":"/tmp/x"}`,
		"-traceparent", "00-"+deniedTrace+"-"+randomID(t, 8)+"-01"); code != -31000 {
		t.Fatalf("denied_delete: code %d, want -31000", code)
	}

	// The Go client's trace: the appliance's span under the client's, the server's under it.
	spans, ok := jaegerTrace(t, traceID, 90*time.Second, func(s []jaegerSpan) bool {
		_, app := findSpan(s, tracedService, "tools/call echo")
		_, server := findSpan(s, labServerService, "server echo")
		return app && server
	})
	if !ok {
		t.Fatalf("trace %s: no appliance and server spans in Jaeger within the deadline; spans:\n%s\nserver:\n%s",
			traceID, spansText(spans), grepLines(srv.stderr.String(), "TRACE"))
	}
	app, _ := findSpan(spans, tracedService, "tools/call echo")
	server, _ := findSpan(spans, labServerService, "server echo")
	t.Logf("the Go client's trace %s:\n%s", traceID, spansText(spans))
	for k, want := range map[string]string{"mcp.method.name": "tools/call", "gen_ai.tool.name": "echo",
		"mcpintercept.decision": "allow", "span.kind": "client"} {
		if got := app.tag(k); got != want {
			t.Errorf("appliance span %s = %q, want %q\n%s", k, got, want, app)
		}
	}
	if n, m := countSpans(spans, tracedService, "tools/call echo"), countSpans(spans, labServerService, "server echo"); n != 1 || m != 1 {
		t.Errorf("the call's trace has %d appliance and %d server echo spans, want one each", n, m)
	}
	if app.parent() != clientSpan {
		t.Errorf("appliance span's parent %q, want the client's span %s\n%s", app.parent(), clientSpan, app)
	}
	if server.parent() != app.SpanID {
		t.Errorf("server span's parent %q, want the appliance's span %s (trace_propagation: inject)\n%s", server.parent(), app.SpanID, spansText(spans))
	}
	if src := server.tag("lab.trace_context.source"); src != "_meta" {
		t.Errorf("the server read its parent from %q, want _meta (the client's _meta rewritten)", src)
	}
	if ts := server.tag("w3c.tracestate"); !strings.HasPrefix(ts, "mcpi=") || !strings.Contains(ts, "lab=client") {
		t.Errorf("tracestate upstream %q: want the mcpi member first and the client's lab=client kept", ts)
	}
	goRec := waitRecord(t, a, "the Go client's echo", func(r tracedRecord) bool { return r.MCPName == "echo" && r.TraceID == traceID })
	if goRec.SpanID != app.SpanID {
		t.Errorf("flow log span_id %s, Jaeger's appliance span %s", goRec.SpanID, app.SpanID)
	}

	// The Node client's trace: found through the flow log, then Jaeger's search and the trace.
	nodeRec := waitRecord(t, a, "the Node client's echo", func(r tracedRecord) bool {
		return r.MCPName == "echo" && r.TraceID != "" && r.TraceID != traceID
	})
	nspans, ok := jaegerTrace(t, nodeRec.TraceID, 90*time.Second, func(s []jaegerSpan) bool {
		_, app := findSpan(s, tracedService, "tools/call echo")
		_, server := findSpan(s, labServerService, "server echo")
		return app && server
	})
	if !ok {
		t.Fatalf("Node call's trace %s: spans\n%s", nodeRec.TraceID, spansText(nspans))
	}
	napp, _ := findSpan(nspans, tracedService, "tools/call echo")
	nserver, _ := findSpan(nspans, labServerService, "server echo")
	t.Logf("the Node client's trace %s:\n%s", nodeRec.TraceID, spansText(nspans))
	if napp.SpanID != nodeRec.SpanID || napp.parent() != "" || napp.tag("gen_ai.tool.name") != "echo" || napp.tag("mcpintercept.decision") != "allow" {
		t.Errorf("Node call: appliance span %s, flow log span_id %s: want a root with the record's id", napp, nodeRec.SpanID)
	}
	if n := countSpans(nspans, tracedService, "tools/call echo"); n != 1 || nodeRec.TraceID == traceID {
		t.Errorf("the Node call's trace %s has %d appliance spans, want one in a trace of its own", nodeRec.TraceID, n)
	}
	if nserver.parent() != napp.SpanID || nserver.tag("lab.trace_context.source") != "header" {
		t.Errorf("Node call: server span %s, want the appliance span's child through the traceparent header", nserver)
	}
	found := map[string]bool{}
	for _, tr := range jaegerSearch(t, tracedService, "tools/call echo", 100) {
		found[tr.TraceID] = true
	}
	if !found[traceID] || !found[nodeRec.TraceID] {
		t.Errorf("Jaeger's search for %s 'tools/call echo' does not list both calls' traces (%s, %s): %v", tracedService, traceID, nodeRec.TraceID, found)
	}

	// The denied call: an error span naming the rule; the server never saw it.
	dspans, ok := jaegerTrace(t, deniedTrace, 90*time.Second, func(s []jaegerSpan) bool {
		_, ok := findSpan(s, tracedService, "tools/call denied_delete")
		return ok
	})
	if !ok {
		t.Fatalf("denied call's trace %s: spans\n%s", deniedTrace, spansText(dspans))
	}
	dapp, _ := findSpan(dspans, tracedService, "tools/call denied_delete")
	t.Logf("the denied call's trace %s:\n%s", deniedTrace, spansText(dspans))
	if dapp.tag("otel.status_code") != "ERROR" || dapp.tag("error") != "true" || dapp.tag("mcpintercept.decision") != "deny" ||
		dapp.tag("mcpintercept.rule") != "deny-denied-tools" {
		t.Errorf("denied call's span: want error status, decision deny, rule deny-denied-tools:\n%s", dapp)
	}
	if strings.Contains(srv.stderr.String(), "TOOLRUN denied_delete") {
		t.Errorf("the denied call reached the server")
	}
	dRec := waitRecord(t, a, "the denied call", func(r tracedRecord) bool { return r.TraceID == deniedTrace && r.Decision == "deny" })
	if dRec.SpanID != dapp.SpanID || dRec.Rule != "deny-denied-tools" {
		t.Errorf("denied call's record %+v, Jaeger's span %s", dRec, dapp.SpanID)
	}

	// The metric over OTLP: the appliance's mcp.client.operation.duration reached the collector.
	if err := jaeger.waitFor("mcp.client.operation.duration", 120*time.Second); err != nil {
		t.Errorf("the appliance's mcp.client.operation.duration did not arrive over OTLP: %v", err)
	}

	// The collector stopped: connections refused. Calls keep succeeding; the failure is logged.
	dropped0 := spansDropped(t)
	if dropped0 < 0 {
		t.Fatalf("/metrics has no mcpintercept_spans_dropped_total")
	}
	if err := jaeger.stop(syscall.SIGTERM, 30*time.Second); err != nil {
		t.Logf("Jaeger's stop: %v", err)
	}
	for i := range 5 {
		text := fmt.Sprintf("collector-stopped-%d", i)
		if got, code := tracedCall(t, ca, "echo", `{"text":"`+text+`"}`); code != 0 || got != text {
			t.Fatalf("with the collector stopped, call %d: %q code %d", i, got, code)
		}
	}
	if err := a.waitFor("otlp span export failed", 60*time.Second); err != nil {
		t.Errorf("a failed export is not logged: %v", err)
	}

	// The collector unreachable (its packets dropped): each export hangs until it times out, the
	// queue fills, and what it cannot hold is dropped and counted — the calls never wait for it.
	blackholeOTLP(t)
	dropped, calls := dropped0, 0
	for dropped <= dropped0 && calls < 200 {
		for range 5 {
			text := fmt.Sprintf("collector-unreachable-%d", calls)
			if got, code := tracedCall(t, ca, "echo", `{"text":"`+text+`"}`); code != 0 || got != text {
				t.Fatalf("with the collector unreachable, call %d: %q code %d", calls, got, code)
			}
			calls++
		}
		dropped = spansDropped(t)
	}
	if dropped <= dropped0 {
		t.Errorf("mcpintercept_spans_dropped_total stayed %v after %d calls with the collector unreachable (max_queue %d)", dropped, calls, tracedQueue)
	}
	t.Logf("collector unreachable: %d calls succeeded, spans dropped %v → %v", calls, dropped0, dropped)
	unblackholeOTLP(t)
	a.stopGracefully(t)
}

// blackholeOTLP drops every packet to the collector's OTLP port in mcpi-server (an nftables
// table of the test's own, removed at the end), so that an export's connection hangs.
func blackholeOTLP(t *testing.T) {
	t.Helper()
	rules := filepath.Join(t.TempDir(), "blackhole.nft")
	if err := os.WriteFile(rules, []byte(`table inet e2e_otlp_blackhole {
	chain input {
		type filter hook input priority -10; policy accept;
		tcp dport 4318 drop
	}
}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unblackholeOTLP(t) })
	runT(t, 20*time.Second, nsServer, "nft", "-f", rules)
}

func unblackholeOTLP(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	run(ctx, nsServer, "nft", "delete", "table", "inet", "e2e_otlp_blackhole")
}
