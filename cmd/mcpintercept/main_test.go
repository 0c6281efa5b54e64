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
	looseCA := filepath.Join(dir, "loose-ca")
	if err := os.Mkdir(looseCA, 0o700); err != nil || os.Chmod(looseCA, 0o777) != nil {
		t.Fatal(err)
	}
	terminate := "routes:\n  - {name: t, tls: terminate}\n"
	looseCAConfig := write("looseca.yaml", base+terminate+"ca: {dir: "+looseCA+"}\n")
	missingCAs := write("missingcas.yaml", base+terminate+"ca: {dir: "+filepath.Join(dir, "ca-new")+"}\nupstream_tls: {extra_cas: [nope.pem]}\n")
	onePass := write("onepass.yaml", base+"limits:\n  idle_timout: 5m\nroutes:\n  - {name: p, match: {ports: [8080]}, tls: plaintext, level: 1, development: true, rule_set: s}\n"+
		"rule_sets:\n  s:\n    - {name: broken, when: 'mcp.name ==', action: deny}\nupstream_tls: {extra_cas: [nope.pem]}\n")
	shadowed := write("shadowed.yaml", base+"routes:\n  - {name: all, tls: passthrough}\n  - {name: s, match: {sni: [a.example]}, tls: passthrough}\n")
	tests := []struct {
		name   string
		args   []string
		code   int
		stdout string
		stderr string
		// stdoutHas must all be in stdout, stdoutLacks must not; stderrLast must end stderr's
		// report.
		stdoutHas   []string
		stdoutLacks string
		stderrLast  string
		stderrOrder []string // in stderr, in this order
	}{
		{name: "no command", args: []string{}, code: 2, stderr: "usage: mcpintercept"},
		{name: "unknown command", args: []string{"frobnicate"}, code: 2, stderr: `unknown command "frobnicate"`},
		{name: "help", args: []string{"help"}, code: 0, stdout: "mechanisms: nftables-tproxy"},
		{name: "check ok", args: []string{"check", "--config", good}, code: 0, stdout: "good.yaml: ok (mechanism nftables-tproxy, 1 destination prefix(es), 1 port range(s), 1 route(s), 1 rule(s) compiled)"},
		{name: "check warns of token_audience off", args: []string{"check", "--config", tokensOff}, code: 0, stdout: "tokensoff.yaml: ok",
			stderr: "tokensoff.yaml: warning: routes[0] (p): token_audience: off forwards bearer tokens without checking their audience"},
		{name: "check refuses a CA directory others can write", args: []string{"check", "--config", looseCAConfig}, code: 2,
			stderr: "looseca.yaml: ca.dir " + looseCA + ": mode 0777 is writable by group or others"},
		{name: "check refuses a missing extra CA", args: []string{"check", "--config", missingCAs}, code: 2,
			stderr: "upstream_tls.extra_cas[0]: open " + filepath.Join(dir, "nope.pem")},
		{name: "run refuses what check refuses", args: []string{"run", "--config", looseCAConfig}, code: 2,
			stderr: "refused at start (1 problem(s)); nothing was installed:\n  " + looseCAConfig + ": ca.dir " + looseCA + ": mode 0777"},
		{name: "check: YAML, CEL and file problems in one pass, in file order", args: []string{"check", "--config", onePass}, code: 2,
			stderr:      "invalid configuration (3 problem(s)); nothing was installed:\n  " + onePass + ":4:3: limits.idle_timout: unknown key",
			stderrOrder: []string{":4:3: limits.idle_timout", "\n  " + onePass + ":9:40: rule broken: when: Syntax error", "\n  " + onePass + ": upstream_tls.extra_cas[0]"}},
		{name: "check: the file problem comes last", args: []string{"check", "--config", onePass}, code: 2, stderr: "rule broken: ",
			stderrLast: "upstream_tls.extra_cas[0]: open " + filepath.Join(dir, "nope.pem") + ": no such file or directory"},
		{name: "check warns of a shadowed route", args: []string{"check", "--config", shadowed}, code: 0, stdout: "shadowed.yaml: ok",
			stderr: "shadowed.yaml: warning: routes[1] (s): never matches: routes[0] (all) comes first"},
		{name: "check --strict refuses warnings", args: []string{"check", "--strict", "--config", shadowed}, code: 2,
			stderr: "1 warning(s), refused under --strict"},
		{name: "check --strict passes a clean file", args: []string{"check", "--strict", "--config", good}, code: 0, stdout: "good.yaml: ok"},
		{name: "check --ports", args: []string{"check", "--ports", "--config", good}, code: 0, stdout: "good.yaml: ok"},
		{name: "version", args: []string{"version"}, code: 0, stdout: "mcpintercept " + buildVersion() + " ("},
		{name: "--version", args: []string{"--version"}, code: 0, stdout: "mcpintercept " + buildVersion() + " ("},
		{name: "version with an argument", args: []string{"version", "x"}, code: 2, stderr: `unexpected argument "x"`},
		{name: "declare carries the version", args: []string{"declare"}, code: 0, stdout: `"version": "` + buildVersion() + `"`},
		{name: "help: exec is Level 2 by default", args: []string{"help"}, code: 0, stdout: "zero-config: TLS terminated, JSON-RPC bodies read at Level 2"},
		{name: "run --help", args: []string{"run", "--help"}, code: 0, stdout: "Steer the configured traffic", stdoutHas: []string{"  -config string", "  -mechanism string"}},
		{name: "check -h", args: []string{"check", "-h"}, code: 0, stdout: "every problem in one", stdoutHas: []string{"  -strict", "  -ports"}},
		{name: "cleanup --help", args: []string{"cleanup", "--help"}, code: 0, stdout: "Remove every rule, route, table", stdoutHas: []string{"flags: none"}},
		{name: "declare --help", args: []string{"declare", "--help"}, code: 0, stdout: "conformance declaration", stdoutHas: []string{"  -config string"}},
		{name: "ca init --help", args: []string{"ca", "init", "--help"}, code: 0, stdout: "Create the appliance CA", stdoutHas: []string{"  -force", "  -dir string"}, stdoutLacks: "-format"},
		{name: "ca export --help", args: []string{"ca", "export", "--help"}, code: 0, stdout: "Print the CA certificate", stdoutHas: []string{"  -format string"}, stdoutLacks: "-force"},
		{name: "ca export refuses --force", args: []string{"ca", "export", "--dir", caDir, "--force"}, code: 2, stderr: "flag provided but not defined: -force"},
		{name: "ca --help", args: []string{"ca", "--help"}, code: 0, stdout: "mcpintercept ca SUBCOMMAND --help"},
		{name: "exec --help", args: []string{"exec", "--help"}, code: 0, stdout: "HTTP read at Level 2", stdoutHas: []string{"  -level int", "(default 2)", "  -user NAME|UID"}},
		{name: "help exec", args: []string{"help", "exec"}, code: 0, stdout: "HTTP read at Level 2"},
		{name: "audit verify --help", args: []string{"audit", "verify", "--help"}, code: 0, stdout: "hash chain", stdoutHas: []string{"  -pubkey string"}},
		{name: "audit show --help", args: []string{"audit", "show", "--help"}, code: 0, stdout: "List the audit log's records", stdoutHas: []string{"  -json"}},
		{name: "tools --help", args: []string{"tools", "--help"}, code: 0, stdout: "usage: mcpintercept tools list"},
		{name: "tools diff --help", args: []string{"tools", "diff", "--help"}, code: 0, stdout: "What is not pinned", stdoutHas: []string{"--token-file FILE"}},
		{name: "observe --help", args: []string{"observe", "--help"}, code: 0, stdout: "mcpintercept observe"},
		{name: "help log", args: []string{"help", "log"}, code: 0, stdout: "mcpintercept log", stdoutHas: []string{"--until", "--last N"}},
		{name: "policy --help", args: []string{"policy", "--help"}, code: 0, stdout: "mcpintercept policy test"},
		{name: "version --help", args: []string{"version", "--help"}, code: 0, stdout: "Print the build's version"},
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
			for _, w := range tc.stdoutHas {
				if !strings.Contains(stdout.String(), w) {
					t.Errorf("stdout lacks %q:\n%s", w, &stdout)
				}
			}
			if tc.stdoutLacks != "" && strings.Contains(stdout.String(), tc.stdoutLacks) {
				t.Errorf("stdout has %q:\n%s", tc.stdoutLacks, &stdout)
			}
			at := 0
			for _, w := range tc.stderrOrder {
				i := strings.Index(stderr.String()[at:], w)
				if i < 0 {
					t.Errorf("stderr lacks %q after byte %d:\n%s", w, at, &stderr)
					break
				}
				at += i + len(w)
			}
			if tc.stderrLast != "" && !strings.HasSuffix(strings.TrimSpace(stderr.String()), tc.stderrLast) {
				t.Errorf("stderr does not end with %q:\n%s", tc.stderrLast, &stderr)
			}
		})
	}
}
