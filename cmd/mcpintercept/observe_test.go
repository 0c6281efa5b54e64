package main

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestObserveCommand against a fake admin listener: the token is sent, the filters become the
// query, text and json lines, --top's table, the end line's reason (exit 1), 401 explained.
func TestObserveCommand(t *testing.T) {
	const token = "0123456789abcdef0123456789abcdef"
	lines := []string{
		`{"time":"2026-03-01T12:00:00.100Z","flow":"f-1","client":"10.0.0.5:4000","orig_dst":"10.200.2.2:3012","level":2,"mcp_method":"tools/call","mcp_name":"echo","direction":"client_to_server","decision":"allow","rule":"","duration_ms":3}`,
		``,
		`{"time":"2026-03-01T12:00:00.200Z","flow":"f-1","client":"10.0.0.5:4001","orig_dst":"10.200.2.2:3012","level":2,"mcp_method":"tools/call","mcp_name":"delete","direction":"client_to_server","decision":"deny","rule":"no-delete","duration_ms":0,"process":{"pid":42,"uid":0,"gid":0,"comm":"node","cgroup":1}}`,
		`{"time":"2026-03-01T12:00:00.300Z","flow":"f-1","client":"10.0.0.5:4002","orig_dst":"10.200.2.2:3012","level":2,"mcp_method":"tools/call","mcp_name":"echo","direction":"client_to_server","decision":"allow","rule":"","duration_ms":9}`,
		`{"observe":"end","reason":"dropped: fell behind"}`,
	}
	var gotQuery string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+token {
			http.Error(w, "needs the admin token", http.StatusUnauthorized)
			return
		}
		gotQuery = r.URL.RawQuery
		if r.URL.Query().Get("follow") == "0" { // a snapshot: the records, then "closed"
			for _, l := range lines[:4] {
				fmt.Fprintln(w, l)
			}
			fmt.Fprintln(w, `{"observe":"end","reason":"closed"}`)
			return
		}
		for _, l := range lines {
			fmt.Fprintln(w, l)
		}
	}))
	defer srv.Close()
	dir := t.TempDir()
	tok := filepath.Join(dir, "admin.token")
	os.WriteFile(tok, []byte(token+"\n"), 0o600)
	bad := filepath.Join(dir, "bad.token")
	os.WriteFile(bad, []byte("nope\n"), 0o600)
	obs := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := cmdObserve(append([]string{"--admin", srv.URL, "--token-file", tok}, args...), &out, &errb)
		return code, out.String(), errb.String()
	}

	code, out, errOut := obs("--decision", "deny", "--tool", "delete", "--client", "10.0.0.0/8", "--since", "5m")
	if code != exitRuntime || !strings.Contains(errOut, "dropped: fell behind") {
		t.Errorf("end line: exit %d, stderr %q", code, errOut)
	}
	for _, want := range []string{"decision=deny", "tool=delete", "client=10.0.0.0%2F8", "since=5m", "kind=message%2Cexchange"} {
		if !strings.Contains(gotQuery, want) {
			t.Errorf("query %q lacks %s", gotQuery, want)
		}
	}
	if n := strings.Count(out, "\n"); n != 3 || !strings.Contains(out, "12:00:00.200 10.0.0.5:4001 node[42] → 10.200.2.2:3012 tools/call delete deny no-delete 0ms") {
		t.Errorf("text output:\n%s", out)
	}

	_, out, _ = obs("-o", "json")
	if strings.Count(out, "\n") != 3 || !strings.HasPrefix(out, lines[0]+"\n") {
		t.Errorf("json output:\n%s", out)
	}

	_, out, _ = obs("--top")
	if !strings.Contains(out, "10.0.0.5       echo    2      0       3       9") && !strings.Contains(strings.Join(strings.Fields(out), " "), "10.0.0.5 echo 2 0 3 9") {
		t.Errorf("--top:\n%s", out)
	}
	if f := strings.Join(strings.Fields(out), " "); !strings.Contains(f, "10.0.0.5 node delete 1 1 0 0") || !strings.Contains(f, "3 tools/call requests, 1 denied") {
		t.Errorf("--top:\n%s", out)
	}

	var errb bytes.Buffer
	if code := cmdObserve([]string{"--admin", srv.URL, "--token-file", bad}, &bytes.Buffer{}, &errb); code != exitRuntime || !strings.Contains(errb.String(), "401") || !strings.Contains(errb.String(), "not the appliance's") {
		t.Errorf("wrong token: %d %q", code, errb.String())
	}
	for _, args := range [][]string{{"-o", "yaml"}, {"--for", "-1s"}, {"--since", "yesterday"}, {"extra"}, {"--last", "-1"}, {"--decision", "dney"}} {
		gotQuery = ""
		if code, _, errOut := obs(args...); code != exitUsage || gotQuery != "" {
			t.Errorf("%v: exit %d, want %d (query sent: %q)", args, code, exitUsage, gotQuery)
		} else if args[0] == "--decision" && !strings.Contains(errOut, "allow, deny, rate_limited, would_deny or would_rate_limit") {
			t.Errorf("--decision dney: %q does not name the valid values", errOut)
		}
	}
	var help bytes.Buffer
	if code := cmdObserve([]string{"--help"}, &help, &bytes.Buffer{}); code != exitOK || !strings.Contains(help.String(), "--decision") {
		t.Errorf("--help: %d %q", code, help.String())
	}
}

