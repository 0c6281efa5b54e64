//go:build linux

package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestObserve (issue 22 items 1 and 2): `mcpintercept observe` follows the lab appliance's
// decisions. The Go SDK server on 3011 (lab-level2: echo carrying "forbidden" and denied_* are
// denied) gets calls while `observe --decision deny -o json` and `observe --top` run in
// mcpi-appliance: the first prints exactly the test's denials in order, the second counts that
// match the server's own request log; a reader that stops reading (curl, SIGSTOP) is dropped
// (mcpintercept_observe_dropped_total) while calls go on succeeding. With Debian's chromium,
// the /ui page lists the calls' tools and maps the client, both servers and each server's tools
// (screenshots in e2e/testdata/observe-ui*.png).
func TestObserve(t *testing.T) {
	needLab(t)
	srv, _ := statelessServer(t) // its request log names each tools/call (mcp_method=)
	base := t.TempDir()
	caDir := filepath.Join(base, "ca")
	startAppliance(t, "nftables-tproxy", tlsConfig(t, caDir))
	tokFile := filepath.Join(base, "tools", "admin.token")
	raw, err := os.ReadFile(tokFile)
	if err != nil {
		t.Fatalf("the admin token (made at start whether or not tool pins are on): %v", err)
	}
	token := strings.TrimSpace(string(raw))
	const admin = "http://127.0.0.1:9464"
	metric := func(name string) int {
		out := runT(t, 10*time.Second, nsAppliance, "curl", "-s", admin+"/metrics")
		m := regexp.MustCompile(`(?m)^` + name + ` (\S+)$`).FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("no %s in /metrics", name)
		}
		v, _ := strconv.ParseFloat(m[1], 64)
		return int(v)
	}
	waitMetric := func(name string, want int) {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for metric(name) != want {
			if time.Now().After(deadline) {
				t.Fatalf("%s never reached %d (is %d)", name, want, metric(name))
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	if code := runT(t, 10*time.Second, nsAppliance, "curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", admin+"/observe"); code != "401" {
		t.Fatalf("/observe without the token: %s, want 401", code)
	}

	obs := func(args ...string) *proc {
		return startT(t, nsAppliance, bin("mcpintercept"), append([]string{"observe", "--admin", admin, "--token-file", tokFile}, args...)...)
	}
	denials := obs("--decision", "deny", "-o", "json")
	top := obs("--top", "--route", "lab-level2")
	waitMetric("mcpintercept_observe_subscribers", 2)

	const url = "http://10.200.2.2:3012/mcp" // lab-level2
	serverCalls := func() int { return strings.Count(srv.stderr.String(), "mcp_method=tools/call") }
	before := serverCalls()
	type step struct {
		tool, args string
		denied     bool
	}
	steps := []step{
		{"echo", `{"text":"one"}`, false},
		{"echo", `{"text":"forbidden word"}`, true},
		{"add", `{"a":2,"b":3}`, false},
		{"denied_alpha", `{}`, true},
		{"echo", `{"text":"two"}`, false},
		{"denied_beta", `{}`, true},
		{"add", `{"a":1,"b":1}`, false},
	}
	var wantDenials []string
	wantTop := map[string][2]int{} // tool: calls, denied
	for _, s := range steps {
		r := goCall(t, url, s.tool, s.args)
		if (r.Error != nil) != s.denied {
			t.Fatalf("%s %s: %+v, denied want %v", s.tool, s.args, r, s.denied)
		}
		c := wantTop[s.tool]
		c[0]++
		if s.denied {
			c[1]++
			wantDenials = append(wantDenials, s.tool)
		}
		wantTop[s.tool] = c
	}
	reached := serverCalls() - before

	// The denials, in order, and nothing else.
	deadline := time.Now().Add(60 * time.Second)
	for strings.Count(denials.stdout.String(), "\n") < len(wantDenials) && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	// Stop both followers (Ctrl-C): --top prints its summary then.
	denials.stop(syscall.SIGINT, 30*time.Second)
	top.stop(syscall.SIGINT, 30*time.Second)
	var gotDenials []string
	for _, line := range strings.Split(strings.TrimSpace(denials.stdout.String()), "\n") {
		var r flowRecord
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("observe -o json line %q: %v", line, err)
		}
		if r.Decision != "deny" || r.MCPMethod != "tools/call" {
			t.Errorf("observe --decision deny printed %s", line)
		}
		gotDenials = append(gotDenials, r.MCPName)
	}
	if fmt.Sprint(gotDenials) != fmt.Sprint(wantDenials) {
		t.Errorf("observe --decision deny: %v, want %v\n%s", gotDenials, wantDenials, denials.stderr)
	}

	// --no-follow (issue 34 item 3): the same denials from the records the appliance keeps, then
	// exit 0 (runT fails the test on a hang or another exit code).
	snap := runT(t, 30*time.Second, nsAppliance, bin("mcpintercept"), "observe", "--admin", admin, "--token-file", tokFile,
		"--since", "10m", "--decision", "deny", "--no-follow", "-o", "json")
	var snapped []string
	for _, line := range strings.Split(strings.TrimSpace(snap), "\n") {
		var r flowRecord
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("observe --no-follow line %q: %v", line, err)
		}
		snapped = append(snapped, r.MCPName)
	}
	if len(snapped) < len(wantDenials) || fmt.Sprint(snapped[len(snapped)-len(wantDenials):]) != fmt.Sprint(wantDenials) {
		t.Errorf("observe --no-follow --decision deny: %v, want it to end with %v", snapped, wantDenials)
	}

	// --top: per tool, calls and denials; the allowed ones are what the server logged.
	got := map[string][2]int{}
	allowed := 0
	for _, line := range strings.Split(top.stdout.String(), "\n") {
		// CLIENT… TOOL CALLS DENIED P50_MS P99_MS (the client column may hold a process name)
		f := strings.Fields(line)
		if len(f) < 6 {
			continue
		}
		var num [4]int
		ok := true
		for i := range num {
			v, err := strconv.Atoi(f[len(f)-4+i])
			num[i], ok = v, ok && err == nil
		}
		if !ok {
			continue
		}
		tool := f[len(f)-5]
		got[tool] = [2]int{got[tool][0] + num[0], got[tool][1] + num[1]}
		allowed += num[0] - num[1]
	}
	if fmt.Sprint(got) != fmt.Sprint(wantTop) || allowed != reached {
		t.Errorf("observe --top: %v (allowed %d), want %v; the server logged %d tools/call\n%s", got, allowed, wantTop, reached, top.stdout)
	}

	// The page, in headless Chromium.
	if _, err := exec.LookPath("chromium"); err != nil {
		t.Log("SKIP the /ui browser check: chromium is not installed (apt-get install chromium)")
	} else {
		// A second server offering the same tool (the stateless server's Level 1 port): the
		// page's map keeps it apart from 3012's echo.
		if r := goCall(t, "http://10.200.2.2:3002/mcp", "echo", `{"text":"second server"}`); r.Error != nil || r.Text != "second server" {
			t.Fatalf("echo on 3002: %+v", r)
		}
		checkUIPage(t, admin, token)
	}

	// A reader that stops reading: dropped, counted; calls go on.
	dropsBefore := metric("mcpintercept_observe_dropped_total")
	// A client that asks for the stream and stops reading it (SIGSTOP; `ip netns exec` execs
	// curl, so the process is curl).
	stalled := startT(t, nsAppliance, "curl", "-sN", "-o", "/dev/null", "-H", "Authorization: Bearer "+token, admin+"/observe?buffer=16")
	defer stalled.kill()
	defer stalled.cmd.Process.Signal(syscall.SIGCONT)
	waitMetric("mcpintercept_observe_subscribers", 1)
	stalled.cmd.Process.Signal(syscall.SIGSTOP)
	// The load: JSON-RPC calls over one keep-alive connection from mcpi-client (each is a record
	// whatever the server answers), in rounds of 500 until the drop is counted. The kernel's
	// socket buffers (the appliance's send buffer grows to megabytes) hold thousands of records
	// before the hub's buffer of 16 fills.
	const perRound = 500
	load := []string{"-s", "-o", "/dev/null", "-w", "%{http_code}\n", "-X", "POST",
		"-H", "Content-Type: application/json", "-H", "Accept: application/json, text/event-stream",
		"-H", "MCP-Protocol-Version: 2025-06-18", "-H", "Mcp-Method: tools/call", "-H", "Mcp-Name: echo",
		"-d", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"load"}}}`}
	for i := 0; i < perRound; i++ {
		load = append(load, "http://10.200.2.2:3012/mcp") // one curl, one keep-alive connection
	}
	rounds := 0
	for metric("mcpintercept_observe_dropped_total") == dropsBefore {
		if rounds++; rounds > 40 {
			t.Fatalf("a stalled reader was not dropped after %d requests", perRound*rounds)
		}
		out := runT(t, 120*time.Second, nsClient, "curl", load...)
		if n := strings.Count(out, "200\n"); n != perRound {
			t.Fatalf("load round %d: %d of %d answered 200", rounds, n, perRound)
		}
	}
	if n := metric("mcpintercept_observe_dropped_total") - dropsBefore; n != 1 {
		t.Errorf("dropped %d readers, want the 1 stalled", n)
	}
	t.Logf("the stalled reader was dropped within %d requests", perRound*rounds)
	if r := goCall(t, url, "echo", `{"text":"after"}`); r.Error != nil || r.Text != "after" {
		t.Fatalf("call after the drop: %+v", r)
	}
}

// checkUIPage loads /ui (through the login, as a snapshot) in headless Chromium at 1400×900:
// the table lists the calls' tools; the map (SVG the page draws) has a node for the client, for
// each server (3012 at Level 2, 3002 at Level 1) and for each server's tools, echo once per
// server. The screenshots are the committed artefacts e2e/testdata/observe-ui.png (map and
// table), observe-ui-map.png (#map: the map and the counts) and observe-ui-calls.png (#calls:
// the table).
func checkUIPage(t *testing.T, admin, token string) {
	// snapshot=1: the page reads the recent records to their end instead of following (a stream
	// left open keeps a headless browser's virtual time from advancing).
	login := admin + "/ui/login?snapshot=1&token=" + token
	browser := []string{"--headless", "--no-sandbox", "--window-size=1400,900", "--virtual-time-budget=5000"}
	dom := runT(t, 60*time.Second, nsAppliance, "chromium", append(browser, "--dump-dom", login)...)
	for _, tool := range []string{"echo", "add", "denied_alpha"} {
		if !strings.Contains(dom, `data-tool="`+tool+`"`) {
			t.Errorf("the page's table does not list %s", tool)
		}
	}
	if n := strings.Count(dom, `<g class="node `); n < 7 {
		t.Errorf("the map has %d nodes, want at least 7 (1 client, 2 servers, 4 tools)", n)
	}
	const s1, s2 = "10.200.2.2:3012", "10.200.2.2:3002"
	for _, node := range []string{"client|10.200.1.2", "server|" + s1, "server|" + s2,
		"tool|" + s1 + "|echo", "tool|" + s1 + "|add", "tool|" + s1 + "|denied_alpha", "tool|" + s2 + "|echo"} {
		// A client's key may go on with its process name; the others are exact.
		if !strings.Contains(dom, `data-node="`+node+`"`) && !strings.Contains(dom, `data-node="`+node+` `) {
			t.Errorf("the map has no node %s", node)
		}
	}
	for name, view := range map[string]string{"observe-ui.png": "", "observe-ui-map.png": "#map", "observe-ui-calls.png": "#calls"} {
		png := filepath.Join(repoRoot, "e2e", "testdata", name)
		runT(t, 60*time.Second, nsAppliance, "chromium", append(browser, "--screenshot="+png, login+view)...)
		if fi, err := os.Stat(png); err != nil || fi.Size() == 0 {
			t.Errorf("screenshot %s: %v", png, err)
		}
	}
}
