// Command mcpintercept is the transparent MCP interception appliance: it steers flows into itself,
// recovers their original destination and forwards them there. This package parses flags and
// prints; package appliance wires and runs the appliance, package devhost runs `exec`.
//
//	mcpintercept run --config FILE [--mechanism NAME]
//	mcpintercept check --config FILE [--mechanism NAME] [--strict] [--ports]
//	mcpintercept cleanup
//	mcpintercept declare [--config FILE] [--mechanism NAME]
//	mcpintercept ca init|export [--config FILE | --dir DIR]
//	mcpintercept exec [--config FILE] [--level 1|2] [--user NAME|UID] -- CMD [ARGS...]
//	mcpintercept observe [flags]
//	mcpintercept log [flags] FILE...
//	mcpintercept inventory [flags]
//	mcpintercept policy test --config FILE --input RECORDS.jsonl
//	mcpintercept version | --version
//	mcpintercept audit verify|show DIR [flags]
//	mcpintercept tools list|diff|approve|pin [flags]
//
// run, exec and cleanup need Linux; check, declare and ca work everywhere. Signals to run: SIGINT
// and SIGTERM drain and stop, SIGHUP reloads routes and rules, SIGUSR1 reopens the flow log file
// (for logrotate). Outside systemd, run and exec start a watchdog child that removes the
// steering should they die of a fatal runtime error (MCPINTERCEPT_WATCHDOG=off: none).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"mcpintercept/appliance"
	"mcpintercept/config"
	"mcpintercept/intercept"
	"mcpintercept/origin"
	"mcpintercept/policy"
)

// Exit codes: 2 means the invocation or configuration is wrong (nothing was installed); 1 means a
// runtime failure.
const (
	exitOK      = 0
	exitRuntime = 1
	exitUsage   = 2
)

func main() {
	// The watchdog is this binary too: it only waits for the data plane to end and cleans up
	// after a crash (appliance/crashwatch_linux.go).
	if appliance.IsWatchdog() {
		if err := appliance.RunWatchdog(os.Stderr); err != nil {
			os.Exit(exitUsage)
		}
		os.Exit(exitOK)
	}
	command := ""
	if len(os.Args) > 1 {
		command = os.Args[1]
	}
	watchdog = appliance.StartWatchdog(command, os.Stderr)
	armFault()
	os.Exit(realMain(os.Args[1:], os.Stdout, os.Stderr))
}

// watchdog is set once by main, before realMain, when a watchdog runs for this process (run and
// exec announce to it what they install). It is a package variable so that realMain keeps the
// signature the tests call.
var watchdog *appliance.WatchdogLink

