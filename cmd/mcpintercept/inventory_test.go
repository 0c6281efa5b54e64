package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"mcpintercept/inventory"
)

// TestInventoryCommand against a fake admin listener: the token is sent, the table lists the
// servers in the appliance's order with COVERED yes/no, --uncovered keeps the others out, -o json
// prints the answer, a wrong -o is a usage error and a 401 is explained.
func TestInventoryCommand(t *testing.T) {
	const token = "0123456789abcdef0123456789abcdef"
	now := time.Now().UTC()
	two := 2
	snap := inventory.Snapshot{Servers: []inventory.Server{
		{Destination: "10.200.2.2:3010", Path: "/mcp", Versions: []string{"2025-06-18"}, Methods: []string{"initialize"},
			Clients: []string{"10.200.1.2"}, FirstSeen: now.Add(-time.Minute), LastSeen: now.Add(-5 * time.Second), Level: 0, TLS: "plaintext", Seen: 1},
		{Destination: "10.200.2.2:3020", Host: "mcp.example", Path: "/mcp", Versions: []string{"2025-06-18", "2025-11-25"}, Methods: []string{"tools/list"},
			Tools: &two, Clients: []string{"10.200.1.2", "10.200.1.3", "10.200.1.4"}, ClientsNotKept: 1,
			FirstSeen: now.Add(-time.Hour), LastSeen: now.Add(-time.Minute), Covered: true, Level: 2, TLS: "plaintext", Seen: 9},
	}, ServersNotKept: 3, Limits: inventory.DefaultLimits}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/inventory" {
			http.NotFound(w, r)
			return
		}
		if r.Header.Get("Authorization") != "Bearer "+token {
			http.Error(w, "needs the admin token", http.StatusUnauthorized)
			return
		}
		json.NewEncoder(w).Encode(snap)
	}))
	defer srv.Close()
	dir := t.TempDir()
	tok := filepath.Join(dir, "admin.token")
	os.WriteFile(tok, []byte(token+"\n"), 0o600)
	bad := filepath.Join(dir, "bad.token")
	os.WriteFile(bad, []byte("nope\n"), 0o600)
	inv := func(tokFile string, args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := cmdInventory(append([]string{"--admin", srv.URL, "--token-file", tokFile}, args...), &out, &errb)
		return code, out.String(), errb.String()
	}

	code, out, errOut := inv(tok)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[0], "LAST SEEN") {
		t.Fatalf("table:\n%s", out)
	}
	if f := strings.Fields(lines[1]); f[2] != "10.200.2.2:3010" || f[3] != "-" || f[4] != "/mcp" || f[5] != "no" || f[6] != "0" || f[8] != "-" {
		t.Errorf("the uncovered line: %q", lines[1])
	}
	if f := strings.Fields(lines[2]); f[2] != "10.200.2.2:3020" || f[3] != "mcp.example" || f[5] != "yes" || f[6] != "2" ||
		f[7] != "2025-06-18,2025-11-25" || f[8] != "2" || f[9] != "3+" {
		t.Errorf("the covered line: %q", lines[2])
	}
	if !strings.Contains(lines[3], "3 sightings of further servers not kept") {
		t.Errorf("no note of the servers not kept: %q", lines[3])
	}

	if code, out, _ := inv(tok, "--uncovered"); code != exitOK || strings.Contains(out, ":3020") || !strings.Contains(out, ":3010") {
		t.Errorf("--uncovered: exit %d\n%s", code, out)
	}
	code, out, _ = inv(tok, "-o", "json")
	var got inventory.Snapshot
	if code != exitOK || json.Unmarshal([]byte(out), &got) != nil || len(got.Servers) != 2 || *got.Servers[1].Tools != 2 {
		t.Errorf("-o json: exit %d\n%s", code, out)
	}
	code, out, _ = inv(tok, "-o", "json", "--uncovered")
	var list []inventory.Server
	if code != exitOK || json.Unmarshal([]byte(out), &list) != nil || len(list) != 1 || list[0].Covered {
		t.Errorf("-o json --uncovered: exit %d\n%s", code, out)
	}
	if code, _, errOut := inv(tok, "-o", "yaml"); code != exitUsage || !strings.Contains(errOut, `-o "yaml"`) {
		t.Errorf("-o yaml: exit %d, %q", code, errOut)
	}
	if code, _, errOut := inv(bad); code != exitRuntime || !strings.Contains(errOut, "401") || !strings.Contains(errOut, "--token-file") {
		t.Errorf("a wrong token: exit %d, %q", code, errOut)
	}
	if code, _, errOut := inv(filepath.Join(dir, "missing")); code != exitRuntime || !strings.Contains(errOut, "cannot read the admin token") {
		t.Errorf("no token file: exit %d, %q", code, errOut)
	}
}

func TestAgo(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for d, want := range map[time.Duration]string{0: "0s ago", 10 * time.Second: "10s ago", 90 * time.Second: "1m ago",
		3 * time.Hour: "3h ago", 72 * time.Hour: "3d ago", -time.Second: "0s ago"} {
		if got := ago(now, now.Add(-d)); got != want {
			t.Errorf("ago(%v): %q, want %q", d, got, want)
		}
	}
}
