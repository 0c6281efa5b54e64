package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"mcpintercept/appliance"
	"mcpintercept/config"
	"mcpintercept/telemetry"
)

const policyTestConfig = `mechanism: nftables-tproxy
intercept: {destinations: [10.200.2.0/24], ports: [3024, 3025]}
routes:
  - {name: l2, match: {ports: [3024]}, tls: plaintext, level: 2, development: true, rule_set: lab}
  - {name: l1, match: {ports: [3025]}, tls: plaintext, level: 1, development: true, rule_set: lab}
rule_sets:
  lab:
    - name: shadow-echo
      when: mcp.method == "tools/call" && mcp.name == "echo"
      action: deny
      mode: shadow
      reason: echo is being retired
    - name: deny-denied
      when: mcp.method == "tools/call" && mcp.name.startsWith("denied_")
      action: deny
    - name: call-rate
      when: mcp.method == "tools/call"
      action: rate_limit
      rate_limit: {key: client.address, rate: 0.001, burst: 2}
  args:
    - name: deny-etc
      when: mcp.arguments.path == "/etc"
      action: deny
`

// rec is a flow log line as the appliance writes it (telemetry's encoder).
func rec(t *testing.T, r telemetry.FlowRecord) string {
	t.Helper()
	if r.Time.IsZero() {
		t.Fatal("record without time")
	}
	return string(r.AppendJSON(nil)) + "\n"
}