func usage(w io.Writer) {
	fmt.Fprint(w, `usage: mcpintercept <command> [flags]     (mcpintercept <command> --help: its description and flags)

commands:
  run --config FILE [--mechanism NAME]     steer, intercept and forward until SIGINT/SIGTERM
                                           (SIGHUP reloads routes and rules, SIGUSR1 reopens the flow log file)
  check --config FILE [--mechanism NAME] [--strict] [--ports]
                                           validate a configuration as run would before installing anything
                                           (every problem at once; warnings for settings that never take effect)
  cleanup                                  remove every rule, route and table mcpintercept could have installed
  declare [--config FILE] [--mechanism NAME]
                                           print the conformance declaration (JSON)
  ca init [--config FILE | --dir DIR] [--force]
                                           create the appliance CA (key 0600) used by terminate routes
  ca export [--config FILE | --dir DIR] [--format pem|der|p12]
                                           print the CA certificate, for clients to trust
  exec [--config FILE] [--level 1|2] [--user NAME|UID] -- CMD [ARGS...]
                                           run CMD with its TCP connects steered through the appliance
                                           (eBPF; zero-config: TLS terminated, JSON-RPC bodies read at Level 2)
  observe [--config FILE | --admin URL --token-file FILE] [--client C] [--tool T] [--decision D] [-o json] [--top]
          [--no-follow | --last N | --for DUR]
                                           follow a running appliance's decisions live (admin listener)
  log [--client C] [--tool T] [--decision D] [--since S] [--until S] [-o json] [--top] [--last N] FILE...
                                           read flow log files (plain, rotated, gzip) with observe's filters
  inventory [--config FILE | --admin URL --token-file FILE] [--uncovered] [-o json]
                                           the MCP servers a running appliance has seen, covered by a Level 1/2 route or not
  policy test --config FILE --input RECORDS.jsonl
                                           evaluate recorded requests against the rule sets offline
  audit verify|show DIR [flags]            check the audit log's chain and signed checkpoints (exit 0 intact, 1 tampered) or list its records
  tools list [--json]                      the running appliance's pinned tool definitions (admin listener)
  tools diff [--pins FILE]                 definitions not pinned and unchanged, or live vs a pin file (exit 0 same, 1 differ)
  tools approve SERVER NAME [--kind K]     pin a changed or new definition, ending its quarantine (admin token)
  tools pin --from-live [--out FILE]       write a pin file of every definition seen, for review
                                           (tools flags: --config FILE | --admin URL --token-file FILE; see mcpintercept tools help)
  node-agent --config FILE                 Kubernetes node agent: intercept each selected pod's MCP traffic in
                                           its own network namespace (fed by mcpintercept-cni and the pod list)
  version                                  print the build's version (also --version)

mechanisms: `+mechanismList()+`
`)
}

func mechanismList() string {
	var s []string
	for _, m := range origin.Mechanisms() {
		s = append(s, string(m))
	}
	return strings.Join(s, ", ")
}

// commands maps each subcommand to its function.
var commands = map[string]func(args []string, stdout, stderr io.Writer) int{
	"run":       cmdRun,
	"check":     cmdCheck,
	"cleanup":   cmdCleanup,
	"declare":   cmdDeclare,
	"ca":        cmdCA,
	"exec":      cmdExec,
	"audit":     cmdAudit,
	"tools":     cmdTools,
	"observe":   cmdObserve,
	"log":       cmdLog,
	"inventory": cmdInventory,
	"policy":    cmdPolicy,
	"version":   cmdVersion,

	"node-agent": cmdNodeAgent,
}

func realMain(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return exitUsage
	}
	switch args[0] {
	case "-h", "--help", "-help", "help":
		// `help CMD` is `CMD --help`.
		if len(args) > 1 && commands[args[1]] != nil {
			return runHelp(append(args[1:], "--help"), commands[args[1]], stdout)
		}
		usage(stdout)
		return exitOK
	case "--version", "-version", "-v":
		return cmdVersion(args[1:], stdout, stderr)
	}
	run := commands[args[0]]
	if run == nil {
		fmt.Fprintf(stderr, "mcpintercept: unknown command %q\n", args[0])
		usage(stderr)
		return exitUsage
	}
	if wantsHelp(args[0], args[1:]) {
		return runHelp(args, run, stdout)
	}
	return run(args[1:], stdout, stderr)
}

type commonFlags struct {
	config    string
	mechanism string
}

func parseFlags(name string, args []string, stderr io.Writer, needConfig bool) (*commonFlags, bool) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cf commonFlags
	fs.StringVar(&cf.config, "config", "", "configuration file (YAML)")
	fs.StringVar(&cf.mechanism, "mechanism", "", "override the file's mechanism: "+mechanismList())
	if err := fs.Parse(args); err != nil {
		return nil, false
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "mcpintercept %s: unexpected argument %q\n", name, fs.Arg(0))
		return nil, false
	}
	if needConfig && cf.config == "" {
		fmt.Fprintf(stderr, "mcpintercept %s: --config FILE is required\n", name)
		return nil, false
	}
	return &cf, true
}

