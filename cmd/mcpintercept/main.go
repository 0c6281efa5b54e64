// Command mcpintercept is the transparent MCP interception appliance: it steers flows into itself,
// recovers their original destination and forwards them there. This package parses flags and
// prints; package appliance wires and runs the appliance, package devhost runs `exec`.
//
//	mcpintercept run --config FILE [--mechanism NAME]
//	mcpintercept check --config FILE [--mechanism NAME]
//	mcpintercept cleanup
//	mcpintercept declare [--config FILE] [--mechanism NAME]
//	mcpintercept ca init|export [--config FILE | --dir DIR]
//	mcpintercept exec [--config FILE] [--level 1] [--user NAME|UID] -- CMD [ARGS...]
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
	"os/signal"
	"runtime/pprof"
	"strings"
	"syscall"

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
	// after a crash (watchdog_linux.go).
	if code, ok := runWatchdogIfAsked(os.Stderr); ok {
		os.Exit(code)
	}
	watchdog = startWatchdog(os.Args[1:], os.Stderr)
	armFault()
	os.Exit(realMain(os.Args[1:], os.Stdout, os.Stderr))
}

func usage(w io.Writer) {
	fmt.Fprint(w, `usage: mcpintercept <command> [flags]

commands:
  run --config FILE [--mechanism NAME]     steer, intercept and forward until SIGINT/SIGTERM
                                           (SIGHUP reloads routes and rules, SIGUSR1 reopens the flow log file)
  check --config FILE [--mechanism NAME]   validate a configuration and exit
  cleanup                                  remove every rule, route and table mcpintercept could have installed
  declare [--config FILE] [--mechanism NAME]
                                           print the conformance declaration (JSON)
  ca init [--config FILE | --dir DIR] [--force]
                                           create the appliance CA (key 0600) used by terminate routes
  ca export [--config FILE | --dir DIR] [--format pem|der]
                                           print the CA certificate, for clients to trust
  exec [--config FILE] [--level 1] [--user NAME|UID] -- CMD [ARGS...]
                                           run CMD with its TCP connects steered through the appliance
                                           (eBPF; zero-config: TLS terminated, HTTP at Level 1)
  audit verify|show DIR [flags]            check the audit log's chain and signed checkpoints (exit 0 intact, 1 tampered) or list its records
  tools list [--json]                      the running appliance's pinned tool definitions (admin listener)
  tools diff [--pins FILE]                 definitions not pinned and unchanged, or live vs a pin file (exit 0 same, 1 differ)
  tools approve SERVER NAME [--kind K]     pin a changed or new definition, ending its quarantine (admin token)
  tools pin --from-live [--out FILE]       write a pin file of every definition seen, for review
                                           (tools flags: --config FILE | --admin URL --token-file FILE; see mcpintercept tools help)

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

func realMain(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return exitUsage
	}
	switch args[0] {
	case "run":
		return cmdRun(args[1:], stdout, stderr)
	case "check":
		return cmdCheck(args[1:], stdout, stderr)
	case "cleanup":
		return cmdCleanup(args[1:], stdout, stderr)
	case "declare":
		return cmdDeclare(args[1:], stdout, stderr)
	case "ca":
		return cmdCA(args[1:], stdout, stderr)
	case "exec":
		return cmdExec(args[1:], stdout, stderr)
	case "audit":
		return cmdAudit(args[1:], stdout, stderr)
	case "tools":
		return cmdTools(args[1:], stdout, stderr)
	case "observe":
		return cmdObserve(args[1:], stdout, stderr)
	case "policy":
		return cmdPolicy(args[1:], stdout, stderr)
	case "-h", "--help", "help":
		usage(stdout)
		return exitOK
	}
	fmt.Fprintf(stderr, "mcpintercept: unknown command %q\n", args[0])
	usage(stderr)
	return exitUsage
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
		var errs config.Errors
		if errors.As(err, &errs) {
			fmt.Fprintf(stderr, "mcpintercept: invalid configuration (%d problem(s)); nothing was installed:\n", len(errs))
			for _, e := range errs {
				fmt.Fprintf(stderr, "  %s\n", e)
			}
		} else {
			fmt.Fprintf(stderr, "mcpintercept: %v; nothing was installed\n", err)
		}
		return nil, false
	}
	return cfg, true
}

func reportRuleErrors(stderr io.Writer, err error) {
	var ce policy.CompileErrors
	if errors.As(err, &ce) {
		fmt.Fprintf(stderr, "mcpintercept: invalid policy (%d problem(s)); nothing was installed:\n", len(ce))
		for _, e := range ce {
			fmt.Fprintf(stderr, "  %s\n", e)
		}
		return
	}
	fmt.Fprintf(stderr, "mcpintercept: %v; nothing was installed\n", err)
}

func cmdCheck(args []string, stdout, stderr io.Writer) int {
	cf, ok := parseFlags("check", args, stderr, true)
	if !ok {
		return exitUsage
	}
	cfg, ok := loadConfig(cf, stderr)
	if !ok {
		return exitUsage
	}
	if err := appliance.Check(cfg); err != nil {
		reportRuleErrors(stderr, err)
		return exitUsage
	}
	nrules := 0
	for _, rs := range cfg.RuleSets {
		nrules += len(rs)
	}
	// A warning is a valid choice the operator should know they made (token_audience: off);
	// it does not fail the check.
	for _, w := range cfg.Warnings() {
		fmt.Fprintf(stderr, "%s: warning: %s\n", cf.config, w)
	}
	fmt.Fprintf(stdout, "%s: ok (mechanism %s, %d destination prefix(es), %d port range(s), %d route(s), %d rule(s) compiled)\n",
		cf.config, cfg.Mechanism, len(cfg.Intercept.Destinations), len(cfg.Intercept.Ports), len(cfg.Routes), nrules)
	return exitOK
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
	if !ok {
		return exitUsage
	}
	// A flow log piped into a reader that quits (`| head`) must not kill the daemon with SIGPIPE
	// and leave its steering installed: the write fails and is reported instead.
	signal.Ignore(syscall.SIGPIPE)
	log := appliance.NewLogger(cfg.Log.Level, stderr)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	// SIGHUP reloads routes and rules (a bad file keeps the running ones); unhandled, it would
	// kill the daemon with its steering left in place.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	// SIGUSR1 reopens the flow log file (logrotate's postrotate sends it after renaming the file:
	// `systemctl kill -s USR1 mcpintercept`); unhandled, it too would kill the daemon.
	usr1 := make(chan os.Signal, 1)
	notifyReopen(usr1)
	defer signal.Stop(usr1)

	// A CPU profile of the whole run, for performance work: MCPINTERCEPT_CPUPROFILE=FILE.
	if f := os.Getenv("MCPINTERCEPT_CPUPROFILE"); f != "" {
		if out, err := os.Create(f); err == nil {
			pprof.StartCPUProfile(out)
			defer func() { pprof.StopCPUProfile(); out.Close() }()
		}
	}

	watchdog.steering(origin.Mechanism(cfg.Mechanism))
	app, err := appliance.New(ctx, cfg, appliance.Options{Stdout: stdout, Log: log})
	if err != nil {
		var ce *appliance.ConfigError
		if errors.As(err, &ce) {
			reportRuleErrors(stderr, err)
			return exitUsage
		}
		log.Error("stopped", "err", err)
		return exitRuntime
	}
	if err := app.Start(ctx); err != nil {
		app.Stop(context.Background())
		log.Error("stopped", "err", err)
		return exitRuntime
	}
	for waiting := true; waiting; {
		select {
		case <-ctx.Done():
			waiting = false
		case <-hup:
			app.Reload("") // logs what it did, or why it kept the running configuration
		case <-usr1:
			app.ReopenFlowLog() // logs the reopen, or why it failed
		}
	}
	// Steering that could not be removed is logged with the way out (`mcpintercept cleanup`).
	app.Stop(context.Background())
	return exitOK
}
