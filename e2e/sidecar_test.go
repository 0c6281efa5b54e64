//go:build linux

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// sidecarConfig is the appliance in mcpi-server beside its servers (the draft's Sidecar mode):
// nothing steered on egress (mechanism external), inbound connections to 3041 (plaintext, Level
// 2) and 3043 (terminated with the server's own certificate, Level 2) steered into it.
func sidecarConfig(t *testing.T) string {
	t.Helper()
	return fmt.Sprintf(`mechanism: external
listen: {addresses: [127.0.0.1, "::1"], port: 15101}
inbound:
  ports: [3041, 3043]
  listen_port: 15106
  tls: {cert_file: %s, key_file: %s}
ca: {dir: %s}
admin: {listen: "127.0.0.1:9474"}
limits: {connect_timeout: 5s, drain_timeout: 2s}
routes:
  - name: sidecar-plain
    match: {ports: [3041]}
    tls: plaintext
    level: 2
    development: true
    rule_set: sidecar
  - name: sidecar-tls
    match: {ports: [3043]}
    tls: terminate
    level: 2
    rule_set: sidecar
rule_sets:
  sidecar:
    - name: no-forbidden-echo
      when: 'conn.mechanism == "nftables-inbound" && mcp.method == "tools/call" && mcp.name == "echo" && mcp.arguments.text == "sidecar-forbidden"'
      action: deny
`, labPKI("server.pem"), labPKI("server-key.pem"), filepath.Join(t.TempDir(), "ca"))
}

