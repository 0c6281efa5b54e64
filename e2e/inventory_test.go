//go:build linux

package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestInventory (issue 34 item 11): `mcpintercept inventory` lists the MCP servers the lab
// appliance has seen. The Go SDK server on 3010 sits on a port the lab steers but no route
// covers (forwarded opaque, Level 0): it is recognised from its first request and listed as
// uncovered. The one on 3020 (lab-pinned: Level 2, tool_pins learn) is covered, with the
// version seen and the tool count the guard learnt from its tools/list. GET /inventory without
// the token is 401.
func TestInventory(t *testing.T) {
	needLab(t)
	h2cServer(t) // 3010, among others: stateless, plain HTTP/1.1 served too
	pinned := startT(t, nsServer, bin("mcpserver"), "-listen", "10.200.2.2:3020")
	if err := pinned.waitFor("READY", 60*time.Second); err != nil {
		t.Fatal(err)
	}
	base := t.TempDir()
	startAppliance(t, "nftables-tproxy", tlsConfig(t, filepath.Join(base, "ca")))
	tokFile := filepath.Join(base, "tools", "admin.token")
	if _, err := os.Stat(tokFile); err != nil {
		t.Fatalf("the admin token: %v", err)
	}
	const admin = "http://127.0.0.1:9464"
	if code := runT(t, 10*time.Second, nsAppliance, "curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", admin+"/inventory"); code != "401" {
		t.Fatalf("/inventory without the token: %s, want 401", code)
	}

	if r := goCall(t, "http://10.200.2.2:3010/mcp", "echo", `{"text":"uncovered"}`); r.Error != nil || !strings.Contains(r.Text, "uncovered") {
		t.Fatalf("echo on 3010 (opaque): %+v", r)
	}
	out, _, _ := run(t.Context(), nsClient, bin("mcpclient"), "-url", "http://10.200.2.2:3020/mcp", "-tool", "echo", "-args", `{"text":"covered"}`, "-list")
	var listed struct {
		Text  string   `json:"text"`
		Tools []string `json:"tools"`
		Error any      `json:"error"`
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &listed); err != nil || listed.Error != nil || len(listed.Tools) == 0 {
		t.Fatalf("echo with -list on 3020 (lab-pinned): %q (%v)", out, err)
	}

	inv := func(args ...string) string {
		return runT(t, 30*time.Second, nsAppliance, bin("mcpintercept"),
			append([]string{"inventory", "--admin", admin, "--token-file", tokFile}, args...)...)
	}
	var snap struct {
		Servers []struct {
			Destination string   `json:"destination"`
			Path        string   `json:"path"`
			Versions    []string `json:"versions"`
			Methods     []string `json:"methods"`
			Tools       *int     `json:"tools"`
			Clients     []string `json:"clients"`
			Covered     bool     `json:"covered"`
			Level       int      `json:"level"`
			FirstSeen   string   `json:"first_seen"`
			LastSeen    string   `json:"last_seen"`
		} `json:"servers"`
	}
	raw := inv("-o", "json")
	if err := json.Unmarshal([]byte(raw), &snap); err != nil {
		t.Fatalf("inventory -o json: %v\n%s", err, raw)
	}
	found := map[string]int{}
	for i, s := range snap.Servers {
		found[s.Destination] = i
	}
	u, ok := found["10.200.2.2:3010"]
	if !ok {
		t.Fatalf("the server on 3010 is not listed:\n%s", raw)
	}
	c, ok := found["10.200.2.2:3020"]
	if !ok {
		t.Fatalf("the server on 3020 is not listed:\n%s", raw)
	}
	us, cs := snap.Servers[u], snap.Servers[c]
	if us.Covered || us.Level != 0 || us.Path != "/mcp" || len(us.Clients) == 0 || len(us.Methods) == 0 || us.Tools != nil {
		t.Errorf("the uncovered server: %+v", us)
	}
	if !cs.Covered || cs.Level != 2 || cs.Path != "/mcp" || len(cs.Versions) == 0 || len(cs.Clients) == 0 ||
		cs.Tools == nil || *cs.Tools != len(listed.Tools) {
		t.Errorf("the covered server: %+v (tools %v, the client listed %d)", cs, cs.Tools, len(listed.Tools))
	}
	if c > u {
		t.Errorf("not sorted by last seen (3020 was called last):\n%s", raw)
	}

	// The table, and --uncovered.
	table := inv()
	var line3010, line3020 string
	for _, l := range strings.Split(table, "\n") {
		switch {
		case strings.Contains(l, "10.200.2.2:3010"):
			line3010 = l
		case strings.Contains(l, "10.200.2.2:3020"):
			line3020 = l
		}
	}
	if f := strings.Fields(line3010); len(f) < 7 || f[5] != "no" || f[6] != "0" {
		t.Errorf("the table's 3010 line %q, want COVERED no, LEVEL 0\n%s", line3010, table)
	}
	if f := strings.Fields(line3020); len(f) < 7 || f[5] != "yes" || f[6] != "2" {
		t.Errorf("the table's 3020 line %q, want COVERED yes, LEVEL 2\n%s", line3020, table)
	}
	if only := inv("--uncovered"); !strings.Contains(only, "10.200.2.2:3010") || strings.Contains(only, "10.200.2.2:3020") {
		t.Errorf("--uncovered:\n%s", only)
	}
	t.Logf("mcpintercept inventory:\n%s", table)
}
