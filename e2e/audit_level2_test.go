//go:build linux

package e2e

import (
	"context"
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
)

// auditL2Record is what these tests read of `mcpintercept audit show --json`.
type auditL2Record struct {
	Seq           uint64          `json:"seq"`
	Kind          string          `json:"kind"`
	Level         int             `json:"level"`
	Method        string          `json:"method"`
	Tool          string          `json:"tool"`
	Decision      string          `json:"decision"`
	Rule          string          `json:"rule"`
	Outcome       string          `json:"outcome"`
	Reason        string          `json:"reason"`
	Arguments     json.RawMessage `json:"arguments"`
	ArgsHash      string          `json:"args_hash"`
	Authorization uint64          `json:"authorization"`
	Iss           string          `json:"iss"`
	Sub           string          `json:"sub"`
}

// auditL2Config is the lab configuration with an audited terminate + Level 2 route on port 3000
// (arguments recorded), the audit store in dir.
func auditL2Config(t *testing.T, caDir, dir, auditExtra string) string {
	cfg := tlsConfig(t, caDir)
	cfg = strings.Replace(cfg, "routes:\n", `routes:
  - name: audited-level2
    match: {ports: [3000]}
    tls: terminate
    level: 2
    rule_set: lab-level2
    audit: true
    audit_arguments: true
`, 1)
	return cfg + "audit:\n  dir: " + dir + "\n" + auditExtra
}

// callLogServer is the Go SDK server over TLS on 10.200.2.2:3000, writing each echo it executed
// to the returned file.
func callLogServer(t *testing.T) string {
	t.Helper()
	log := filepath.Join(t.TempDir(), "calls.log")
	p := startT(t, nsServer, bin("mcpserver"), "-stateless", "-response", "sse", "-listen", "10.200.2.2:3000",
		"-tls-cert", labPKI("server.pem"), "-tls-key", labPKI("server-key.pem"), "-call-log", log)
	if err := p.waitFor("READY", 60*time.Second); err != nil {
		t.Fatal(err)
	}
	return log
}

func executedCalls(t *testing.T, log string) []string {
	t.Helper()
	b, err := os.ReadFile(log)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return strings.Fields(string(b))
}

func auditShow(t *testing.T, dir string) []auditL2Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin("mcpintercept"), "audit", "show", "--json", dir).Output()
	if err != nil {
		t.Fatalf("audit show: %v", err)
	}
	var recs []auditL2Record
	for line := range strings.Lines(string(out)) {
		var r auditL2Record
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("record %q: %v", line, err)
		}
		recs = append(recs, r)
	}
	return recs
}

func auditVerify(t *testing.T, dir string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin("mcpintercept"), "audit", "verify", dir).CombinedOutput()
	if err != nil {
		t.Fatalf("audit verify %s: %v\n%s", dir, err, out)
	}
	return string(out)
}

// TestAuditLevel2KillNine (issue 18 acceptance): under load through terminate + Level 2, the
// appliance is SIGKILLed. Every echo the server executed (its own call log) has a durable
// authorization record naming its arguments, `audit verify` passes on what is on disk, and after
// a restart the chain continues.
func TestAuditLevel2KillNine(t *testing.T) {
	needLab(t)
	log := callLogServer(t)
	dir := filepath.Join(t.TempDir(), "audit")
	cfg := auditL2Config(t, filepath.Join(t.TempDir(), "ca"), dir, "")
	a := startAppliance(t, "nftables-tproxy", cfg)
	ca := exportCA(t, cfg)
	const url = "https://10.200.2.2:3000/mcp"

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
				text := fmt.Sprintf("kill9-%d-%d", g, i)
				if r, err := callTool(t, url, ca, "echo", `{"text":"`+text+`"}`); err == nil && r.Text == text {
					ok.Add(1)
				}
			}
		}()
	}
	killUnderLoad(t, a, &ok, stop, &wg)
	// What ExecStopPost does after a SIGKILL: the steering goes.
	runT(t, 30*time.Second, nsAppliance, bin("mcpintercept"), "cleanup")

	executed := executedCalls(t, log)
	if len(executed) < 12 {
		t.Fatalf("the server executed %d calls, want at least 12", len(executed))
	}
	auditVerify(t, dir)
	recs := auditShow(t, dir)
	authorized := map[string]bool{}
	var last uint64
	for _, r := range recs {
		last = max(last, r.Seq)
		if r.Kind != "authorization" || r.Decision != "allow" || r.Tool != "echo" {
			continue
		}
		var args struct{ Text string }
		if err := json.Unmarshal(r.Arguments, &args); err != nil || r.ArgsHash == "" {
			t.Errorf("authorization without its arguments and hash: %+v", r)
		}
		authorized[args.Text] = true
	}
	for _, text := range executed {
		if !authorized[text] {
			t.Errorf("the server executed %q, which has no durable authorization record", text)
		}
	}

	// The chain continues after a restart.
	a = startAppliance(t, "nftables-tproxy", cfg)
	if r, err := callTool(t, url, ca, "echo", `{"text":"after-restart"}`); err != nil || r.Text != "after-restart" {
		t.Fatalf("after the restart: %+v, %v", r, err)
	}
	a.stopGracefully(t)
	auditVerify(t, dir)
	var found bool
	for _, r := range auditShow(t, dir) {
		if r.Seq > last && r.Kind == "authorization" && strings.Contains(string(r.Arguments), "after-restart") {
			found = true
		}
	}
	if !found {
		t.Errorf("no authorization of the call after the restart beyond seq %d", last)
	}
}