// sidecarServers starts the Go SDK server on 3041 (plaintext) and 3043 (TLS, the lab server
// certificate), IPv4 and IPv6, each with a call log of the echo texts it executed.
func sidecarServers(t *testing.T) (plain, tlsSrv *proc, plainLog, tlsLog string) {
	t.Helper()
	dir := t.TempDir()
	plainLog, tlsLog = filepath.Join(dir, "plain.calls"), filepath.Join(dir, "tls.calls")
	var err error
	plain, err = start(nsServer, bin("mcpserver"), "-listen", "10.200.2.2:3041,[fd00:200:2::2]:3041", "-call-log", plainLog)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(plain.kill)
	tlsSrv, err = start(nsServer, bin("mcpserver"), "-listen", "10.200.2.2:3043,[fd00:200:2::2]:3043", "-call-log", tlsLog,
		"-tls-cert", labPKI("server.pem"), "-tls-key", labPKI("server-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tlsSrv.kill)
	for _, p := range []*proc{plain, tlsSrv} {
		if err := p.waitFor("READY", 30*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	return plain, tlsSrv, plainLog, tlsLog
}

// startSidecar runs the appliance in mcpi-server with cfg and waits until it is ready.
func startSidecar(t *testing.T, cfg string) *appliance {
	t.Helper()
	path := filepath.Join(t.TempDir(), "sidecar.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := start(nsServer, bin("mcpintercept"), "run", "--config", path)
	if err != nil {
		t.Fatal(err)
	}
	a := &appliance{proc: p, mechanism: "external"}
	t.Cleanup(func() {
		if !a.stopped {
			a.stopped = true
			a.stop(syscall.SIGTERM, 30*time.Second)
		}
		runT(t, 20*time.Second, nsServer, bin("mcpintercept"), "cleanup")
	})
	if err := p.waitFor("msg=ready", 30*time.Second); err != nil {
		p.kill()
		t.Fatalf("%v\n%s", err, p.stderr)
	}
	return a
}

func fileLines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return strings.Fields(string(b))
}

// TestSidecar is the draft's Sidecar mode end to end: "MUST be transparent to both clients and
// the co-located server", "MUST forward all protocol messages, applying configured interceptors
// at defined extension points (pre-request, post-request, pre-response, post-response)", "MUST NOT
// aggregate capabilities from multiple backends" (Sidecar Mode). The appliance runs in the
// server's namespace; the Go SDK client calls from mcpi-client, over IPv4 and IPv6, plaintext and
// terminated with the server's own certificate. The server sees the client's own address, a
// Level 2 deny never reaches it, records name the mode and the interceptor point, and a graceful
// stop, a SIGKILL followed by `cleanup`, leave nothing installed.
func TestSidecar(t *testing.T) {
	needLab(t)
	plain, tlsSrv, plainLog, tlsLog := sidecarServers(t)
	before := oursLeft(steeringStateIn(t, nsServer))
	if len(before) > 0 {
		t.Fatalf("mcpi-server has steering of ours before the test:\n%s", strings.Join(before, "\n"))
	}
	urls := []struct{ name, url, ca, client string }{
		{"plain-v4", "http://10.200.2.2:3041/mcp", "", "10.200.1.2"},
		{"plain-v6", "http://[fd00:200:2::2]:3041/mcp", "", "fd00:200:1::2"},
		{"tls-v4", "https://10.200.2.2:3043/mcp", labPKI("server-ca.pem"), "10.200.1.2"},
	}
	// Direct: what the server answers without the appliance (the client's address included).
	direct := map[string]toolResult{}
	for _, u := range urls {
		r, err := callTool(t, u.url, u.ca, "echo", `{"text":"sidecar-direct"}`)
		if err != nil || r.Text != "sidecar-direct" {
			t.Fatalf("%s direct echo: %+v %v", u.name, r, err)
		}
		w, err := callTool(t, u.url, u.ca, "whoami", `{}`)
		if err != nil || !strings.Contains(w.Text, u.client) {
			t.Fatalf("%s direct whoami: %+v %v (want the client's address %s)", u.name, w, err, u.client)
		}
		direct[u.name] = r
	}

	a := startSidecar(t, sidecarConfig(t))
	if st := steeringStateIn(t, nsServer); !strings.Contains(st, "mcpintercept_inbound") {
		t.Fatalf("no inbound table installed:\n%s", st)
	}
	for _, u := range urls {
		r, err := callTool(t, u.url, u.ca, "echo", `{"text":"sidecar-through"}`)
		if err != nil || r.Text != "sidecar-through" || r.IsError != direct[u.name].IsError {
			t.Errorf("%s echo through the sidecar: %+v %v (direct %+v)", u.name, r, err, direct[u.name])
		}
		// Transparent to the server: it sees the client's own address, not the appliance's.
		w, err := callTool(t, u.url, u.ca, "whoami", `{}`)
		if err != nil || !strings.Contains(w.Text, u.client) {
			t.Errorf("%s whoami through the sidecar: %+v %v (want the client's address %s)", u.name, w, err, u.client)
		}
		// Server messages (progress notifications) pass the pre-response point.
		if p, err := callTool(t, u.url, u.ca, "progress", `{"steps":2}`); err != nil || p.ProgressNotifications != 2 {
			t.Errorf("%s progress through the sidecar: %+v %v", u.name, p, err)
		}
		// A Level 2 deny: answered by the appliance, never executed.
		d, err := callTool(t, u.url, u.ca, "echo", `{"text":"sidecar-forbidden"}`)
		if err == nil && !d.IsError && d.TransportError == "" {
			t.Errorf("%s denied echo through the sidecar succeeded: %+v", u.name, d)
		}
	}
	for _, log := range []string{plainLog, tlsLog} {
		calls := fileLines(t, log)
		if slices.Contains(calls, "sidecar-forbidden") {
			t.Errorf("%s: the server executed a call the sidecar denied: %v", log, calls)
		}
		if !slices.Contains(calls, "sidecar-through") {
			t.Errorf("%s: the server did not execute the forwarded call: %v", log, calls)
		}
	}
	// The server's own log names the client's address (both families).
	for _, want := range []string{"remote=10.200.1.2:", "remote=[fd00:200:1::2]:"} {
		if !strings.Contains(plain.stderr.String()+plain.stdout.String(), want) {
			t.Errorf("the plaintext server's log has no %q:\n%s", want, plain.stderr)
		}
	}
	if !strings.Contains(tlsSrv.stderr.String()+tlsSrv.stdout.String(), "remote=10.200.1.2:") {
		t.Errorf("the TLS server's log does not show the client's address:\n%s", tlsSrv.stderr)
	}

	recs := a.stopGracefullyIn(t, nsServer)
	var pre, resp, post, deny int
	for _, r := range recs {
		if r.Mode != "Sidecar" || r.Mechanism != "nftables-inbound" {
			t.Errorf("record without the sidecar's mode or mechanism: %+v", r)
			continue
		}
		switch r.Point {
		case "pre-request":
			pre++
		case "pre-response":
			resp++
		case "post-response":
			post++
		default:
			t.Errorf("record with point %q: %+v", r.Point, r)
		}
		if r.MCPName == "echo" && r.Decision == "deny" && r.Rule == "no-forbidden-echo" {
			deny++
			if r.Point != "pre-request" {
				t.Errorf("the deny was recorded at %q, want pre-request", r.Point)
			}
		}
		if !strings.HasPrefix(r.Client, "10.200.1.2:") && !strings.HasPrefix(r.Client, "[fd00:200:1::2]:") {
			t.Errorf("record's client %q is not the client's own address", r.Client)
		}
	}
	if pre == 0 || resp == 0 || post == 0 || deny != len(urls) {
		t.Errorf("records: %d pre-request, %d pre-response, %d post-response, %d denies (want %d)", pre, resp, post, deny, len(urls))
	}
	t.Logf("sidecar records: %d pre-request, %d pre-response, %d post-response, %d denies", pre, resp, post, deny)

	// After the stop the servers answer directly again.
	if r, err := callTool(t, urls[0].url, "", "echo", `{"text":"sidecar-after"}`); err != nil || r.Text != "sidecar-after" {
		t.Errorf("echo after the sidecar stopped: %+v %v", r, err)
	}

	// SIGKILL, then cleanup (what the unit's ExecStopPost runs): nothing of ours is left.
	a = startSidecar(t, sidecarConfig(t))
	if r, err := callTool(t, urls[0].url, "", "echo", `{"text":"sidecar-again"}`); err != nil || r.Text != "sidecar-again" {
		t.Errorf("echo through the restarted sidecar: %+v %v", r, err)
	}
	a.stopped = true
	a.cmd.Process.Signal(syscall.SIGKILL)
	<-a.done
	if left := oursLeft(steeringStateIn(t, nsServer)); len(left) == 0 {
		t.Errorf("SIGKILL left nothing to clean up: the test would not see a cleanup failure")
	}
	out := runT(t, 20*time.Second, nsServer, bin("mcpintercept"), "cleanup")
	if left := oursLeft(steeringStateIn(t, nsServer)); len(left) > 0 {
		t.Errorf("after SIGKILL and cleanup:\n%s\ncleanup said:\n%s", strings.Join(left, "\n"), out)
	}
	if r, err := callTool(t, urls[0].url, "", "echo", `{"text":"sidecar-cleaned"}`); err != nil || r.Text != "sidecar-cleaned" {
		t.Errorf("echo after cleanup: %+v %v", r, err)
	}
}

// stopGracefullyIn is stopGracefully for an appliance in namespace ns.
func (a *appliance) stopGracefullyIn(t *testing.T, ns string) []flowRecord {
	t.Helper()
	a.stopped = true
	if err := a.stop(syscall.SIGTERM, 30*time.Second); err != nil {
		t.Errorf("appliance did not stop cleanly: %v\nstderr:\n%s", err, a.stderr)
	}
	if left := oursLeft(steeringStateIn(t, ns)); len(left) > 0 {
		t.Errorf("after SIGTERM the daemon left steering installed:\n%s", strings.Join(left, "\n"))
	}
	return parseFlowLog(t, a.stdout.String())
}
