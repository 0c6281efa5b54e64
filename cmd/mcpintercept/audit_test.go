package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"mcpintercept/audit"
)

// writeAuditLog writes a small store: three allowed calls of two tools and
// one denial.
func writeAuditLog(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "audit")
	s, err := audit.Open(audit.Config{Dir: dir}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []audit.Record{
		{Kind: audit.KindAuthorization, Client: "10.0.0.1:5000", Server: "mcp.example", Level: 2, Method: "tools/call", Tool: "read_file", Decision: audit.Allow, Rule: "r1"},
		{Kind: audit.KindOutcome, Client: "10.0.0.1:5000", Server: "mcp.example", Level: 2, Method: "tools/call", Tool: "read_file", Outcome: "result", Authorization: 1},
		{Kind: audit.KindAuthorization, Client: "10.0.0.2:6000", Server: "mcp.example", Level: 2, Method: "tools/call", Tool: "delete_file", Decision: audit.Deny, Rule: "no-delete"},
		{Kind: audit.KindAuthorization, Client: "10.0.0.1:5001", Server: "mcp.example", Level: 2, Method: "tools/call", Tool: "list", Decision: audit.Allow, Rule: "r1"},
	} {
		if _, err := s.Append(context.Background(), &r); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	return dir
}

func runCLI(args ...string) (int, string, string) {
	var stdout, stderr bytes.Buffer
	code := realMain(args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

func TestAuditVerifyCommand(t *testing.T) {
	dir := writeAuditLog(t)
	pub := filepath.Join(t.TempDir(), "audit.pub")
	cp := filepath.Join(t.TempDir(), "checkpoint")
	copyFile(t, filepath.Join(dir, "audit.pub"), pub)
	copyFile(t, filepath.Join(dir, "checkpoint"), cp)

	code, out, errOut := runCLI("audit", "verify", dir, "--pubkey", pub, "--checkpoint", cp)
	if code != 0 || !strings.HasPrefix(out, "OK: 4 records") {
		t.Fatalf("verify of an intact log: exit %d, %q %q", code, out, errOut)
	}

	seg := filepath.Join(dir, "audit-00000000000000000001.jsonl")
	data, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.SplitAfter(data, []byte("\n"))
	if err := os.WriteFile(seg, bytes.Join(lines[:2], nil), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, _ = runCLI("audit", "verify", "--checkpoint", cp, dir)
	if code != 1 || !strings.Contains(out, "truncated") {
		t.Fatalf("verify of a cut log: exit %d, %q", code, out)
	}

	if code, _, _ := runCLI("audit", "verify", filepath.Join(t.TempDir(), "none")); code != 2 {
		t.Fatalf("verify of a missing directory: exit %d, want 2", code)
	}
	if code, _, _ := runCLI("audit", "verify"); code != 2 {
		t.Fatalf("verify without DIR: exit %d, want 2", code)
	}
}

func TestAuditShowCommand(t *testing.T) {
	dir := writeAuditLog(t)
	code, out, errOut := runCLI("audit", "show", dir, "--client", "10.0.0.1", "--decision", "allow")
	if code != 0 {
		t.Fatalf("show: exit %d, %s", code, errOut)
	}
	rows := strings.Split(strings.TrimSpace(out), "\n")
	if len(rows) != 3 || !strings.HasPrefix(rows[0], "SEQ") || !strings.Contains(rows[1], "read_file") || !strings.Contains(rows[2], "list") {
		t.Fatalf("show --client --decision printed:\n%s", out)
	}

	code, out, _ = runCLI("audit", "show", "--json", "--tool", "delete_file", dir)
	if code != 0 {
		t.Fatalf("show --json: exit %d", code)
	}
	jsonLines := strings.Split(strings.TrimSpace(out), "\n")
	if len(jsonLines) != 1 || !strings.Contains(jsonLines[0], `"decision":"deny"`) || !strings.Contains(jsonLines[0], `"seq":3`) {
		t.Fatalf("show --json --tool printed:\n%s", out)
	}

	code, out, _ = runCLI("audit", "show", dir, "--until", "2000-01-01T00:00:00Z")
	if code != 0 || strings.Count(out, "\n") != 1 {
		t.Fatalf("show --until in the past: exit %d, printed:\n%s", code, out)
	}
	if code, _, _ := runCLI("audit", "show", dir, "--since", "yesterday"); code != 2 {
		t.Fatalf("show with a bad --since: exit %d, want 2", code)
	}
	if code, _, _ := runCLI("audit", "list"); code != 2 {
		t.Fatalf("audit list: exit %d, want 2", code)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	data, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, data, 0o644); err != nil {
		t.Fatal(err)
	}
}
