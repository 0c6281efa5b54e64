//go:build linux

package e2e

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestNodeAgentSidecar is the draft's Sidecar mode under the node agent: a server pod annotated
// mcpintercept.io/inbound-ports has the calls arriving for its port intercepted in its own network
// namespace, judged at Level 2 and delivered from the caller's own address; the caller is a pod
// that is not enrolled at all, named in the records (by its address in the pod list) and in the
// rules (client.pod.labels: the untrusted pod is denied, and its call never reaches the server).
// With failure: open the agent's SIGTERM takes the inbound steering out of the pod.
func TestNodeAgentSidecar(t *testing.T) {
	naNeed(t)
	l := naSetup(t)
	agent := l.startAgent("flows-sidecar.jsonl")

	server := l.pod("sc-server", "plain", map[string]string{"app": "mcp-server"})
	l.repod(server, map[string]string{"mcpintercept.io/intercept": "enabled", "mcpintercept.io/inbound-ports": fmt.Sprint(naPort)})
	trusted := l.pod("sc-trusted", "plain", map[string]string{"mcp-tier": "trusted"})
	untrusted := l.pod("sc-untrusted", "plain", map[string]string{"mcp-tier": "untrusted"})
	for _, p := range []*naPod{server, trusted, untrusted} {
		l.add(p)
		l.writePod(p) // the pod list learns its address, as kubelet reports it
	}
	callLog := l.file("sidecar-calls.log")
	srv := startT(t, server.netns, bin("mcpserver"), "-listen", fmt.Sprintf("%s:%d", server.ip, naPort), "-call-log", callLog)
	if err := srv.waitFor("READY", 60*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := agent.waitFor(`msg="pod enrolled" pod=plain/sc-server`, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	st := naState(t, server)
	if !st.has("table inet mcpintercept_inbound") {
		t.Fatalf("the annotated server pod has no inbound table:\n%s", strings.Join(st.Tables, "\n"))
	}
	for _, p := range []*naPod{trusted, untrusted} {
		if left := naState(t, p).leftovers(); left != "" {
			t.Errorf("%s is not selected but has steering of ours:\n%s", p.Name, left)
		}
	}
	url := fmt.Sprintf("http://%s:%d/mcp", server.ip, naPort)

	// Transparent to the server: it sees the calling pod's own address.
	w, err := naGoCall(trusted, url, "whoami", `{}`)
	if err != nil || !strings.Contains(w.Text, trusted.ip+":") {
		t.Errorf("whoami from sc-trusted through the server pod's sidecar: %+v %v (want %s)", w, err, trusted.ip)
	}
	if r, err := naGoCall(trusted, url, "echo", `{"text":"sidecar-trusted"}`); err != nil || r.Text != "sidecar-trusted" {
		t.Errorf("echo from sc-trusted: %+v %v", r, err)
	}
	// The rule on client.pod.labels sees the calling pod: denied before the server.
	if r, err := naGoCall(untrusted, url, "echo", `{"text":"sidecar-untrusted"}`); err == nil && !r.IsError && r.TransportError == "" {
		t.Errorf("echo from sc-untrusted (mcp-tier=untrusted) succeeded: %+v", r)
	}
	recs := agent.waitRecords(t, "the inbound calls of both pods", func(rs []naRecord) bool {
		return naPodCalls(rs, "plain/sc-trusted", "echo", "allow") >= 1 && naPodCalls(rs, "plain/sc-untrusted", "echo", "deny") >= 1
	})
	calls := fileLines(t, callLog)
	if slices.Contains(calls, "sidecar-untrusted") || !slices.Contains(calls, "sidecar-trusted") {
		t.Errorf("the server's call log %v: want sidecar-trusted and never sidecar-untrusted", calls)
	}
	n := 0
	for _, r := range recs {
		if r.podName() != "plain/sc-trusted" && r.podName() != "plain/sc-untrusted" {
			continue
		}
		n++
		if r.Mode != "Sidecar" || r.Mechanism != "nftables-inbound" || r.Point == "" {
			t.Errorf("inbound record without mode, mechanism or point: %+v", r)
		}
		if !strings.HasPrefix(r.Client, trusted.ip+":") && !strings.HasPrefix(r.Client, untrusted.ip+":") {
			t.Errorf("inbound record's client %q is not the calling pod", r.Client)
		}
		if r.MCPName == "echo" && r.Decision == "deny" && (r.Rule != "deny-untrusted-pods" || r.Point != "pre-request") {
			t.Errorf("the deny: rule %q at %q, want deny-untrusted-pods at pre-request", r.Rule, r.Point)
		}
	}
	t.Logf("node agent sidecar: %d inbound records naming the calling pod", n)

	// failure: open: SIGTERM takes the inbound steering away; the server answers directly.
	agent.stopTerm(t)
	if st := naState(t, server); st.has("table inet mcpintercept_inbound") {
		t.Errorf("after the agent's SIGTERM (failure: open) the server pod keeps its inbound table")
	}
	if r, err := naGoCall(untrusted, url, "echo", `{"text":"sidecar-direct"}`); err != nil || r.Text != "sidecar-direct" {
		t.Errorf("echo after the agent stopped: %+v %v", r, err)
	}
}
