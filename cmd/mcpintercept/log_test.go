package main

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// flowLine is a flow log record as log.flows writes it.
func flowLine(ms int, client, tool, decision string) string {
	return fmt.Sprintf(`{"time":"2026-03-01T12:00:00.%03dZ","flow":"f-%d","client":%q,"orig_dst":"10.200.2.2:3012","mechanism":"nftables-tproxy","sni":"","tls":"plaintext","level":2,"http_method":"POST","path":"/mcp","status":200,"mcp_version":"2025-06-18","mcp_method":"tools/call","mcp_name":%q,"jsonrpc_id":"1","direction":"client_to_server","decision":%q,"rule":"r","reason":"","bytes_up":1,"bytes_down":2,"duration_ms":%d}`,
		ms, ms, client, tool, decision, ms%10)
}

// TestLogCommand (issue 34 item 4): flow log files, a rotated one gzip-compressed, read with
// observe's filters and outputs; bad lines counted, not fatal; a missing file a clear error.
func TestLogCommand(t *testing.T) {
	dir := t.TempDir()
	older := []string{flowLine(100, "10.0.0.5:4000", "echo", "allow"), flowLine(200, "10.0.0.6:4000", "delete", "deny")}
	newer := []string{
		flowLine(300, "10.0.0.5:4001", "echo", "rate_limited"),
		`{"time":"2026-03-01T12:00:00.350Z","flow":"f-9","client":"10.0.0.7:5000","orig_dst":"10.200.2.2:443","tls":"passthrough","level":0,"decision":"allow","duration_ms":5}`,
		`garbage`,
		"",
		flowLine(400, "10.0.0.5:4002", "add", "allow"),
		`{"time":7}`,
	}
	gz := filepath.Join(dir, "flows.jsonl-20260301-1.gz")
	var zb bytes.Buffer
	zw := gzip.NewWriter(&zb)
	zw.Write([]byte(strings.Join(older, "\n") + "\n"))
	zw.Close()
	os.WriteFile(gz, zb.Bytes(), 0o644)
	plain := filepath.Join(dir, "flows.jsonl")
	os.WriteFile(plain, []byte(strings.Join(newer, "\n")), 0o644) // the last line without its newline

	code, out, errOut := runCLI("log", gz, plain)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != exitOK || len(lines) != 4 {
		t.Fatalf("log: exit %d, stderr %q\n%s", code, errOut, out)
	}
	if lines[0] != "12:00:00.100 10.0.0.5:4000 → 10.200.2.2:3012 tools/call echo allow r 0ms" || !strings.Contains(lines[2], "echo rate_limited") {
		t.Errorf("text lines (oldest file first):\n%s", out)
	}
	if !strings.Contains(errOut, "flows.jsonl: line 3: not a flow log record") || !strings.Contains(errOut, "flows.jsonl: line 6: ") ||
		!strings.Contains(errOut, "flows.jsonl: 2 line(s) skipped") || strings.Contains(errOut, ".gz: ") {
		t.Errorf("bad lines report: %q", errOut)
	}

	for _, c := range []struct {
		args []string
		want int    // lines printed
		has  string // in the output
	}{
		{[]string{"--decision", "deny,ratelimited"}, 2, "delete deny"},
		{[]string{"--decision", "rate_limit"}, 1, "rate_limited"},
		{[]string{"--tool", "echo", "--client", "10.0.0.5"}, 2, "echo"},
		{[]string{"--client", "10.0.0.6/32"}, 1, "10.0.0.6"},
		{[]string{"--since", "2026-03-01T12:00:00.250Z", "--until", "2026-03-01T12:00:00.400Z"}, 1, ".300"},
		{[]string{"--all"}, 5, "(passthrough flow)"},
		{[]string{"--last", "2"}, 2, "add allow"},
		{[]string{"--since", "2026-03-01T12:00:01Z"}, 0, ""},
	} {
		code, out, _ := runCLI(append(append([]string{"log"}, c.args...), gz, plain)...)
		n := strings.Count(out, "\n")
		if code != exitOK || n != c.want || !strings.Contains(out, c.has) {
			t.Errorf("%v: exit %d, %d lines, want %d with %q:\n%s", c.args, code, n, c.want, c.has, out)
		}
	}

	code, out, _ = runCLI("log", "-o", "json", "--decision", "deny", gz, plain)
	if code != exitOK || out != older[1]+"\n" {
		t.Errorf("-o json: exit %d\n%s", code, out)
	}
	code, out, _ = runCLI("log", "--top", gz, plain)
	if f := strings.Join(strings.Fields(out), " "); code != exitOK || !strings.Contains(f, "10.0.0.5 echo 2 1") || !strings.Contains(f, "4 tools/call requests, 2 denied") {
		t.Errorf("--top: exit %d\n%s", code, out)
	}
	code, out, _ = runCLI("log", "--top", "--last", "1", gz, plain)
	if f := strings.Join(strings.Fields(out), " "); code != exitOK || !strings.Contains(f, "1 tools/call requests, 0 denied") {
		t.Errorf("--top --last 1: exit %d\n%s", code, out)
	}

	logStdin = strings.NewReader(older[0] + "\n")
	defer func() { logStdin = os.Stdin }()
	if code, out, _ := runCLI("log", "-"); code != exitOK || strings.Count(out, "\n") != 1 {
		t.Errorf("stdin: exit %d\n%s", code, out)
	}

	missing := filepath.Join(dir, "nope.jsonl")
	code, out, errOut = runCLI("log", plain, missing)
	if code != exitUsage || out != "" || !strings.Contains(errOut, missing+": no such file") {
		t.Errorf("missing file: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if code, _, errOut := runCLI("log", dir); code != exitUsage || !strings.Contains(errOut, "is a directory") {
		t.Errorf("a directory: exit %d, %q", code, errOut)
	}
	broken := filepath.Join(dir, "broken.gz")
	os.WriteFile(broken, zb.Bytes()[:len(zb.Bytes())-6], 0o644) // the archive cut short
	if code, _, errOut := runCLI("log", broken); code != exitRuntime || !strings.Contains(errOut, "broken.gz: ") {
		t.Errorf("a truncated archive: exit %d, %q", code, errOut)
	}
	for _, args := range [][]string{{}, {"--decision", "dney", plain}, {"--route", "r", plain}, {"-o", "yaml", plain}, {"--last", "-2", plain}, {"--until", "soon", plain}} {
		code, out, errOut := runCLI(append([]string{"log"}, args...)...)
		if code != exitUsage || out != "" {
			t.Errorf("%v: exit %d, stdout %q, stderr %q", args, code, out, errOut)
		}
		if len(args) > 0 && args[0] == "--decision" && !strings.Contains(errOut, "want allow, deny, rate_limited") {
			t.Errorf("--decision dney: %q", errOut)
		}
	}
	if code, out, _ := runCLI("log", "--help"); code != exitOK || !strings.Contains(out, "gzip") {
		t.Errorf("--help: %d %q", code, out)
	}
}
