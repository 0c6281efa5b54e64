//go:build linux

package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"path/filepath"
	"testing"
	"time"
)

// TestTokenSubjectRule (issue 19 acceptance): a rule on auth.claims.sub denies a tool to one
// subject; another subject's identical call goes through.
func TestTokenSubjectRule(t *testing.T) {
	needLab(t)
	calls := tokenServer(t)
	is := newTokenIssuer(t)
	cfg := tokenConfig(t, filepath.Join(t.TempDir(), "ca"), filepath.Join(t.TempDir(), "audit"), is.jwks, `    - name: no-echo-for-mallory
      when: 'mcp.method == "tools/call" && mcp.name == "echo" && auth.claims.sub == "mallory"'
      action: deny
      reason: this subject may not echo
`) + "  record_identity: hash\n"
	a := startAppliance(t, "nftables-tproxy", cfg)
	ca := exportCA(t, cfg)
	const url = "https://10.200.2.2:3017/mcp"
	later := time.Now().Add(time.Hour)
	if r, err := callToolBearer(t, url, ca, is.sign(is.key, "mallory", url, later), "echo", `{"text":"mallory"}`); err == nil {
		t.Errorf("mallory's echo went through: %+v", r)
	}
	if r, err := callToolBearer(t, url, ca, is.sign(is.key, "bob", url, later), "echo", `{"text":"bob"}`); err != nil || r.Text != "bob" {
		t.Errorf("bob's echo: %+v, %v", r, err)
	}
	a.stopGracefully(t)
	if got := executedCalls(t, calls); len(got) != 1 || got[0] != "bob" {
		t.Errorf("call log %q, want [bob]", got)
	}
	// tokens.record_identity: hash: records tell the two callers apart without naming them.
	hash := func(s string) string {
		sum := sha256.Sum256([]byte(s))
		return "sha256:" + hex.EncodeToString(sum[:16])
	}
	want := map[string]string{"deny": hash("https://idp.lab.test\x00mallory"), "allow": hash("https://idp.lab.test\x00bob")}
	seen := map[string]bool{}
	for _, l := range flowLines(t, a.stdout.String()) {
		if l.MCPName != "echo" || l.Direction != "client_to_server" {
			continue
		}
		seen[l.Decision] = true
		if l.Sub != want[l.Decision] || l.Iss != hash("https://idp.lab.test") {
			t.Errorf("%s echo record: iss %q sub %q, want %q %q", l.Decision, l.Iss, l.Sub, hash("https://idp.lab.test"), want[l.Decision])
		}
	}
	if !seen["deny"] || !seen["allow"] {
		t.Errorf("echo records seen: %v, want a deny and an allow:\n%s", seen, a.stdout.String())
	}
}
