//go:build linux

package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// auditRecord is the part of an audit record (`mcpintercept audit show --json`) this test reads.
type auditRecord struct {
	Seq           uint64 `json:"seq"`
	Kind          string `json:"kind"`
	Flow          uint64 `json:"flow"`
	Client        string `json:"client"`
	Destination   string `json:"destination"`
	Level         int    `json:"level"`
	Method        string `json:"method"`
	Tool          string `json:"tool"`
	Rule          string `json:"rule"`
	Decision      string `json:"decision"`
	Outcome       string `json:"outcome"`
	Reason        string `json:"reason"`
	Authorization uint64 `json:"authorization"`
}

// TestAuditLevel1 (issue 18): through an audited Level 1 route, real Go SDK peers (stateless,
// 2026-07-28) call tools; every call has a durable authorization record and an outcome, a denied
// call one denial record, and `mcpintercept audit verify` passes on what is on disk, also against
// the checkpoint the admin listener served before the stop.
func TestAuditLevel1(t *testing.T) {
	needLab(t)
	statelessServer(t)
	dir, cfg := auditedLevel1Config(t)
	a := startAppliance(t, "nftables-tproxy", cfg)

	const calls = 3
	for range calls {
		if r, err := callTool(t, "http://10.200.2.2:3002/mcp", "", "echo", `{"text":"audited"}`); err != nil || r.IsError || r.Text != "audited" {
			t.Fatalf("echo through the audited route: %+v, %v", r, err)
		}
	}
	if r, err := callTool(t, "http://10.200.2.2:3002/mcp", "", "denied_delete", `{"path":"/etc/passwd"}`); err == nil && !r.IsError && r.TransportError == "" {
		t.Errorf("denied_delete went through: %+v", r)
	}
	if ready := runT(t, 10*time.Second, nsAppliance, "curl", "-s", "http://127.0.0.1:9464/readyz"); !strings.HasPrefix(ready, "ready") {
		t.Errorf("/readyz with the audit store writable: %q", ready)
	}
	checkpoint := filepath.Join(t.TempDir(), "checkpoint")
	note := runT(t, 10*time.Second, nsAppliance, "curl", "-sf", "http://127.0.0.1:9464/audit/checkpoint")
	pubkey := filepath.Join(t.TempDir(), "audit.pub")
	key := runT(t, 10*time.Second, nsAppliance, "curl", "-sf", "http://127.0.0.1:9464/audit/pubkey")
	os.WriteFile(checkpoint, []byte(note), 0o644)
	os.WriteFile(pubkey, []byte(key), 0o644)
	a.stopGracefully(t)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, bin("mcpintercept"), "audit", "verify", dir, "--pubkey", pubkey, "--checkpoint", checkpoint).CombinedOutput(); err != nil {
		t.Fatalf("audit verify: %v\n%s", err, out)
	}
	out, err := exec.CommandContext(ctx, bin("mcpintercept"), "audit", "show", "--json", dir).Output()
	if err != nil {
		t.Fatalf("audit show: %v", err)
	}
	auths := map[uint64]auditRecord{}
	var echoes, outcomes, denials int
	for line := range strings.Lines(string(out)) {
		var r auditRecord
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("record %q: %v", line, err)
		}
		if r.Level != 1 || r.Flow == 0 || !strings.HasPrefix(r.Client, "10.200.1.2:") || r.Destination != "10.200.2.2:3002" {
			t.Errorf("record without its flow's part: %+v", r)
		}
		switch {
		case r.Kind == "authorization" && r.Decision == "allow":
			auths[r.Seq] = r
			if r.Tool == "echo" {
				echoes++
			}
		case r.Kind == "authorization" && r.Decision == "deny":
			if r.Tool != "denied_delete" || r.Outcome != "denied" || r.Rule != "deny-denied-tools" {
				t.Errorf("denial record %+v", r)
			}
			denials++
		case r.Kind == "outcome":
			a, ok := auths[r.Authorization]
			if !ok || a.Method != r.Method || r.Outcome != "result" && r.Outcome != "error" {
				t.Errorf("outcome %+v of authorization %+v", r, a)
			}
			outcomes++
		default:
			t.Errorf("unexpected record %+v", r)
		}
	}
	if echoes != calls || denials != 1 || outcomes != len(auths) {
		t.Errorf("%d echo authorizations (want %d), %d denials (want 1), %d outcomes for %d authorizations:\n%s",
			echoes, calls, denials, outcomes, len(auths), out)
	}
}

