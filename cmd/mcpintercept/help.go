package main

import (
	"bytes"
	"fmt"
	"io"
	"strings"
)

// commandHelp is each subcommand's synopsis and description, printed by `CMD --help` (and
// `help CMD`) above the flags its flag set defines.
var commandHelp = map[string]string{
	"run": `usage: mcpintercept run --config FILE [--mechanism NAME]

Steer the configured traffic into the appliance, intercept and forward it until SIGINT or SIGTERM
(which drain open flows, then remove the steering). SIGHUP reloads routes and rule sets (a bad file
keeps the running ones), SIGUSR1 reopens the flow log file. Before installing anything it refuses
what check refuses (exit 2). Needs Linux and CAP_NET_ADMIN.`,
	"check": `usage: mcpintercept check --config FILE [--mechanism NAME] [--strict] [--ports]

Validate a configuration as run would before installing anything, and report every problem in one
pass: YAML and schema errors, CEL compile errors, rules reading fields their route's level cannot
see, the CA directory and key permissions, every file the configuration names, the directories
the appliance writes, and with --ports whether the listen ports are free. Settings that can never
take effect (a route shadowed by an earlier one, a route on a port intercept.ports does not steer,
sni on a plaintext route, an unknown allow_upgrade protocol, an unused rule set) are warnings.
--strict also fetches each tokens.issuers[].jwks_url once (5 s, 1 MiB) and refuses one that does
not serve a signing key. Exit 0: valid (warnings allowed unless --strict); 2: invalid.`,
	"cleanup": `usage: mcpintercept cleanup

Remove every rule, route, table, eBPF link and cgroup mcpintercept could have installed, whatever
configuration installed them; idempotent (the unit's ExecStopPost). Needs Linux and root.`,
	"declare": `usage: mcpintercept declare [--config FILE] [--mechanism NAME]

Print the conformance declaration (JSON): the build's version, the mechanism in effect and how the
original destination is recovered, the levels and TLS dispositions the routes put in effect, and
the authentication, tool-integrity and tracing statements. Without --config: the whole build.`,
	"ca": `usage: mcpintercept ca init [--config FILE | --dir DIR] [--force]
       mcpintercept ca export [--config FILE | --dir DIR] [--format pem|der|p12]

Create or export the appliance CA that terminate routes mint leaf certificates from.`,
	"ca init": `usage: mcpintercept ca init [--config FILE | --dir DIR] [--force]

Create the appliance CA (ECDSA P-256; ca.pem 0644, ca-key.pem 0600) in a 0700 directory. Refuses
to replace an existing CA unless --force (clients trusting it must then be re-provisioned).`,
	"ca export": `usage: mcpintercept ca export [--config FILE | --dir DIR] [--format pem|der|p12]

Print the CA certificate (never the key) to stdout, for clients to trust. pem (default) and der
are the certificate itself; p12 is a PKCS#12 trust store holding only the certificate, for the
Windows and macOS certificate stores: password "changeit" (the file holds nothing secret; the
macOS keychain refuses an empty one), legacy 3DES/SHA-1 encoding, which both read. Redirect it to
a file: mcpintercept ca export --format p12 > mcpintercept-ca.p12`,
	"exec": `usage: mcpintercept exec [--config FILE] [--level 1|2] [--user NAME|UID] [--upstream-ca FILE]... -- CMD [ARGS...]

Run CMD with every TCP connect of it and its children steered through the appliance (eBPF on a
cgroup of its own); a line per request on stderr, a summary at exit, CMD's exit code. Zero-config
(without --config): TLS terminated with the appliance CA, HTTP read at Level 2 (every JSON-RPC
message; --level 1: headers only), the rest forwarded opaque. Needs Linux and root; CMD runs as
the user who ran sudo. --upstream-ca FILE (repeatable) also trusts that PEM file's CAs for upstream
servers (as upstream_tls.extra_cas).`,
	"audit": `usage: mcpintercept audit verify DIR [--pubkey FILE] [--checkpoint FILE]
       mcpintercept audit show DIR [--client IP[:PORT]] [--tool T] [--decision D] [--since DUR|RFC3339] [--until DUR|RFC3339] [--json]

Check or list the durable audit log in DIR (audit.dir).`,
	"audit verify": `usage: mcpintercept audit verify DIR [--pubkey FILE] [--checkpoint FILE]

Check the audit log's hash chain and its signed checkpoints. Every record from the start that the
--checkpoint (else the newest checkpoint in DIR) commits to, up to the last record any checkpoint
covers, must be present; records no checkpoint covers yet are counted. Exit 0: intact; 1:
tampered; 2: usage or unreadable.`,
	"audit show": `usage: mcpintercept audit show DIR [--client IP[:PORT]] [--tool T] [--decision D] [--since DUR|RFC3339] [--until DUR|RFC3339] [--json]

List the audit log's records, filtered. --since and --until take a duration back from now (10m)
or an RFC 3339 time; --decision allow, deny or rate_limited (the flow log's spelling, which the
table and --json print; records written as ratelimited match it). SERVER is the server name
(SNI/Host), else the destination address.`,
	"observe": `usage: mcpintercept observe [--config FILE | --admin URL --token-file FILE] [filters] [-o text|json] [--top] [--no-follow | --last N | --for DUR]

Follow a running appliance's decisions live over its admin listener: one line per MCP message, or
with --top a summary of calls per client and tool.`,
	"log": `usage: mcpintercept log [filters] [--until DUR|RFC3339] [-o text|json] [--top] [--last N] FILE...

Read flow log files (plain, rotated or gzip; - for stdin) with observe's filters and outputs.`,
	"inventory": `usage: mcpintercept inventory [--config FILE | --admin URL --token-file FILE] [--uncovered] [-o text|json]

The MCP servers the running appliance has seen (admin listener, admin token): destination, name,
path, versions, tool count, clients, first and last seen, and whether a Level 1 or 2 route covers
each; MCP on flows no route inspects is listed as uncovered.`,
	"node-agent": `usage: mcpintercept node-agent --config FILE

Run as a Kubernetes node agent (one per node, a DaemonSet): learn of pods from the chained CNI
plugin mcpintercept-cni (its Unix socket, node_agent.socket) and from the pod list (the Kubernetes
API, or node_agent.pods_dir), and for every selected pod (node_agent.namespace_label on its
namespace, or node_agent.pod_annotation: enabled) install the steering inside the pod's network
namespace and serve its flows with the pod as the client identity (client.pod.* in rules, "pod" in
records). A restarted agent adopts the pods it had enrolled. SIGINT/SIGTERM stop it: with
node_agent.failure: open every pod's steering is removed (traffic goes direct), with closed it
stays. Needs Linux, CAP_NET_ADMIN, CAP_SYS_ADMIN (setns) and the host's /proc and netns paths.`,
	"policy": `usage: mcpintercept policy test --config FILE --input RECORDS.jsonl [--rule-set NAME] [--only-differences] [--fail-on-unknown] [-o json]

Evaluate recorded requests (flow log lines) against the configuration's rule sets offline and
print what each rule decides. --only-differences prints only the records whose replayed decision
differs from the recorded one, then the summary. A record whose decision depends on a field the
flow log does not carry (mcp.arguments, http.headers, auth.*) is "unknown". Exit 0: no decision
differs (unknowns are reported); 1: one differs, or with --fail-on-unknown one is unknown;
2: usage or an unreadable line.`,
	"tools": `usage: mcpintercept tools list|diff|approve|pin [flags]

The running appliance's tool-integrity state over its admin listener.`,
	"tools list": `usage: mcpintercept tools list [--json] [--config FILE | --admin URL --token-file FILE]

Every tool, prompt and template definition the running appliance knows, per server (admin listener).`,
	"tools diff": `usage: mcpintercept tools diff [--pins FILE] [--config FILE | --admin URL --token-file FILE]

What is not pinned and unchanged, or the live definitions against a pin file. Exit 0: no
difference; 1: differences (or the appliance cannot be reached); 2: usage.`,
	"tools approve": `usage: mcpintercept tools approve SERVER NAME [--kind tool|prompt|template] [--hash SEEN] [--config FILE | --admin URL --token-file FILE]

Pin the definition SERVER lists now under NAME, ending its quarantine (needs the admin token).`,
	"tools pin": `usage: mcpintercept tools pin --from-live [--out FILE] [--config FILE | --admin URL --token-file FILE]

Write a pin file of every definition seen, for an operator to review and name in
tool_integrity.pin_file.`,
	"version": `usage: mcpintercept version

Print the build's version (the Debian package's version for a packaged build; devel and the VCS
revision for a plain go build), the Go version and the platform.`,
}

