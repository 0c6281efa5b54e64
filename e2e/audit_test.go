//go:build linux

package e2e

import (
	"context"
	"encoding/json"
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
	caDir := filepath.Join(t.TempDir(), "ca")
	dir := filepath.Join(t.TempDir(), "audit")
	cfg := tlsConfig(t, caDir)
	cfg = strings.Replace(cfg, "routes:\n", `routes:
  - name: audited
    match: {ports: [3002]}
    tls: plaintext
    level: 1
    development: true
    rule_set: lab
    audit: true
`, 1)
	cfg += "audit:\n  dir: " + dir + "\n"
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
