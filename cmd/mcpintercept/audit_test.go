package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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

// Issue 29 items 10 and 11 through the command: deleting the oldest segments
// and checkpoints.log, or cutting the last record's newline, fails against
// the checkpoint shipped off the box; records no checkpoint covers are named.
func TestAuditVerifyDeletedStartAndCutNewline(t *testing.T) {
	tests := []struct {
		name   string
		tamper func(t *testing.T, dir string, segs []string)
		code   int
		out    []string
	}{
		{name: "intact", tamper: func(*testing.T, string, []string) {}, code: 0,
			out: []string{"OK: 30 records (seq 1 to 30)", "from seq 1", "every record is covered"}},
		{name: "first segments and checkpoints.log deleted", code: 1,
			tamper: func(t *testing.T, dir string, segs []string) {
				for _, s := range append(segs[:2:2], "checkpoints.log") {
					if err := os.Remove(filepath.Join(dir, s)); err != nil {
						t.Fatal(err)
					}
				}
			},
			out: []string{"TAMPERED: deleted", "seq 1"}},
		{name: "last newline cut", code: 1,
			tamper: func(t *testing.T, dir string, segs []string) {
				last := filepath.Join(dir, segs[len(segs)-1])
				data, err := os.ReadFile(last)
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(last, bytes.TrimSuffix(data, []byte("\n")), 0o600); err != nil {
					t.Fatal(err)
				}
			},
			out: []string{"TAMPERED", "(seq 30)", "newline"}},
		{name: "records after the last checkpoint", code: 0,
			tamper: func(t *testing.T, dir string, segs []string) {
				// The store runs on without signing (as in the second before
				// its next checkpoint, or a crash then).
				s, err := audit.Open(audit.Config{Dir: dir, SegmentBytes: 1500, CheckpointEvery: time.Hour}, nil)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { s.Close(context.Background()) })
				for range 3 {
					r := audit.Record{Kind: audit.KindAuthorization, Client: "10.0.0.1:5000", Decision: audit.Allow}
					if _, err := s.Append(context.Background(), &r); err != nil {
						t.Fatal(err)
					}
				}
			},
			out: []string{"OK: 33 records", "3 record(s) (seq 31 to 33) are covered by no checkpoint"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "audit")
			s, err := audit.Open(audit.Config{Dir: dir, SegmentBytes: 1500}, nil)
			if err != nil {
				t.Fatal(err)
			}
			for i := range 30 {
				r := audit.Record{Kind: audit.KindAuthorization, Client: "10.0.0.1:5000", Server: "mcp.example",
					Level: 2, Method: "tools/call", Tool: fmt.Sprintf("tool-with-a-longer-name-%d", i), Decision: audit.Allow, Rule: "r1"}
				if _, err := s.Append(context.Background(), &r); err != nil {
					t.Fatal(err)
				}
			}
			if err := s.Close(context.Background()); err != nil {
				t.Fatal(err)
			}
			safe := t.TempDir()
			pub, cp := filepath.Join(safe, "audit.pub"), filepath.Join(safe, "cp")
			copyFile(t, filepath.Join(dir, "audit.pub"), pub)
			copyFile(t, filepath.Join(dir, "checkpoint"), cp)
			var segs []string
			entries, _ := os.ReadDir(dir)
			for _, e := range entries {
				if strings.HasPrefix(e.Name(), "audit-") {
					segs = append(segs, e.Name())
				}
			}
			if len(segs) < 3 {
				t.Fatalf("%d segments, want at least 3", len(segs))
			}
			tt.tamper(t, dir, segs)
			code, out, errOut := runCLI("audit", "verify", dir, "--pubkey", pub, "--checkpoint", cp)
			t.Logf("exit %d:\n%s", code, out)
			if code != tt.code {
				t.Fatalf("exit %d, want %d: %s%s", code, tt.code, out, errOut)
			}
			for _, want := range tt.out {
				if !strings.Contains(out, want) {
					t.Fatalf("output lacks %q:\n%s", want, out)
				}
			}
		})
	}
}