// wantsHelp reports whether args (a subcommand's arguments) ask for help: -h, -help or --help
// before "--" (and, for exec, before the command).
func wantsHelp(cmd string, args []string) bool {
	for _, a := range args {
		switch {
		case a == "--":
			return false
		case a == "-h" || a == "-help" || a == "--help" || a == "--h":
			return true
		case cmd == "exec" && !strings.HasPrefix(a, "-"):
			// exec's flags stop at the command; its own --help is the command's.
			return false
		}
	}
	return false
}

// helpKey is "ca init" for `ca init --help`, "run" for `run --help`.
func helpKey(args []string) string {
	if len(args) > 1 && !strings.HasPrefix(args[1], "-") {
		if k := args[0] + " " + args[1]; commandHelp[k] != "" {
			return k
		}
	}
	return args[0]
}

// runHelp prints a subcommand's description and the flags its own flag set defines to stdout,
// exit 0. The flags come from the subcommand itself, run with its --help (every flag set stops
// there: nothing runs), so the list cannot drift from what it accepts. A subcommand that answers
// --help on stdout by itself (tools) is left to do so.
func runHelp(args []string, run func([]string, io.Writer, io.Writer) int, stdout io.Writer) int {
	var out, errb bytes.Buffer
	code := run(args[1:], &out, &errb)
	if code == exitOK && out.Len() > 0 {
		stdout.Write(out.Bytes())
		return exitOK
	}
	key := helpKey(args)
	if d := commandHelp[key]; d != "" {
		fmt.Fprintln(stdout, d)
	} else {
		fmt.Fprintf(stdout, "usage: mcpintercept %s [flags]\n", key)
	}
	if strings.HasPrefix(key, "tools ") {
		// The tools commands share their connection flags and print their own usage.
		fmt.Fprintf(stdout, "\n%s", toolsUsageText)
		return exitOK
	}
	if key == "ca" || key == "audit" {
		fmt.Fprintf(stdout, "\nEach subcommand's flags: mcpintercept %s SUBCOMMAND --help\n", key)
		return exitOK
	}
	flags := flagLines(errb.String())
	if flags == "" {
		fmt.Fprintln(stdout, "\nflags: none")
		return exitOK
	}
	fmt.Fprintf(stdout, "\nflags:\n%s", flags)
	return exitOK
}

// flagLines keeps what flag.PrintDefaults wrote (the indented lines), dropping the "Usage of
// NAME:" header and any usage text a subcommand printed itself.
func flagLines(s string) string {
	var b strings.Builder
	for _, l := range strings.SplitAfter(s, "\n") {
		if strings.HasPrefix(l, "  -") || strings.HasPrefix(l, "    \t") {
			b.WriteString(l)
		}
	}
	return b.String()
}