// TestAuditLevel2DiskFull (issue 18 acceptance): with audit.dir on a full tmpfs, audited calls
// are refused with -31004 and none reaches the server, /readyz is 503; once space is freed the
// service resumes by itself and the log verifies.
func TestAuditLevel2DiskFull(t *testing.T) {
	needLab(t)
	log := callLogServer(t)
	dir := filepath.Join(t.TempDir(), "audit")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=1m,mode=0700", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("mount tmpfs: %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", dir).Run() })
	cfg := auditL2Config(t, filepath.Join(t.TempDir(), "ca"), dir, "  timeout: 1s\n")
	a := startAppliance(t, "nftables-tproxy", cfg)
	ca := exportCA(t, cfg)
	const url = "https://10.200.2.2:3000/mcp"
	if r, err := callTool(t, url, ca, "echo", `{"text":"before-full"}`); err != nil || r.Text != "before-full" {
		t.Fatalf("call with space: %+v, %v", r, err)
	}

	filler := filepath.Join(dir, "filler")
	exec.Command("dd", "if=/dev/zero", "of="+filler, "bs=4k").Run() // stops at ENOSPC
	// The segment's last page may still hold a record or two: calls go on until one is refused.
	var refused string
	for i := 0; i < 200 && refused == ""; i++ {
		text := fmt.Sprintf("while-full-%d", i)
		r, err := callTool(t, url, ca, "echo", `{"text":"`+text+`"}`)
		if err == nil && r.TransportError == "" && !r.IsError {
			continue
		}
		refused = text
		if msg := fmt.Sprint(r, err); !strings.Contains(msg, "audit unavailable") && !strings.Contains(msg, "-31004") {
			t.Errorf("refusal does not name the audit: %s", msg)
		}
	}
	if refused == "" {
		t.Fatal("200 audited calls went through with the audit disk full")
	}
	if slices.Contains(executedCalls(t, log), refused) {
		t.Errorf("the server executed %s, refused for want of audit space", refused)
	}
	if code := runT(t, 10*time.Second, nsAppliance, "curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "http://127.0.0.1:9464/readyz"); code != "503" {
		t.Errorf("/readyz with the audit disk full: %s, want 503", code)
	}

	os.Remove(filler)
	// Resumes by itself: wait for readiness (a bound on a hang, not a timing check).
	deadline := time.Now().Add(60 * time.Second)
	for runT(t, 10*time.Second, nsAppliance, "curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "http://127.0.0.1:9464/readyz") != "200" {
		if time.Now().After(deadline) {
			t.Fatal("/readyz did not recover after space was freed")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if r, err := callTool(t, url, ca, "echo", `{"text":"after-free"}`); err != nil || r.Text != "after-free" {
		t.Fatalf("call after space was freed: %+v, %v", r, err)
	}
	a.stopGracefully(t)
	auditVerify(t, dir)
}

// killUnderLoad kills the appliance with SIGKILL once ok counts 12 successful calls (the count is
// of calls, not of time), then stops the load (close(stop)) and waits for its goroutines.
func killUnderLoad(t *testing.T, a *appliance, ok *atomic.Int64, stop chan struct{}, wg *sync.WaitGroup) {
	t.Helper()
	for ok.Load() < 12 {
		select {
		case <-a.done:
			t.Fatalf("the appliance exited under load:\n%s", a.stderr)
		case <-time.After(20 * time.Millisecond):
		}
	}
	a.stopped = true
	a.cmd.Process.Signal(syscall.SIGKILL)
	<-a.done
	close(stop)
	wg.Wait()
}