// shadowWired fails the test when the appliance compiles shadow rules as enforced ones (its
// config.Rule to policy.RuleSpec conversion must carry Mode).
func shadowWired(t *testing.T) {
	t.Helper()
	cfg, err := config.Parse("c.yaml", []byte(policyTestConfig), config.Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	_, sets, err := appliance.RoutingFromConfig(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	in, known := appliance.InputFromRecord(&telemetry.FlowRecord{Client: "10.200.1.2:1", OrigDst: "10.200.2.2:3024", Level: 2, MCPMethod: "tools/call", MCPName: "echo", JSONRPCID: "1"},
		netip.MustParseAddrPort("10.200.1.2:1"), netip.MustParseAddrPort("10.200.2.2:3024"))
	if d := sets["lab"].Explain(in, known).Decision; d.Action != "allow" {
		t.Fatalf("the appliance enforces a shadow rule (%s by %s): appliance/routing.go ruleSpec must pass config.Rule.Mode", d.Action, d.Rule)
	}
}

func TestPolicyTest(t *testing.T) {
	shadowWired(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "c.yaml")
	if err := os.WriteFile(cfg, []byte(policyTestConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	base := telemetry.FlowRecord{Client: "10.200.1.2:40000", OrigDst: "10.200.2.2:3024", Mechanism: "nftables-tproxy", TLS: "plaintext",
		Level: 2, HTTPMethod: "POST", Path: "/mcp", Status: 200, MCPVersion: "2026-07-28", Direction: "client_to_server", Decision: "allow"}
	at := func(sec int, edit func(*telemetry.FlowRecord)) telemetry.FlowRecord {
		r := base
		r.Time.Time = time.Date(2026, 12, 2, 8, 0, sec, 0, time.UTC)
		r.JSONRPCID = "1"
		edit(&r)
		return r
	}
	echo := at(1, func(r *telemetry.FlowRecord) {
		r.MCPMethod, r.MCPName, r.Reason = "tools/call", "echo", "no rule matched; would_deny by shadow-echo (shadow): echo is being retired"
	})
	denied := at(2, func(r *telemetry.FlowRecord) {
		r.MCPMethod, r.MCPName, r.Decision, r.Rule, r.Reason = "tools/call", "denied_delete", "deny", "deny-denied", "denied by rule deny-denied"
	})
	list := at(3, func(r *telemetry.FlowRecord) { r.MCPMethod, r.Reason = "tools/list", "no rule matched" })
	// The limit's second token goes to this call (echo took the first; the denied call was decided
	// before the limit); the next call is limited.
	other := at(4, func(r *telemetry.FlowRecord) {
		r.MCPMethod, r.MCPName, r.Reason = "tools/call", "other", "no rule matched"
	})
	limited := at(5, func(r *telemetry.FlowRecord) {
		r.MCPMethod, r.MCPName, r.Decision, r.Rule = "tools/call", "other", "rate_limited", "call-rate"
	})
	l1 := at(6, func(r *telemetry.FlowRecord) {
		r.OrigDst, r.Level, r.Direction, r.JSONRPCID = "10.200.2.2:3025", 1, "", ""
		r.MCPMethod, r.MCPName, r.Decision, r.Rule = "tools/call", "denied_x", "deny", "deny-denied"
	})
	guard := at(7, func(r *telemetry.FlowRecord) {
		r.MCPMethod, r.MCPName, r.Decision, r.Rule = "tools/call", "x", "deny", "l2"
	})
	good := rec(t, echo) + rec(t, denied) + "\n" + rec(t, list) + rec(t, other) + rec(t, limited) + rec(t, l1) + rec(t, guard)
	// The same call recorded as allowed without the shadow mark, and one allowed the set denies.
	noMark := at(8, func(r *telemetry.FlowRecord) { r.MCPMethod, r.MCPName = "tools/call", "echo" })
	wrong := at(9, func(r *telemetry.FlowRecord) { r.MCPMethod, r.MCPName = "tools/call", "denied_y" })
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	goodIn := write("good.jsonl", good)
	badIn := write("bad.jsonl", good+rec(t, noMark)+rec(t, wrong))
	argsIn := write("args.jsonl", rec(t, noMark))

	run := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := realMain(append([]string{"policy", "test"}, args...), &out, &errb)
		return code, out.String(), errb.String()
	}

	code, out, errs := run("--config", cfg, "--input", goodIn)
	if code != 0 {
		t.Fatalf("exit %d, want 0\n%s%s", code, out, errs)
	}
	for _, want := range []string{
		"line 1 ", "shadow-echo", "deny (shadow) match", "replayed allow [would_deny:shadow-echo]  => AGREE",
		"* deny-denied", "replayed rate_limited by call-rate  => AGREE",
		"decided by l2, which is not a rule of this set",
		"7 records: 6 agree, 0 disagree, 0 unknown", "1 skipped",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}

	code, out, _ = run("--config", cfg, "--input", badIn, "-o", "json")
	if code != 1 {
		t.Fatalf("exit %d with disagreements, want 1\n%s", code, out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var sum struct{ Summary appliance.ReplaySummary }
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &sum); err != nil {
		t.Fatal(err)
	}
	if s := sum.Summary; s.Records != 9 || s.Agree != 6 || s.Disagree != 2 || len(s.Disagreements) != 2 || s.Disagreements[0] != 9 || s.Disagreements[1] != 10 {
		t.Fatalf("summary %+v (lines are numbered in the file, the blank one included)", s)
	}
	var last appliance.ReplayResult
	if err := json.Unmarshal([]byte(lines[len(lines)-2]), &last); err != nil {
		t.Fatal(err)
	}
	if last.Verdict != appliance.VerdictDisagree || last.Replayed == nil || last.Replayed.Decision != "deny" || last.Replayed.Rule != "deny-denied" || last.Recorded.Decision != "allow" {
		t.Fatalf("last record %+v", last)
	}

	// A rule that reads the arguments cannot be judged from the flow log: unknown, reported
	// (exit 0), and a failure with --fail-on-unknown.
	code, out, _ = run("--config", cfg, "--input", argsIn, "--rule-set", "args")
	if code != 0 || !strings.Contains(out, "reads mcp.arguments: not in the record; taken as no_match") || !strings.Contains(out, "=> UNKNOWN") {
		t.Fatalf("exit %d, want 0 and the rule unknown:\n%s", code, out)
	}
	if code, out, _ = run("--config", cfg, "--input", argsIn, "--rule-set", "args", "--fail-on-unknown"); code != 1 || !strings.Contains(out, "1 unknown") {
		t.Fatalf("--fail-on-unknown: exit %d, want 1:\n%s", code, out)
	}

	for _, tt := range []struct {
		name string
		args []string
		msg  string
	}{
		{"no input", []string{"--config", cfg}, "--input FILE are required"},
		{"bad output", []string{"--config", cfg, "--input", goodIn, "-o", "yaml"}, "want text or json"},
		{"unknown rule set", []string{"--config", cfg, "--input", goodIn, "--rule-set", "nope"}, "no such rule set"},
		{"not a record", []string{"--config", cfg, "--input", write("x.jsonl", rec(t, echo)+"[1]\n")}, "line 2: not a flow log record"},
		{"a key of the wrong type", []string{"--config", cfg, "--input", write("y.jsonl", `{"level":"two"}`+"\n")}, "line 1:"},
		{"missing file", []string{"--config", cfg, "--input", filepath.Join(dir, "none")}, "no such file"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, _, errs := run(tt.args...)
			if code != 2 || !strings.Contains(errs, tt.msg) {
				t.Fatalf("exit %d, stderr %q; want 2 and %q", code, errs, tt.msg)
			}
		})
	}
	var o, e bytes.Buffer
	if code := realMain([]string{"policy"}, &o, &e); code != 2 || !strings.Contains(e.String(), "usage: mcpintercept policy test") {
		t.Fatalf("policy alone: exit %d, %q", code, e.String())
	}
}

func FuzzReadRecords(f *testing.F) {
	f.Add([]byte(`{"time":"2026-01-02T03:04:05.678Z","client":"10.200.1.2:1","orig_dst":"10.200.2.2:3024","level":2,"mcp_method":"tools/call","mcp_name":"echo","decision":"allow","reason":"no rule matched; would_deny by s (shadow): x"}` + "\n"))
	f.Add([]byte("\n\n{}\n{\"level\":1}"))
	f.Add([]byte(`{"process":{"pid":1,"comm":"node"}} {}`))
	f.Add([]byte("[]\n"))
	f.Add([]byte(`{"time":"not a time"}`))
	cfg, err := config.Parse("c.yaml", []byte(policyTestConfig), config.Overrides{})
	if err != nil {
		f.Fatal(err)
	}
	rp, err := appliance.NewReplayer(cfg, "")
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		n := 0
		err := telemetry.ReadFlowRecords(bytes.NewReader(data), func(line int, r *telemetry.FlowRecord) error {
			n++
			if line < n {
				t.Fatalf("line %d after %d records", line, n)
			}
			// Whatever a line holds, replaying it gives a verdict and writes a report.
			res := rp.Replay(line, r)
			switch res.Verdict {
			case appliance.VerdictAgree, appliance.VerdictDisagree, appliance.VerdictUnknown, appliance.VerdictSkipped:
			default:
				t.Fatalf("verdict %q", res.Verdict)
			}
			writeReplayText(io.Discard, &res)
			if _, err := json.Marshal(res); err != nil {
				t.Fatal(err)
			}
			return nil
		})
		if err != nil && !strings.HasPrefix(err.Error(), "line ") && !strings.Contains(err.Error(), "longer than") {
			t.Fatalf("error without a line: %v", err)
		}
	})
}

// TestPolicyTestLab replays a flow log of the lab (testdata/lab-flows.jsonl: Level 2 sessions
// with initialize, notifications, tools/list, calls, denied calls, a sampling request and the
// route's own refusals; Level 1 requests with and without Mcp-* headers; Level 0 flows) through
// examples/lab.yaml. Every decision is reproduced: exit 0. The rules that read mcp.arguments or
// mcp.client_info are decided by their other conditions wherever those decide (a tools/list, a
// call of another tool), so only the echo calls and the sampling request stay unknown. A changed
// rule makes it exit 1, and --only-differences prints the records it changes and nothing else.
func TestPolicyTestLab(t *testing.T) {
	const flows = "testdata/lab-flows.jsonl"
	lab, err := os.ReadFile("../../examples/lab.yaml")
	if err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := realMain(append([]string{"policy", "test"}, args...), &out, &errb)
		return code, out.String(), errb.String()
	}
	results := func(out string) (res []appliance.ReplayResult, sum appliance.ReplaySummary) {
		t.Helper()
		lines := strings.Split(strings.TrimSpace(out), "\n")
		for _, l := range lines[:len(lines)-1] {
			var r appliance.ReplayResult
			if err := json.Unmarshal([]byte(l), &r); err != nil {
				t.Fatalf("%v: %s", err, l)
			}
			res = append(res, r)
		}
		var s struct{ Summary appliance.ReplaySummary }
		if err := json.Unmarshal([]byte(lines[len(lines)-1]), &s); err != nil {
			t.Fatal(err)
		}
		return res, s.Summary
	}

	code, out, errs := run("--config", "../../examples/lab.yaml", "--input", flows, "-o", "json")
	if code != 0 {
		t.Fatalf("lab config over its own flows: exit %d, want 0\n%s%s", code, out, errs)
	}
	res, sum := results(out)
	if sum.Disagree != 0 || sum.Agree < 40 || sum.Skipped == 0 || sum.Records != len(res) {
		t.Fatalf("summary %+v", sum)
	}
	denied := map[int]bool{} // the records deny-denied-tools decided
	for _, r := range res {
		if r.Recorded.Rule == "deny-denied-tools" {
			denied[r.Line] = true
		}
		if r.Verdict != appliance.VerdictUnknown {
			continue
		}
		if !(r.Method == "tools/call" && r.Name == "echo" && r.RuleSet == "lab-level2") && r.Method != "sampling/createMessage" {
			t.Errorf("line %d (%s %s, rule set %s) is unknown; only the echo calls and the sampling request depend on what the record lacks: %+v",
				r.Line, r.Method, r.Name, r.RuleSet, r.Rules)
		}
	}
	if sum.Unknown != 5 {
		t.Errorf("%d unknown, want 5 (three echo calls at Level 2, the denied echo, the sampling request): lines %v", sum.Unknown, sum.Unknowns)
	}
	if len(denied) != 6 {
		t.Fatalf("the fixture has %d records denied by deny-denied-tools, want 6", len(denied))
	}

	// Nothing differs: --only-differences prints the summary alone.
	code, out, _ = run("--config", "../../examples/lab.yaml", "--input", flows, "--only-differences")
	if code != 0 || strings.Contains(out, "line ") || !strings.Contains(out, "0 disagree, 5 unknown") {
		t.Fatalf("--only-differences with none: exit %d\n%s", code, out)
	}
	// --fail-on-unknown fails on the unknowns and prints them.
	code, out, _ = run("--config", "../../examples/lab.yaml", "--input", flows, "--only-differences", "--fail-on-unknown")
	if code != 1 || strings.Count(out, "=> UNKNOWN") != 5 || strings.Contains(out, "=> AGREE") {
		t.Fatalf("--fail-on-unknown: exit %d\n%s", code, out)
	}

	// The deny rule renamed to another prefix: the records it denied are now allowed.
	changed := strings.ReplaceAll(string(lab), `mcp.name.startsWith("denied_")`, `mcp.name.startsWith("blocked_")`)
	if changed == string(lab) {
		t.Fatal("examples/lab.yaml no longer has the denied_ rule this test changes")
	}
	cfg := filepath.Join(t.TempDir(), "lab.yaml")
	if err := os.WriteFile(cfg, []byte(changed), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, _ = run("--config", cfg, "--input", flows, "--only-differences", "-o", "json")
	if code != 1 {
		t.Fatalf("changed rule: exit %d, want 1\n%s", code, out)
	}
	res, sum = results(out)
	if sum.Disagree != len(denied) || len(res) != len(denied) || sum.Records <= len(res) {
		t.Fatalf("changed rule: %d records printed, summary %+v; want the %d denied ones", len(res), sum, len(denied))
	}
	for _, r := range res {
		if !denied[r.Line] || r.Verdict != appliance.VerdictDisagree || r.Replayed == nil || r.Replayed.Decision != "allow" {
			t.Errorf("printed line %d: %+v", r.Line, r)
		}
	}
	code, out, _ = run("--config", cfg, "--input", flows, "--only-differences")
	if code != 1 || strings.Count(out, "\nline ")+strings.Count(out[:min(len(out), 5)], "line ") != len(denied) ||
		!strings.Contains(out, fmt.Sprintf("%d disagree", len(denied))) || strings.Contains(out, "=> AGREE") || strings.Contains(out, "=> UNKNOWN") {
		t.Fatalf("changed rule, text: exit %d\n%s", code, out)
	}
}
