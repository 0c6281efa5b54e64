package main

import (
	"context"
	"crypto/x509"
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
// [--user NAME|UID] [--upstream-ca FILE]... -- CMD ARGS...` runs CMD in a cgroup of its own whose TCP connects eBPF steers
// to this process. CMD runs as the user who ran sudo (SUDO_UID), or the --user given; as root only
// when root ran exec directly or --user root says so.
func cmdExec(args []string, stdout, stderr io.Writer) int {
	ef, ok := parseExecFlags(args, stderr)
	if !ok {
		return exitUsage
	}
	argv := ef.argv
	if needsLinux("exec", stderr) {
		return exitRuntime
	}
	if os.Geteuid() != 0 {
		fmt.Fprintln(stderr, "mcpintercept exec: needs root (eBPF programs, cgroups); try: sudo mcpintercept exec -- "+strings.Join(argv, " "))
		return exitUsage
	}
	who, err := devhost.ResolveUser(ef.user, ef.userSet)
	if err != nil {
		fmt.Fprintf(stderr, "mcpintercept %v\n", err)
		return exitUsage
	}
	cfg, ok := execConfig(ef.config, ef.upstreamCAs, stderr)
	if !ok {
		return exitUsage
	}
	if !ef.noLoopback {
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
		ZeroConfig: ef.config == "", Level: ef.level,
		Argv: argv, User: who, Stderr: stderr, Log: log, CgroupCreated: watchdog.Cgroup, NoLoopback: ef.noLoopback})
	if err != nil {
		fmt.Fprintf(stderr, "mcpintercept exec: %v\n", err)
		if code == 0 {
			code = exitRuntime
		}
	}
	return code
}

// execFlags are exec's flags and the command.
type execFlags struct {
	config      string
	level       int
	user        string
	userSet     bool
	upstreamCAs []string
	noLoopback  bool
	argv        []string
}

// parseExecFlags reads exec's flags; usage problems are reported on stderr (false: exit 2).
func parseExecFlags(args []string, stderr io.Writer) (execFlags, bool) {
	var ef execFlags
	fs := flag.NewFlagSet("exec", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&ef.config, "config", "", "use this file's routes, rules, CA and upstream trust (mechanism: ebpf when the file names none; ebpf.cgroup not needed)")
	fs.IntVar(&ef.level, "level", 2, "awareness level for the zero-config route: 2 (JSON-RPC bodies: every message's method and tool) or 1 (HTTP headers only)")
	fs.StringVar(&ef.user, "user", "", "run the command as `NAME|UID` (default: the user who ran sudo, from SUDO_UID; --user root to run it as root)")
	fs.Var((*stringList)(&ef.upstreamCAs), "upstream-ca", "also trust this PEM `FILE`'s CA certificates when verifying upstream servers (repeatable; as upstream_tls.extra_cas)")
	fs.BoolVar(&ef.noLoopback, "no-loopback", false, "leave the command's connects to loopback (127.0.0.0/8, ::1) alone; by default they are intercepted like any other")
	if err := fs.Parse(args); err != nil {
		return ef, false
	}
	ef.argv = fs.Args()
	if len(ef.argv) == 0 {
		fmt.Fprintln(stderr, "usage: mcpintercept exec [--config FILE] [--level 1|2] [--user NAME|UID] [--upstream-ca FILE]... [--no-loopback] -- CMD [ARGS...]")
		return ef, false
	}
	if ef.level != 1 && ef.level != 2 {
		fmt.Fprintf(stderr, "mcpintercept exec: --level %d: want 1 (HTTP headers) or 2 (JSON-RPC bodies)\n", ef.level)
		return ef, false
	}
	fs.Visit(func(f *flag.Flag) { ef.userSet = ef.userSet || f.Name == "user" })
	return ef, true
}

// execConfig is exec's configuration: the --config file (read for exec: without `mechanism` it is
// ebpf, and no ebpf.cgroup is needed) or the zero-config default, with each --upstream-ca added to
// upstream_tls.extra_cas. Problems are reported on stderr (false: exit 2, nothing installed).
func execConfig(path string, cas []string, stderr io.Writer) (*config.Config, bool) {
	for _, f := range cas {
		if err := readCA(f); err != nil {
			fmt.Fprintf(stderr, "mcpintercept exec: --upstream-ca %s: %v\n", f, err)
			return nil, false
		}
	}
	if path == "" {
		cfg := config.Default(config.EBPF)
		cfg.Upstream.ExtraCAs = append(cfg.Upstream.ExtraCAs, cas...)
		return cfg, true
	}
	cfg, err := config.Load(path, config.Overrides{Exec: true})
	if err != nil {
		reportConfigError(stderr, err)
		return nil, false
	}
	cfg.Upstream.ExtraCAs = append(cfg.Upstream.ExtraCAs, cas...)
	if err := appliance.Check(cfg); err != nil {
		reportConfigError(stderr, err)
		return nil, false
	}
	if !preflight(cfg, stderr) {
		return nil, false
	}
	return cfg, true
}

// readCA refuses a file that holds no PEM certificate, as upstream_tls.extra_cas does.
func readCA(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if !x509.NewCertPool().AppendCertsFromPEM(b) {
		return fmt.Errorf("no PEM certificate in %s", path)
	}
	return nil
}

// stringList is a repeatable string flag.
type stringList []string

func (l *stringList) String() string { return strings.Join(*l, ",") }

func (l *stringList) Set(s string) error {
	if s == "" {
		return fmt.Errorf("empty file name")
	}
	*l = append(*l, s)
	return nil
}