// TestAuditStartAndCutNewline (issue 29 items 10 and 11): on the log a real appliance wrote through
// an audited route, with the checkpoint and key its admin listener served kept off the box,
// `mcpintercept audit verify` fails (exit 1) when the oldest records and checkpoints.log are deleted
// (the remaining records put in a segment named for their first seq, as a deleted first segment
// leaves them) and when the last record's newline is cut; the appliance then refuses to start on
// the cut log and leaves its bytes as they are. Intact, verify says the log is proven from seq 1 and
// every record is covered.
func TestAuditStartAndCutNewline(t *testing.T) {
	needLab(t)
	statelessServer(t)
	dir, cfg := auditedLevel1Config(t)
	cfgPath := filepath.Join(t.TempDir(), "mcpintercept.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	a := startApplianceFile(t, "nftables-tproxy", cfgPath)
	for range 4 {
		if r, err := callTool(t, "http://10.200.2.2:3002/mcp", "", "echo", `{"text":"audited"}`); err != nil || r.IsError || r.Text != "audited" {
			t.Fatalf("echo through the audited route: %+v, %v", r, err)
		}
	}
	a.stopGracefully(t)
	// The checkpoint served after the stop is the final one, covering every record (the admin
	// listener is gone then, so it is read from the file it also serves).
	safe := t.TempDir()
	checkpoint, pubkey := filepath.Join(safe, "checkpoint"), filepath.Join(safe, "audit.pub")
	copyAuditFile(t, filepath.Join(dir, "checkpoint"), checkpoint)
	copyAuditFile(t, filepath.Join(dir, "audit.pub"), pubkey)

	seg := filepath.Join(dir, "audit-00000000000000000001.jsonl")
	orig, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(string(orig), "\n")
	lines = lines[:len(lines)-1] // after the final newline
	if len(lines) < 8 {
		t.Fatalf("%d records, want at least 8", len(lines))
	}
	verify := func() (int, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, bin("mcpintercept"), "audit", "verify", dir, "--pubkey", pubkey, "--checkpoint", checkpoint).Output()
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatalf("audit verify: %v", err)
		}
		t.Logf("audit verify:\n%s", out)
		return cmdExit(err), string(out)
	}
	if code, out := verify(); code != 0 || !strings.Contains(out, "every record from seq 1 is present") || !strings.Contains(out, "every record is covered") {
		t.Fatalf("intact log: exit %d\n%s", code, out)
	}

	t.Run("oldest records and checkpoints.log deleted", func(t *testing.T) {
		rest := filepath.Join(dir, "audit-00000000000000000005.jsonl")
		os.WriteFile(rest, []byte(strings.Join(lines[4:], "")), 0o600)
		os.Remove(seg)
		logData, _ := os.ReadFile(filepath.Join(dir, "checkpoints.log"))
		os.Remove(filepath.Join(dir, "checkpoints.log"))
		defer func() {
			os.Remove(rest)
			os.WriteFile(seg, orig, 0o600)
			os.WriteFile(filepath.Join(dir, "checkpoints.log"), logData, 0o644)
		}()
		if code, out := verify(); code != 1 || !strings.Contains(out, "records 1 to 4 are missing") {
			t.Fatalf("exit %d\n%s", code, out)
		}
	})

	t.Run("last newline cut", func(t *testing.T) {
		cut := strings.TrimSuffix(string(orig), "\n")
		os.WriteFile(seg, []byte(cut), 0o600)
		code, out := verify()
		if code != 1 || !strings.Contains(out, "lacks its newline") {
			t.Fatalf("exit %d\n%s", code, out)
		}
		t.Cleanup(func() { runT(t, 30*time.Second, nsAppliance, bin("mcpintercept"), "cleanup") })
		p := startT(t, nsAppliance, bin("mcpintercept"), "run", "--config", cfgPath, "--mechanism", "nftables-tproxy")
		if code := waitDone(t, p); code == 0 || !strings.Contains(p.stderr.String(), "lacks its newline") {
			t.Fatalf("the appliance on the cut log: exit %d\n%s", code, p.stderr)
		}
		if after, _ := os.ReadFile(seg); string(after) != cut {
			t.Fatalf("the refused start changed the segment: %d bytes, was %d", len(after), len(cut))
		}
	})
}

func copyAuditFile(t *testing.T, from, to string) {
	t.Helper()
	data, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// cmdExit is the exit code of a finished command's error (0 for nil).
func cmdExit(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

// auditedLevel1Config is the lab configuration with an audited Level 1 route (audited) in front of
// the stateless Go SDK server on 3002, and the audit directory it writes to.
func auditedLevel1Config(t *testing.T) (dir, cfg string) {
	t.Helper()
	dir = filepath.Join(t.TempDir(), "audit")
	cfg = tlsConfig(t, filepath.Join(t.TempDir(), "ca"))
	cfg = strings.Replace(cfg, "routes:\n", `routes:
  - name: audited
    match: {ports: [3002]}
    tls: plaintext
    level: 1
    development: true
    rule_set: lab
    audit: true
`, 1)
	return dir, cfg + "audit:\n  dir: " + dir + "\n"
}
