//go:build linux

package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"mcpintercept/audit"
)

// The federation path (issue 32, Conduit's text): the appliance in mcpi-appliance serves one
// MCP endpoint on 10.200.1.1:8765 over three downstreams in mcpi-server — the Go SDK server
// stateless at 2026-07-28 (go, 3031), the official everything-server (everything, 3001, a 2025
// server answering in SSE) and the Go SDK server stateful at 2025-11-25 with SSE (legacy, 3033)
// — and real SDK clients in mcpi-client call it.

const fedURL = "http://10.200.1.1:8765/mcp"

type fedServers struct {
	goLog, legacyLog string
	legacy           *proc
}

// fedDownstreams starts the two Go SDK servers (the everything-server is shared).
func fedDownstreams(t *testing.T) *fedServers {
	t.Helper()
	everythingServer(t)
	dir := t.TempDir()
	s := &fedServers{goLog: filepath.Join(dir, "go.log"), legacyLog: filepath.Join(dir, "legacy.log")}
	g := startT(t, nsServer, bin("mcpserver"), "-stateless", "-listen", "10.200.2.2:3031", "-name", "go26", "-call-log", s.goLog)
	s.legacy = startT(t, nsServer, bin("mcpserver"), "-listen", "10.200.2.2:3033", "-name", "go25", "-call-log", s.legacyLog)
	for _, p := range []*proc{g, s.legacy} {
		if err := p.waitFor("READY", 60*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// fedConfig is a federation-only appliance (mechanism external: nothing is steered) with its
// audit store in auditDir.
func fedConfig(auditDir, extra string) string {
	return fmt.Sprintf(`mechanism: external
listen: {addresses: [127.0.0.1], port: 15061}
admin: {listen: "127.0.0.1:9464"}
log: {flows: "off"}
audit: {dir: %q}
rule_sets:
  federation:
    - {name: no-delete, when: 'downstream.tool == "denied_delete"', action: deny}
federation:
  listen: 10.200.1.1:8765
  development: true
  refresh: 1h
  rule_set: federation
  downstreams:
    - {id: go, url: "http://10.200.2.2:3031/mcp", timeout: 5s, headers: {X-Team: {value: blue}}}
    - {id: everything, url: "http://10.200.2.2:3001/mcp", timeout: 10s}
    - {id: legacy, url: "http://10.200.2.2:3033/mcp", timeout: 5s}
%s`, auditDir, extra)
}

// startFederation runs the appliance with cfg and waits until it is ready.
func startFederation(t *testing.T, cfg string) *appliance {
	t.Helper()
	path := filepath.Join(t.TempDir(), "federation.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := start(nsAppliance, bin("mcpintercept"), "run", "--config", path)
	if err != nil {
		t.Fatal(err)
	}
	a := &appliance{proc: p, mechanism: "external"}
	t.Cleanup(func() {
		if !a.stopped {
			a.stopGracefully(t)
		}
	})
	if err := p.waitFor("msg=ready", 30*time.Second); err != nil {
		p.kill()
		t.Fatal(err)
	}
	waitFedReady(t, a)
	return a
}

// waitFedReady polls /readyz (a bound on a hang, not a timing check).
func waitFedReady(t *testing.T, a *appliance) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		out := runT(t, 10*time.Second, nsAppliance, "curl", "-s", "http://127.0.0.1:9464/readyz")
		if strings.HasPrefix(out, "ready") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("federation not ready: %s\n%s", out, a.stderr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

type fedHealth struct {
	Ready       bool   `json:"ready"`
	NotReady    string `json:"not_ready"`
	Generation  uint64 `json:"generation"`
	Tools       int    `json:"tools"`
	Rejected    string `json:"last_rejection"`
	Downstreams []struct {
		ID, State, Version, Error string
		Tools                     int
	} `json:"downstreams"`
}

func fedHealthOf(t *testing.T) fedHealth {
	t.Helper()
	var h fedHealth
	out := runT(t, 10*time.Second, nsAppliance, "curl", "-sf", "http://127.0.0.1:9464/federation")
	if err := json.Unmarshal([]byte(out), &h); err != nil {
		t.Fatalf("/federation: %q: %v", out, err)
	}
	return h
}

type fedNodeResult struct {
	Tools []string `json:"tools"`
	Call  struct {
		Tool    string `json:"tool"`
		IsError bool   `json:"is_error"`
		Text    string `json:"text"`
		Error   *struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	} `json:"call"`
}

func fedNodeCall(t *testing.T, url, tool, args string) fedNodeResult {
	t.Helper()
	out := runT(t, 60*time.Second, nsClient, "node", filepath.Join(repoRoot, "e2e/node/client.mjs"), url, "--list-call", tool, args)
	var r fedNodeResult
	if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &r); err != nil {
		t.Fatalf("node client output %q: %v", out, err)
	}
	return r
}

type fedGoResult struct {
	toolResult
	Tools []string `json:"tools"`
	Error *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

func fedGoCall(t *testing.T, url, version, tool, args string) fedGoResult {
	t.Helper()
	r, out, errOut, err := fedGoTry(t, url, version, tool, args)
	if err != nil {
		t.Fatalf("mcpclient output %q (%s): %v", out, errOut, err)
	}
	return r
}

// fedGoTry is one Go SDK client run, for load goroutines: a client that cannot connect is an
// error, not a test failure.
func fedGoTry(t *testing.T, url, version, tool, args string) (fedGoResult, string, string, error) {
	a := []string{"-url", url, "-tool", tool, "-args", args}
	if tool != "" {
		a = append(a, "-list")
	}
	if version != "" {
		a = append(a, "-protocol-version", version)
	}
	out, errOut, _ := run(t.Context(), nsClient, bin("mcpclient"), a...)
	var r fedGoResult
	err := json.Unmarshal([]byte(strings.TrimSpace(out)), &r)
	return r, out, errOut, err
}

// TestFederationPeers (acceptance): the Go SDK client at 2026-07-28 and at 2025-11-25 and the Node
// SDK client list and call <id>.<tool> across three downstreams; the results are those of calling
// each server directly. Conduit: "Aggregate tool names are deterministic:
// <downstream-id>.<downstream-tool-name>"; "Policy allow/deny rules filter public tools/list
// output".
func TestFederationPeers(t *testing.T) {
	needLab(t)
	s := fedDownstreams(t)
	dir := filepath.Join(t.TempDir(), "audit")
	a := startFederation(t, fedConfig(dir, ""))
	h := fedHealthOf(t)
	if !h.Ready || len(h.Downstreams) != 3 {
		t.Fatalf("health: %+v", h)
	}
	for _, d := range h.Downstreams {
		if d.State != "ok" || d.Tools == 0 {
			t.Errorf("downstream %s: %+v", d.ID, d)
		}
	}
	calls := []struct{ id, tool, args, direct string }{
		{"go", "echo", `{"text":"fed-go"}`, "http://10.200.2.2:3031/mcp"},
		{"legacy", "echo", `{"text":"fed-legacy"}`, "http://10.200.2.2:3033/mcp"},
		{"everything", "echo", `{"message":"fed-everything"}`, "http://10.200.2.2:3001/mcp"},
		{"everything", "get-sum", `{"a":2,"b":40}`, "http://10.200.2.2:3001/mcp"},
		{"go", "add", `{"a":2,"b":40}`, "http://10.200.2.2:3031/mcp"},
	}
	for _, version := range []string{"", "2025-11-25"} {
		for _, c := range calls {
			name := c.id + "." + c.tool
			got := fedGoCall(t, fedURL, version, name, c.args)
			direct := fedGoCall(t, c.direct, version, c.tool, c.args)
			if got.Text == "" || got.Text != direct.Text || got.IsError != direct.IsError {
				t.Errorf("Go client %q %s: through the federation %+v, direct %+v", version, name, got, direct)
			}
			for _, want := range []string{"go.echo", "legacy.echo", "everything.echo", "everything.get-sum"} {
				if !slices.Contains(got.Tools, want) {
					t.Errorf("Go client %q: %s not listed: %v", version, want, got.Tools)
				}
			}
			if slices.Contains(got.Tools, "go.denied_delete") || slices.Contains(got.Tools, "legacy.denied_delete") {
				t.Errorf("a tool the rule set denies to everyone is listed: %v", got.Tools)
			}
		}
	}
	for _, c := range calls {
		name := c.id + "." + c.tool
		got := fedNodeCall(t, fedURL, name, c.args)
		direct := fedNodeCall(t, c.direct, c.tool, c.args)
		if got.Call.Text == "" || got.Call.Text != direct.Call.Text {
			t.Errorf("Node client %s: through the federation %+v, direct %+v", name, got.Call, direct.Call)
		}
	}
	// A denied tool reaches no downstream, and its name is never split into a route.
	r := fedGoCall(t, fedURL, "", "go.denied_delete", `{"path":"/x"}`)
	if r.Error == nil && r.TransportError == "" && !r.IsError {
		t.Errorf("go.denied_delete was not refused: %+v", r)
	}
	for _, line := range executedCalls(t, s.goLog) {
		if strings.Contains(line, "delete") {
			t.Errorf("the downstream executed %q", line)
		}
	}
	before := len(executedCalls(t, s.goLog))
	fedGoCall(t, fedURL, "", "go.echo.extra", `{"text":"split-me"}`)
	if n := len(executedCalls(t, s.goLog)); n != before {
		t.Errorf("an unpublished name reached the downstream (%d calls, was %d)", n, before)
	}
	a.stopGracefully(t)
	out := auditVerify(t, dir)
	if !strings.Contains(out, "OK") {
		t.Errorf("audit verify: %s", out)
	}
	auth := 0
	for _, rec := range auditShow(t, dir) {
		if rec.Kind == "authorization" && rec.Decision == "allow" {
			auth++
		}
	}
	if want := 2*len(calls) + len(calls); auth < want {
		t.Errorf("%d allowed authorization records, want at least %d (one per call)", auth, want)
	}
}

// TestFederationRefreshAndLimits: "A failed refresh removes that downstream's previous catalog; a
// later successful refresh recovers it" and "rejects ... aggregate limits instead of exposing a
// partial aggregate" (Conduit), observed from outside through /federation and real clients. A
// SIGHUP asks for a refresh.
func TestFederationRefreshAndLimits(t *testing.T) {
	needLab(t)
	s := fedDownstreams(t)
	dir := filepath.Join(t.TempDir(), "audit")
	a := startFederation(t, fedConfig(dir, "  aggregate_limits: {tools: 40}\n"))
	g1 := fedHealthOf(t)
	refresh := func() fedHealth {
		gen := fedHealthOf(t)
		a.cmd.Process.Signal(syscall.SIGHUP)
		deadline := time.Now().Add(60 * time.Second)
		for {
			h := fedHealthOf(t)
			if h.Generation != gen.Generation || h.Rejected != gen.Rejected || stateChanged(gen, h) {
				return h
			}
			if time.Now().After(deadline) {
				t.Fatalf("no refresh after SIGHUP: %+v", h)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	s.legacy.kill()
	h := refresh()
	if st := stateOf(h, "legacy"); st != "failed" {
		t.Fatalf("legacy after its server died: %s (%+v)", st, h)
	}
	if r := fedGoCall(t, fedURL, "", "legacy.echo", `{"text":"gone"}`); r.Error == nil && r.TransportError == "" {
		t.Errorf("legacy.echo still callable after its refresh failed: %+v", r)
	}
	if r := fedGoCall(t, fedURL, "", "go.echo", `{"text":"still"}`); r.Text != "still" {
		t.Errorf("go.echo after legacy failed: %+v", r)
	}
	// The server comes back with 40 more tools: the aggregate would exceed 40 tools, so the whole
	// generation is rejected and the previous one (without legacy) stays.
	p := startT(t, nsServer, bin("mcpserver"), "-listen", "10.200.2.2:3033", "-name", "go25", "-extra-tools", "40", "-call-log", s.legacyLog)
	if err := p.waitFor("READY", 60*time.Second); err != nil {
		t.Fatal(err)
	}
	h = refresh()
	if !strings.Contains(h.Rejected, "aggregate_limit") {
		t.Fatalf("over-limit aggregate not rejected: %+v", h)
	}
	if r := fedGoCall(t, fedURL, "", "legacy.echo", `{"text":"partial"}`); r.Error == nil && r.TransportError == "" {
		t.Errorf("a tool of the rejected generation is callable: %+v", r)
	}
	metrics := runT(t, 10*time.Second, nsAppliance, "curl", "-s", "http://127.0.0.1:9464/metrics")
	if !strings.Contains(metrics, `mcpintercept_federation_generations_rejected_total{reason="aggregate_limit"}`) {
		t.Error("the rejection is not counted")
	}
	// Back to its usual catalog: recovered.
	p.kill()
	p = startT(t, nsServer, bin("mcpserver"), "-listen", "10.200.2.2:3033", "-name", "go25", "-call-log", s.legacyLog)
	if err := p.waitFor("READY", 60*time.Second); err != nil {
		t.Fatal(err)
	}
	h = refresh()
	if stateOf(h, "legacy") != "ok" || h.Rejected != "" || h.Generation <= g1.Generation {
		t.Fatalf("not recovered: %+v", h)
	}
	if r := fedGoCall(t, fedURL, "", "legacy.echo", `{"text":"back"}`); r.Text != "back" {
		t.Errorf("legacy.echo after recovery: %+v", r)
	}
}

func stateOf(h fedHealth, id string) string {
	for _, d := range h.Downstreams {
		if d.ID == id {
			return d.State
		}
	}
	return ""
}

func stateChanged(a, b fedHealth) bool {
	for i := range a.Downstreams {
		if i < len(b.Downstreams) && (a.Downstreams[i].State != b.Downstreams[i].State || a.Downstreams[i].Tools != b.Downstreams[i].Tools) {
			return true
		}
	}
	return false
}

// TestFederationAuditKillNine (acceptance): "The durable authorization audit record is written
// inside that linearization boundary" — under load the appliance is SIGKILLed; every call the
// downstream executed (its own call log) has a durable authorization record (by the hash of its
// arguments) and `audit verify` passes; with the audit disk full no downstream sees a call: "If it
// cannot be written, no downstream transport starts."
func TestFederationAuditKillNine(t *testing.T) {
	needLab(t)
	s := fedDownstreams(t)
	dir := filepath.Join(t.TempDir(), "audit")
	a := startFederation(t, fedConfig(dir, ""))
	var ok atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				text := fmt.Sprintf("fk9-%d-%d", g, i)
				if r, _, _, err := fedGoTry(t, fedURL, "", "go.echo", `{"text":"`+text+`"}`); err == nil && r.Text == text {
					ok.Add(1)
				}
			}
		}()
	}
	killUnderLoad(t, a, &ok, stop, &wg)
	executed := executedCalls(t, s.goLog)
	if len(executed) < 12 {
		t.Fatalf("the downstream executed %d calls, want at least 12", len(executed))
	}
	auditVerify(t, dir)
	hashes := map[string]bool{}
	for _, r := range auditShow(t, dir) {
		if r.Kind == "authorization" && r.Decision == "allow" && r.Tool == "go.echo" {
			hashes[r.ArgsHash] = true
		}
	}
	for _, text := range executed {
		h, err := audit.HashArguments(json.RawMessage(`{"text":"` + text + `"}`))
		if err != nil {
			t.Fatal(err)
		}
		if !hashes[h] {
			t.Errorf("the downstream executed %q, which has no durable authorization record", text)
		}
	}
	t.Logf("kill -9 under load: the downstream executed %d calls, each with an authorization record (%d distinct allowed go.echo argument hashes recorded)", len(executed), len(hashes))

	// The audit disk full: calls are refused with -31004 and none reaches a downstream.
	full := filepath.Join(t.TempDir(), "full")
	if err := os.MkdirAll(full, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=1m,mode=0700", "tmpfs", full).CombinedOutput(); err != nil {
		t.Skipf("mount tmpfs: %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", full).Run() })
	a = startFederation(t, fedConfig(full, "  \n"))
	exec.Command("dd", "if=/dev/zero", "of="+filepath.Join(full, "filler"), "bs=4k").Run() // stops at ENOSPC
	var refused string
	for i := 0; i < 200 && refused == ""; i++ {
		text := fmt.Sprintf("fed-full-%d", i)
		r := fedGoCall(t, fedURL, "", "go.echo", `{"text":"`+text+`"}`)
		if r.Text == text {
			continue
		}
		refused = text
		if msg := fmt.Sprintf("%+v %+v", r, r.Error); !strings.Contains(msg, "audit unavailable") {
			t.Errorf("refusal does not name the audit: %s", msg)
		}
	}
	if refused == "" {
		t.Fatal("200 calls went through with the audit disk full")
	}
	if slices.Contains(executedCalls(t, s.goLog), refused) {
		t.Errorf("the downstream executed %s, refused for want of audit space", refused)
	}
	os.Remove(filepath.Join(full, "filler"))
	a.stopGracefully(t)
}

// TestFederationUncertainAndShutdown: a hung downstream (SIGSTOP) gives uncertain-after-dispatch
// at its timeout and is not retried (its call log, once resumed, has the call at most once);
// readiness waits for every downstream's first refresh; SIGTERM during a call cancels it
// (uncertain, reason shutdown) and the shutdown steps are logged in Conduit's order, the audit
// store closed last.
func TestFederationUncertainAndShutdown(t *testing.T) {
	needLab(t)
	s := fedDownstreams(t)
	dir := filepath.Join(t.TempDir(), "audit")
	a := startFederation(t, fedConfig(dir, ""))
	legacyPid := s.legacy.cmd.Process.Pid
	syscall.Kill(legacyPid, syscall.SIGSTOP)
	r := fedGoCall(t, fedURL, "", "legacy.echo", `{"text":"hung-once"}`)
	syscall.Kill(legacyPid, syscall.SIGCONT)
	if r.Error == nil || !strings.Contains(r.Error.Message, "uncertain-after-dispatch") {
		t.Fatalf("a call to a hung downstream: %+v", r)
	}
	// Whatever the resumed server does with the request it had, it was sent once.
	if n := strings.Count(strings.Join(executedCalls(t, s.legacyLog), "\n"), "hung-once"); n > 1 {
		t.Errorf("the hung call was executed %d times (retried)", n)
	}

	// SIGTERM while a call hangs on a stopped downstream.
	syscall.Kill(legacyPid, syscall.SIGSTOP)
	defer syscall.Kill(legacyPid, syscall.SIGCONT)
	answered := make(chan fedGoResult, 1)
	go func() { answered <- fedGoCall(t, fedURL, "", "legacy.echo", `{"text":"at-shutdown"}`) }()
	deadline := time.Now().Add(30 * time.Second)
	for !dispatching(t) {
		if time.Now().After(deadline) {
			t.Fatal("the call was never authorized")
		}
		time.Sleep(50 * time.Millisecond)
	}
	a.stopGracefully(t)
	got := <-answered
	if got.Error == nil || !strings.Contains(got.Error.Message, "uncertain-after-dispatch") {
		t.Errorf("the call active at shutdown: %+v", got)
	}
	log := a.stderr.String()
	order := []string{"federation: shutdown: admission stopped", "federation: shutdown: active dispatches cancelled",
		"federation: shutdown: terminal audit paths done", "federation: shutdown: refresh joined", "audit store closed"}
	at := -1
	for _, step := range order {
		i := strings.Index(log, step)
		if i < 0 || i < at {
			t.Fatalf("shutdown step %q missing or out of order:\n%s", step, log)
		}
		at = i
	}
	var last auditL2Record
	for _, rec := range auditShow(t, dir) {
		if rec.Kind == "outcome" {
			last = rec
		}
	}
	if last.Outcome != "uncertain" || last.Reason != "shutdown" {
		t.Errorf("the last outcome record: %+v", last)
	}
}

// dispatching reports whether a federated call has been authorized and is at its downstream.
func dispatching(t *testing.T) bool {
	m := runT(t, 10*time.Second, nsAppliance, "curl", "-s", "http://127.0.0.1:9464/metrics")
	return strings.Contains(m, "\nmcpintercept_federation_dispatching 1\n")
}
