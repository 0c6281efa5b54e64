package main

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestCLI: the command line's contracts that need no privileges: exit codes (2 for a wrong
// invocation or configuration, with nothing installed; 1 for a runtime failure) and what each
// subcommand prints. run is only given configurations it must refuse.
func TestCLI(t *testing.T) {
	dir := t.TempDir()
	write := func(name, src string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	const base = "mechanism: nftables-tproxy\nintercept: {destinations: [10.200.2.0/24], ports: [8080]}\n"
	good := write("good.yaml", base+"routes:\n  - {name: p, match: {ports: [8080]}, tls: plaintext, level: 1, development: true, rule_set: s}\n"+
		"rule_sets:\n  s:\n    - {name: deny-x, when: 'mcp.name == \"x\"', action: deny}\n")
	badPolicy := write("policy.yaml", base+"routes:\n  - {name: p, match: {ports: [8080]}, tls: plaintext, level: 1, development: true, rule_set: s}\n"+
		"rule_sets:\n  s:\n    - {name: broken, when: 'mcp.name ==', action: deny}\n")
	tokensOff := write("tokensoff.yaml", base+"routes:\n  - {name: p, match: {ports: [8080]}, tls: plaintext, level: 1, development: true, token_audience: \"off\"}\n")
	badYAML := write("bad.yaml", base+"limits:\n  idle_timout: 5m\n")
	caDir := filepath.Join(dir, "ca")
	closed := closedURL(t)
	tests := []struct {
		name   string
		args   []string
		code   int
		stdout string
		stderr string
	}{
		{name: "no command", args: []string{}, code: 2, stderr: "usage: mcpintercept"},
		{name: "unknown command", args: []string{"frobnicate"}, code: 2, stderr: `unknown command "frobnicate"`},
		{name: "help", args: []string{"help"}, code: 0, stdout: "mechanisms: nftables-tproxy"},
		{name: "check ok", args: []string{"check", "--config", good}, code: 0, stdout: "good.yaml: ok (mechanism nftables-tproxy, 1 destination prefix(es), 1 port range(s), 1 route(s), 1 rule(s) compiled)"},
		{name: "check warns of token_audience off", args: []string{"check", "--config", tokensOff}, code: 0, stdout: "tokensoff.yaml: ok",
			stderr: "tokensoff.yaml: warning: routes[0] (p): token_audience: off forwards bearer tokens without checking their audience"},
		{name: "check without --config", args: []string{"check"}, code: 2, stderr: "--config FILE is required"},
		{name: "check unexpected argument", args: []string{"check", "--config", good, "extra"}, code: 2, stderr: `unexpected argument "extra"`},
		{name: "check bad file", args: []string{"check", "--config", badYAML}, code: 2, stderr: "bad.yaml:4:"},
		{name: "check bad policy", args: []string{"check", "--config", badPolicy}, code: 2, stderr: "invalid policy (1 problem(s)); nothing was installed"},
		{name: "check unknown mechanism", args: []string{"check", "--config", good, "--mechanism", "carrier-pigeon"}, code: 2, stderr: "carrier-pigeon"},
		{name: "run bad file", args: []string{"run", "--config", badYAML}, code: 2, stderr: "nothing was installed"},
		{name: "run bad policy", args: []string{"run", "--config", badPolicy}, code: 2, stderr: "invalid policy (1 problem(s)); nothing was installed"},
		{name: "run missing file", args: []string{"run", "--config", filepath.Join(dir, "none.yaml")}, code: 2, stderr: "none.yaml"},
		{name: "declare build", args: []string{"declare"}, code: 0, stdout: `"mode_set": [`},
		{name: "declare config", args: []string{"declare", "--config", good}, code: 0, stdout: `"in_effect": true`},
		{name: "declare states tracing", args: []string{"declare", "--config", good}, code: 0, stdout: `"tracing": "off (telemetry.otlp.endpoint unset)`},
		{name: "declare states tool integrity", args: []string{"declare", "--config", good}, code: 0, stdout: `"tool_integrity": "at Level 2, on routes with tool_pins`},
		{name: "declare bad file", args: []string{"declare", "--config", badYAML}, code: 2, stderr: "limits.idle_timout"},
		{name: "ca export before init", args: []string{"ca", "export", "--dir", caDir}, code: 1, stderr: "no CA in"},
		{name: "ca init", args: []string{"ca", "init", "--dir", caDir}, code: 0, stdout: "created CA"},
		{name: "ca export", args: []string{"ca", "export", "--dir", caDir}, code: 0, stdout: "-----BEGIN CERTIFICATE-----"},
		{name: "ca export bad format", args: []string{"ca", "export", "--dir", caDir, "--format", "jks"}, code: 2},
		{name: "ca without subcommand", args: []string{"ca"}, code: 2, stderr: "usage: mcpintercept ca"},
		{name: "exec without a command", args: []string{"exec"}, code: 2, stderr: "usage: mcpintercept exec"},
		{name: "exec --level 3", args: []string{"exec", "--level", "3", "--", "true"}, code: 2, stderr: "--level 3: want 1 (HTTP headers) or 2 (JSON-RPC bodies)"},
		{name: "cleanup with an argument", args: []string{"cleanup", "now"}, code: 2},
		{name: "help lists tools", args: []string{"help"}, code: 0, stdout: "tools approve SERVER NAME [--kind K]"},
		{name: "tools without subcommand", args: []string{"tools"}, code: 2, stderr: "usage: mcpintercept tools list"},
		{name: "tools unknown subcommand", args: []string{"tools", "show"}, code: 2, stderr: `unknown command "show"`},
		{name: "tools list unreachable", args: []string{"tools", "list", "--admin", closed}, code: 1, stderr: "cannot reach the appliance's admin listener at " + closed},
		{name: "tools list bad config", args: []string{"tools", "list", "--config", badYAML}, code: 2, stderr: "limits.idle_timout"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if runtime.GOOS != "linux" && len(tc.args) > 0 && (tc.args[0] == "run" || tc.args[0] == "cleanup" && tc.code == 0) {
				tc.code, tc.stderr = 1, "needs Linux (netfilter, eBPF, network namespaces)"
			}
			var stdout, stderr bytes.Buffer
			code := realMain(tc.args, &stdout, &stderr)
			if code != tc.code {
				t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tc.code, &stdout, &stderr)
			}
			if !strings.Contains(stdout.String(), tc.stdout) {
				t.Errorf("stdout lacks %q:\n%s", tc.stdout, &stdout)
			}
			if !strings.Contains(stderr.String(), tc.stderr) {
				t.Errorf("stderr lacks %q:\n%s", tc.stderr, &stderr)
			}
		})
	}
}