// TestObserveSnapshot (issue 34 item 3): --no-follow and --last ask for the kept records only
// (follow=0, since the start when no --since) and exit 0 on the appliance's "closed"; --last N
// prints the last N that matched; a rate-limit alias is sent in the flow log's spelling.
func TestObserveSnapshot(t *testing.T) {
	const token = "0123456789abcdef0123456789abcdef"
	rec := func(ms int, tool, decision string) string {
		return fmt.Sprintf(`{"time":"2026-03-01T12:00:00.%03dZ","flow":"f-1","client":"10.0.0.5:4000","orig_dst":"10.200.2.2:3012","level":2,"mcp_method":"tools/call","mcp_name":%q,"direction":"client_to_server","decision":%q,"rule":"","duration_ms":%d}`, ms, tool, decision, ms)
	}
	records := []string{rec(100, "a", "allow"), rec(200, "b", "rate_limited"), rec(300, "c", "allow"), rec(400, "d", "deny")}
	var gotQuery url.Values
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotQuery = r.URL.Query()
		for _, l := range records {
			fmt.Fprintln(w, l)
		}
		if gotQuery.Get("follow") == "0" {
			fmt.Fprintln(w, `{"observe":"end","reason":"closed"}`)
			return
		}
		w.(http.Flusher).Flush()
		<-r.Context().Done() // following: until the client goes
	}))
	defer srv.Close()
	tok := filepath.Join(t.TempDir(), "admin.token")
	os.WriteFile(tok, []byte(token), 0o600)
	obs := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := cmdObserve(append([]string{"--admin", srv.URL, "--token-file", tok}, args...), &out, &errb)
		return code, out.String(), errb.String()
	}

	code, out, errOut := obs("--no-follow", "--since", "10m", "--decision", "rate_limit,deny")
	if code != exitOK || strings.Count(out, "\n") != 4 || errOut != "" {
		t.Errorf("--no-follow: exit %d, stderr %q\n%s", code, errOut, out)
	}
	if gotQuery.Get("follow") != "0" || gotQuery.Get("since") != "10m" || gotQuery.Get("decision") != "rate_limited,deny" {
		t.Errorf("--no-follow query: %v", gotQuery)
	}

	code, out, _ = obs("--last", "2")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != exitOK || len(lines) != 2 || !strings.Contains(lines[0], " c allow ") || !strings.Contains(lines[1], " d deny ") {
		t.Errorf("--last 2: exit %d\n%s", code, out)
	}
	if gotQuery.Get("follow") != "0" || gotQuery.Get("since") != "1970-01-01T00:00:00Z" {
		t.Errorf("--last query: %v", gotQuery)
	}

	code, out, _ = obs("--last", "2", "-o", "json")
	if code != exitOK || out != records[2]+"\n"+records[3]+"\n" {
		t.Errorf("--last 2 -o json: exit %d\n%s", code, out)
	}

	code, out, _ = obs("--last", "3", "--top")
	if f := strings.Join(strings.Fields(out), " "); code != exitOK || !strings.Contains(f, "3 tools/call requests, 2 denied") {
		t.Errorf("--last 3 --top: exit %d\n%s", code, out)
	}

	// --for alone: follows, then exits 0 with what came.
	code, out, errOut = obs("--for", "100ms")
	if code != exitOK || strings.Count(out, "\n") != 4 || gotQuery.Get("follow") != "" {
		t.Errorf("--for: exit %d, stderr %q, query %v\n%s", code, errOut, gotQuery, out)
	}
}