func loadConfig(cf *commonFlags, stderr io.Writer) (*config.Config, bool) {
	cfg, err := config.Load(cf.config, config.Overrides{Mechanism: config.Mechanism(cf.mechanism)})
	if err != nil {
		reportConfigError(stderr, err)
		return nil, false
	}
	return cfg, true
}

// reportConfigError prints a configuration or a policy that did not load: each problem on a
// line (config.Errors, policy.CompileErrors), or the error.
func reportConfigError(stderr io.Writer, err error) {
	var what string
	var problems []string
	var errs config.Errors
	var ce policy.CompileErrors
	switch {
	case errors.As(err, &errs):
		what = "configuration"
		for _, e := range errs {
			problems = append(problems, fmt.Sprint(e))
		}
	case errors.As(err, &ce):
		what = "policy"
		for _, e := range ce {
			problems = append(problems, fmt.Sprint(e))
		}
	default:
		fmt.Fprintf(stderr, "mcpintercept: %v; nothing was installed\n", err)
		return
	}
	fmt.Fprintf(stderr, "mcpintercept: invalid %s (%d problem(s)); nothing was installed:\n", what, len(problems))
	for _, p := range problems {
		fmt.Fprintf(stderr, "  %s\n", p)
	}
}

// cmdCheck is `check`: everything run refuses before installing anything, in one pass (the
// file's errors, then the CEL of every rule without one, then the files and directories the
// configuration names), and the warnings; --strict makes a warning refuse the file.
func cmdCheck(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cf commonFlags
	fs.StringVar(&cf.config, "config", "", "configuration file (YAML)")
	fs.StringVar(&cf.mechanism, "mechanism", "", "override the file's mechanism: "+mechanismList())
	strict := fs.Bool("strict", false, "treat warnings as errors (exit 2), and fetch each tokens.issuers[].jwks_url once (a URL that does not serve keys: exit 2)")
	ports := fs.Bool("ports", false, "also check that the listen, admin and dns ports are free (binds each once)")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "mcpintercept check: unexpected argument %q\n", fs.Arg(0))
		return exitUsage
	}
	if cf.config == "" {
		fmt.Fprintln(stderr, "mcpintercept check: --config FILE is required")
		return exitUsage
	}
	rep, err := appliance.CheckFile(cf.config, config.Overrides{Mechanism: config.Mechanism(cf.mechanism)}, appliance.PreflightOptions{Ports: *ports})
	if err != nil {
		fmt.Fprintf(stderr, "mcpintercept: %v; nothing was installed\n", err)
		return exitUsage
	}
	if len(rep.Problems) > 0 {
		what := "configuration"
		if rep.PolicyOnly {
			what = "policy"
		}
		fmt.Fprintf(stderr, "mcpintercept: invalid %s (%d problem(s)); nothing was installed:\n", what, len(rep.Problems))
		for _, p := range rep.Problems {
			fmt.Fprintf(stderr, "  %s\n", p.Text)
		}
		return exitUsage
	}
	cfg := rep.Config
	nrules := 0
	for _, rs := range cfg.RuleSets {
		nrules += len(rs)
	}
	// A warning is a valid choice the operator should know they made (token_audience: off), or
	// a setting that never takes effect; it fails the check only under --strict.
	warnings := cfg.Warnings()
	for _, w := range warnings {
		fmt.Fprintf(stderr, "%s: warning: %s\n", cf.config, w)
	}
	if *strict && len(warnings) > 0 {
		fmt.Fprintf(stderr, "mcpintercept check: %d warning(s), refused under --strict\n", len(warnings))
		return exitUsage
	}
	if *strict && !checkJWKS(appliance.ProbeJWKS(context.Background(), cfg), cf.config, stdout, stderr) {
		return exitUsage
	}
	fmt.Fprintf(stdout, "%s: ok (mechanism %s, %d destination prefix(es), %d port range(s), %d route(s), %d rule(s) compiled)\n",
		cf.config, cfg.Mechanism, len(cfg.Intercept.Destinations), len(cfg.Intercept.Ports), len(cfg.Routes), nrules)
	return exitOK
}

