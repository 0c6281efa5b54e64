package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"mcpintercept/appliance"
	"mcpintercept/config"
	"mcpintercept/devhost"
	"mcpintercept/origin"
)

// cmdExec is the zero-config dev-host mode: `mcpintercept exec [--config FILE] [--level 1|2]
// [--user NAME|UID] -- CMD ARGS...` runs CMD in a cgroup of its own whose TCP connects eBPF steers
// to this process. CMD runs as the user who ran sudo (SUDO_UID), or the --user given; as root only
// when root ran exec directly or --user root says so.
func cmdExec(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("exec", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfgPath := fs.String("config", "", "use this file's routes, rules, CA and upstream trust (mechanism forced to ebpf)")
	level := fs.Int("level", 2, "awareness level for the zero-config route: 2 (JSON-RPC bodies: every message's method and tool) or 1 (HTTP headers only)")
	userFlag := fs.String("user", "", "run the command as `NAME|UID` (default: the user who ran sudo, from SUDO_UID; --user root to run it as root)")
	noLoopback := fs.Bool("no-loopback", false, "leave the command's connects to loopback (127.0.0.0/8, ::1) alone; by default they are intercepted like any other")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	argv := fs.Args()
	if len(argv) == 0 {
		fmt.Fprintln(stderr, "usage: mcpintercept exec [--config FILE] [--level 1|2] [--user NAME|UID] [--no-loopback] -- CMD [ARGS...]")
		return exitUsage
	}
	if *level != 1 && *level != 2 {
		fmt.Fprintf(stderr, "mcpintercept exec: --level %d: want 1 (HTTP headers) or 2 (JSON-RPC bodies)\n", *level)
		return exitUsage
	}
	if needsLinux("exec", stderr) {
		return exitRuntime
	}
	if os.Geteuid() != 0 {
		fmt.Fprintln(stderr, "mcpintercept exec: needs root (eBPF programs, cgroups); try: sudo mcpintercept exec -- "+strings.Join(argv, " "))
		return exitUsage
	}
	userSet := false
	fs.Visit(func(f *flag.Flag) { userSet = userSet || f.Name == "user" })
	who, err := devhost.ResolveUser(*userFlag, userSet)
	if err != nil {
		fmt.Fprintf(stderr, "mcpintercept %v\n", err)
		return exitUsage
	}
	var cfg *config.Config
	if *cfgPath != "" {
		c, ok := loadConfig(&commonFlags{config: *cfgPath}, stderr)
		if !ok {
			return exitUsage
		}
		if err := appliance.Check(c); err != nil {
			reportRuleErrors(stderr, err)
			return exitUsage
		}
		if !preflight(c, stderr) {
			return exitUsage
		}
		cfg = c
	} else {
		cfg = config.Default(config.EBPF)
	}
	if !*noLoopback {
		// The command's localhost servers are what exec dials for it: upstream_deny keeps
		// everything but its loopback entries.
		cfg.UpstreamDeny = devhost.AllowLoopback(cfg.UpstreamDeny)
	}
	log := appliance.NewLoggerFormat(cfg.Log.Level, cfg.Log.Format, stderr).With("mode", "exec")
	watchdog.Steering(origin.EBPF) // exec always steers a cgroup of its own with eBPF
	newApp := func(ctx context.Context, o appliance.Options) (*appliance.Appliance, error) {
		return appliance.New(ctx, cfg, o)
	}
	code, err := devhost.Run(context.Background(), devhost.Options{NewAppliance: newApp, Steering: appliance.SteeringOptions(cfg),
		ZeroConfig: *cfgPath == "", Level: *level,
		Argv: argv, User: who, Stderr: stderr, Log: log, CgroupCreated: watchdog.Cgroup, NoLoopback: *noLoopback})
	if err != nil {
		fmt.Fprintf(stderr, "mcpintercept exec: %v\n", err)
		if code == 0 {
			code = exitRuntime
		}
	}
	return code
}