// TestVerifyCoverageSaysStrayBytes: verify's report names stray bytes a torn write left inside the
// final segment's zero padding (audit.Report.StrayBytes), and says nothing of them when there are none.
func TestVerifyCoverageSaysStrayBytes(t *testing.T) {
	var b bytes.Buffer
	printVerifyCoverage(&b, &audit.Report{StrayBytes: 17}, false)
	if !strings.Contains(b.String(), "17 stray bytes inside the final segment's zero padding") {
		t.Errorf("report without the stray bytes:\n%s", b.String())
	}
	b.Reset()
	printVerifyCoverage(&b, &audit.Report{}, false)
	if strings.Contains(b.String(), "stray") {
		t.Errorf("stray bytes reported where there are none:\n%s", b.String())
	}
}

// TestAuditShowWords (issue 34 item 10): --since takes a duration, the rate-limit decision has
// the flow log's spelling whichever one a record (or the flag) uses, SERVER falls back to the
// destination, and a wrong --decision is an error naming the valid values.
func TestAuditShowWords(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "audit")
	s, err := audit.Open(audit.Config{Dir: dir}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []audit.Record{
		{Kind: audit.KindAuthorization, Client: "10.0.0.1:5000", Destination: "10.200.2.2:3012", Level: 2, Method: "tools/call", Tool: "old", Decision: audit.LegacyRateLimited, Rule: "rl"},
		{Kind: audit.KindAuthorization, Client: "10.0.0.1:5001", Server: "mcp.example", Destination: "10.200.2.3:443", Level: 2, Method: "tools/call", Tool: "new", Decision: audit.RateLimited, Rule: "rl"},
		{Kind: audit.KindAuthorization, Client: "10.0.0.1:5002", Server: "mcp.example", Level: 2, Method: "tools/call", Tool: "ok", Decision: audit.Allow},
	} {
		if _, err := s.Append(context.Background(), &r); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"rate_limited", "rate_limit", "ratelimited", "RATE_LIMITED"} {
		code, out, errOut := runCLI("audit", "show", dir, "--decision", d, "--since", "24h")
		rows := strings.Split(strings.TrimSpace(out), "\n")
		if code != 0 || len(rows) != 3 {
			t.Fatalf("--decision %s: exit %d, %s\n%s", d, code, errOut, out)
		}
		old := strings.Fields(rows[1])
		if len(old) < 8 || old[4] != "10.200.2.2:3012" || old[7] != "rate_limited" || strings.Contains(out, "ratelimited") {
			t.Errorf("--decision %s: the legacy record's row %q (want SERVER from the destination, DECISION rate_limited)", d, rows[1])
		}
		if f := strings.Fields(rows[2]); len(f) < 8 || f[4] != "mcp.example" {
			t.Errorf("the server name is not preferred: %q", rows[2])
		}
	}
	code, out, _ := runCLI("audit", "show", dir, "--json", "--decision", "rate_limited")
	if code != 0 || strings.Count(out, `"decision":"rate_limited"`) != 2 || strings.Contains(out, "ratelimited") {
		t.Errorf("--json: exit %d\n%s", code, out)
	}
	if code, out, _ := runCLI("audit", "show", dir, "--until", "24h"); code != 0 || strings.Count(out, "\n") != 1 {
		t.Errorf("--until 24h (before a day ago): exit %d\n%s", code, out)
	}
	code, out, errOut := runCLI("audit", "show", dir, "--decision", "dney")
	if code != 2 || out != "" || !strings.Contains(errOut, `"dney"`) || !strings.Contains(errOut, "allow, deny or rate_limited") {
		t.Errorf("--decision dney: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if code, _, errOut := runCLI("audit", "show", dir, "--since", "-5m"); code != 2 || !strings.Contains(errOut, "--since") {
		t.Errorf("--since -5m: exit %d, %q", code, errOut)
	}
}