// checkJWKS reports what --strict found at each tokens.issuers[].jwks_url: "ok: N key(s)" on
// stdout, a URL that could not be used on stderr (false: the check fails).
func checkJWKS(probes []appliance.JWKSProbe, path string, stdout, stderr io.Writer) bool {
	bad := 0
	for _, p := range probes {
		if p.Err != nil {
			bad++
			fmt.Fprintf(stderr, "%s: %s\n", path, p)
		} else {
			fmt.Fprintf(stdout, "%s: %s\n", path, p)
		}
	}
	if bad > 0 {
		fmt.Fprintf(stderr, "mcpintercept check: %d JWKS URL(s) unusable: every request with a token of that issuer would be answered 503\n", bad)
		return false
	}
	return true
}

// preflight refuses what appliance.Preflight finds (run, exec --config): reported like a
// configuration error, since nothing was installed.
func preflight(cfg *config.Config, stderr io.Writer) bool {
	errs := appliance.Preflight(cfg, appliance.PreflightOptions{})
	if len(errs) == 0 {
		return true
	}
	fmt.Fprintf(stderr, "mcpintercept: refused at start (%d problem(s)); nothing was installed:\n", len(errs))
	for _, e := range errs {
		fmt.Fprintf(stderr, "  %s: %v\n", cfg.Path, e)
	}
	return false
}

// needsLinux prints why cmd cannot run on this system; false when it can.
func needsLinux(cmd string, stderr io.Writer) bool {
	if err := appliance.Supported(cmd); err != nil {
		fmt.Fprintf(stderr, "mcpintercept: %v\n", err)
		return true
	}
	return false
}

func cmdCleanup(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("cleanup", flag.ContinueOnError)
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil || fs.NArg() > 0 {
		return exitUsage
	}
	if needsLinux("cleanup", stderr) {
		return exitRuntime
	}
	removed, err := intercept.Cleanup(context.Background())
	for _, r := range removed {
		fmt.Fprintf(stdout, "removed %s\n", r)
	}
	if len(removed) == 0 && err == nil {
		fmt.Fprintln(stdout, "nothing to remove")
	}
	if err != nil {
		fmt.Fprintf(stderr, "mcpintercept cleanup: %v\n", err)
		return exitRuntime
	}
	return exitOK
}

func cmdDeclare(args []string, stdout, stderr io.Writer) int {
	cf, ok := parseFlags("declare", args, stderr, false)
	if !ok {
		return exitUsage
	}
	var cfg *config.Config
	if cf.config != "" {
		if cfg, ok = loadConfig(cf, stderr); !ok {
			return exitUsage
		}
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	enc.Encode(appliance.Declaration(cfg))
	return exitOK
}

func cmdRun(args []string, stdout, stderr io.Writer) int {
	cf, ok := parseFlags("run", args, stderr, true)
	if !ok {
		return exitUsage
	}
	if needsLinux("run", stderr) {
		return exitRuntime
	}
	cfg, ok := loadConfig(cf, stderr)
	if !ok || !preflight(cfg, stderr) {
		return exitUsage
	}
	log := appliance.NewLoggerFormat(cfg.Log.Level, cfg.Log.Format, stderr)
	// Signals, reloads, the flow log's reopen and the drain on stop: appliance.Run.
	if err := appliance.Run(cfg, appliance.RunOptions{Stdout: stdout, Log: log, Steering: watchdog.Steering}); err != nil {
		var ce *appliance.ConfigError
		if errors.As(err, &ce) {
			reportConfigError(stderr, err)
			return exitUsage
		}
		log.Error("stopped", "err", err)
		return exitRuntime
	}
	return exitOK
}
