// Command mcpintercept is the transparent MCP interception appliance: it steers flows into itself,
// recovers their original destination and forwards them there.
//
//	mcpintercept run --config FILE [--mechanism NAME]
//	mcpintercept check --config FILE [--mechanism NAME]
//	mcpintercept cleanup
//	mcpintercept declare [--config FILE] [--mechanism NAME]
//	mcpintercept ca init|export [--config FILE | --dir DIR]
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"mcpintercept/config"
	"mcpintercept/engine"
	"mcpintercept/intercept"
	"mcpintercept/level1"
	"mcpintercept/policy"
	"mcpintercept/telemetry"
	"mcpintercept/tlsmitm"
)

// Exit codes: 2 means the invocation or configuration is wrong (nothing was installed); 1 means a
// runtime failure.
const (
	exitOK      = 0
	exitRuntime = 1
	exitUsage   = 2
)

func main() { os.Exit(realMain(os.Args[1:], os.Stdout, os.Stderr)) }

func usage(w io.Writer) {
	fmt.Fprint(w, `usage: mcpintercept <command> [flags]

commands:
  run --config FILE [--mechanism NAME]     steer, intercept and forward until SIGINT/SIGTERM
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

mechanisms: `+mechanismList()+`
`)
}

func mechanismList() string {
	var s []string
	for _, m := range config.Mechanisms {
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
	if _, _, err := engine.RoutingFromConfig(cfg, nil); err != nil {
		reportRuleErrors(stderr, err)
		return exitUsage
	}
	nrules := 0
	for _, rs := range cfg.RuleSets {
		nrules += len(rs)
	}
	fmt.Fprintf(stdout, "%s: ok (mechanism %s, %d destination prefix(es), %d port range(s), %d route(s), %d rule(s) compiled)\n",
		cf.config, cfg.Mechanism, len(cfg.Intercept.Destinations), len(cfg.Intercept.Ports), len(cfg.Routes), nrules)
	return exitOK
}

func cmdCleanup(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("cleanup", flag.ContinueOnError)
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil || fs.NArg() > 0 {
		return exitUsage
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

func declaration(cfg *config.Config) telemetry.Declaration {
	var ms []telemetry.Interception
	if cfg != nil && cfg.Path != "" {
		ms = append(ms, telemetry.Interception{Mechanism: string(cfg.Mechanism), OriginalDestination: intercept.Recovery(cfg), InEffect: true})
	} else {
		for _, m := range []config.Mechanism{config.NftablesTProxy, config.IptablesRedirect, config.EBPF, config.External} {
			c := config.Default(m)
			ms = append(ms, telemetry.Interception{Mechanism: string(m), OriginalDestination: intercept.Recovery(c)})
			if m == config.External {
				c.External.OriginalDst = "so-original-dst"
				ms = append(ms, telemetry.Interception{Mechanism: string(m), OriginalDestination: intercept.Recovery(c)})
			}
		}
	}
	caps := telemetry.BuildCapabilities
	if cfg != nil && cfg.Path != "" {
		caps = capabilitiesOf(cfg)
		routes := cfg.Routes
		if d := cfg.DefaultRoute; !d.Opaque() {
			// capabilitiesOf counts passthrough for the flows no route matches; under
			// default_route close, or with settings, those are closed or treated by the default
			// route instead, which is then one more route.
			if d.Route != nil {
				routes = append(routes[:len(routes):len(routes)], *d.Route)
			}
			caps = telemetry.Capabilities{}
			seenL, seenD := map[int]bool{}, map[string]bool{}
			for _, r := range routes {
				if l := r.LevelOrDefault(); !seenL[l] {
					seenL[l] = true
					caps.Levels = append(caps.Levels, l)
				}
				if !seenD[r.TLS] {
					seenD[r.TLS] = true
					caps.Dispositions = append(caps.Dispositions, r.TLS)
				}
			}
		}
		caps.Routes = []telemetry.RouteCapability{}
		for _, r := range routes {
			caps.Routes = append(caps.Routes, telemetry.RouteCapability{Name: r.Name, Level: r.LevelOrDefault(),
				StrictMCPHeaders: r.StrictMCPHeaders, AllowUpgrade: r.AllowUpgrade})
		}
	}
	return telemetry.Declare(ms, caps)
}

// capabilitiesOf is what a configuration puts in effect: the levels and dispositions of its
// routes, plus the default route (opaque, level 0) for flows no route matches.
func capabilitiesOf(cfg *config.Config) telemetry.Capabilities {
	var c telemetry.Capabilities
	seenL, seenD := map[int]bool{}, map[string]bool{}
	for _, r := range cfg.Routes {
		if l := r.LevelOrDefault(); !seenL[l] {
			seenL[l] = true
			c.Levels = append(c.Levels, l)
		}
		if !seenD[r.TLS] {
			seenD[r.TLS] = true
			c.Dispositions = append(c.Dispositions, r.TLS)
		}
	}
	if !seenD[config.TLSPassthrough] {
		// Flows no route matches are forwarded untouched: passthrough in the draft's terms.
		c.Dispositions = append(c.Dispositions, config.TLSPassthrough)
	}
	return c
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
	enc.Encode(declaration(cfg))
	return exitOK
}

func newLogger(level string, w io.Writer) *slog.Logger {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		l = slog.LevelInfo
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l}))
}

func cmdRun(args []string, stdout, stderr io.Writer) int {
	cf, ok := parseFlags("run", args, stderr, true)
	if !ok {
		return exitUsage
	}
	cfg, ok := loadConfig(cf, stderr)
	if !ok {
		return exitUsage
	}
	if _, _, err := engine.RoutingFromConfig(cfg, nil); err != nil {
		reportRuleErrors(stderr, err)
		return exitUsage
	}
	// A flow log piped into a reader that quits (`| head`) must not kill the daemon with SIGPIPE
	// and leave its steering installed: the write fails and is reported instead.
	signal.Ignore(syscall.SIGPIPE)
	log := newLogger(cfg.Log.Level, stderr)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	// SIGHUP would otherwise kill the daemon with its steering left in place; reload arrives with
	// the policy issue, until then it is acknowledged and ignored.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)

	// A CPU profile of the whole run, for performance work: MCPINTERCEPT_CPUPROFILE=FILE.
	if f := os.Getenv("MCPINTERCEPT_CPUPROFILE"); f != "" {
		if out, err := os.Create(f); err == nil {
			pprof.StartCPUProfile(out)
			defer func() { pprof.StopCPUProfile(); out.Close() }()
		}
	}
	if err := run(ctx, cfg, log, stdout, hup); err != nil {
		log.Error("stopped", "err", err)
		return exitRuntime
	}
	return exitOK
}

// reload re-reads the configuration on SIGHUP and swaps routes and rule sets without touching
// open flows. Listeners, steering, limits and TLS material keep their start-up values: changing
// those needs a restart, and the log says so. A bad file keeps the running configuration.
func reload(cur *config.Config, eng *engine.Engine, prev engine.CompiledRuleSets, log *slog.Logger) engine.CompiledRuleSets {
	next, err := config.Load(cur.Path, config.Overrides{Mechanism: cur.Mechanism})
	if err != nil {
		log.Error("reload refused: invalid configuration; keeping the running one", "err", err)
		return prev
	}
	routing, sets, err := engine.RoutingFromConfig(next, prev)
	if err != nil {
		log.Error("reload refused: invalid policy; keeping the running one", "err", err)
		return prev
	}
	if usesTerminate(next) && !usesTerminate(cur) {
		log.Warn("reload: terminate routes were added; the CA is loaded at start-up, restart to serve them")
	}
	eng.SetRouting(routing)
	if m := eng.Metrics(); m != nil {
		m.Requests.SetKeep(telemetry.KeepPrefixes(configuredDestinations(next)))
	}
	log.Info("reloaded routes and rules", "routes", len(routing.Routes), "rule_sets", len(sets))
	return sets
}

func run(ctx context.Context, cfg *config.Config, log *slog.Logger, stdout io.Writer, hup <-chan os.Signal) error {
	mech, err := intercept.New(cfg)
	if err != nil {
		return err
	}
	// Bind everything before installing anything, so that a port in use leaves the host untouched.
	lns, err := intercept.Listen(ctx, cfg.Listen.Addresses, cfg.Listen.Port, intercept.Transparent(cfg))
	if err != nil {
		return err
	}
	closeListeners := func() {
		for _, l := range lns {
			l.Close()
		}
	}
	defer closeListeners()

	metrics := telemetry.NewMetrics()
	metrics.Requests.SetKeep(telemetry.KeepPrefixes(configuredDestinations(cfg)))
	var admin *telemetry.Admin
	if cfg.Admin.Listen != "off" {
		admin, err = telemetry.NewAdmin(cfg.Admin.Listen, metrics, func() any { return declaration(cfg) }, log.With("component", "admin"))
		if err != nil {
			return err
		}
		admin.Start()
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			admin.Shutdown(sctx)
		}()
	}

	var flowOut io.Writer = stdout
	switch cfg.Log.Flows {
	case "off":
		flowOut = io.Discard
	case "stdout", "":
	default:
		f, err := os.OpenFile(cfg.Log.Flows, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o640)
		if err != nil {
			return fmt.Errorf("flow log: %w", err)
		}
		defer f.Close()
		flowOut = f
	}
	flows := telemetry.NewFlowLog(flowOut, 8192, log.With("component", "flowlog"), metrics.LogDropped.Inc)
	defer flows.Close()

	routing, sets, err := engine.RoutingFromConfig(cfg, nil)
	if err != nil {
		return err
	}
	tlsOpt := engine.TLSOptions{
		PeekTimeout:      cfg.TLS.PeekTimeout.Duration,
		MaxClientHello:   cfg.TLS.MaxClientHello,
		HandshakeTimeout: cfg.Upstream.HandshakeTimeout.Duration,
	}
	if usesTerminate(cfg) {
		minter, err := loadMinter(cfg, log)
		if err != nil {
			return err
		}
		roots, err := upstreamRoots(cfg)
		if err != nil {
			return err
		}
		tlsOpt.Leaves = minter
		tlsOpt.Upstream = tlsmitm.OriginateConfig{Roots: roots, HandshakeTimeout: cfg.Upstream.HandshakeTimeout.Duration}
	}

	eng := engine.New(engine.Options{
		Mechanism: string(cfg.Mechanism),
		Steering:  mech,
		Dialer:    intercept.BypassDialer(cfg.Steering.BypassMark, cfg.Limits.ConnectTimeout.Duration),
		Limits: engine.Limits{
			MaxFlows:          cfg.Limits.MaxFlows,
			MaxFlowsPerClient: cfg.Limits.MaxFlowsPerClient,
			IdleTimeout:       cfg.Limits.IdleTimeout.Duration,
			ConnectTimeout:    cfg.Limits.ConnectTimeout.Duration,
			BodyTimeout:       cfg.Limits.BodyTimeout.Duration,
		},
		Flows:   flows,
		Metrics: metrics,
		Log:     log.With("component", "engine"),
		Routing: routing,
		TLS:     tlsOpt,
		HTTP: level1.Options{
			Limits:        level1.Limits{MaxHeaderBytes: cfg.HTTP.MaxHeaderBytes},
			HeaderTimeout: cfg.HTTP.HeaderTimeout.Duration,
		},
	})

	if err := mech.Install(ctx); err != nil {
		return fmt.Errorf("install %s steering: %w", cfg.Mechanism, err)
	}
	defer func() {
		if err := mech.Remove(context.Background()); err != nil {
			log.Error("remove steering; run `mcpintercept cleanup`", "err", err)
			return
		}
		log.Info("steering removed", "mechanism", cfg.Mechanism)
	}()

	serveCtx, stopServe := context.WithCancel(context.Background())
	defer stopServe()
	served := make(chan struct{}, len(lns))
	var addrs []string
	for _, l := range lns {
		addrs = append(addrs, l.Addr().String())
		go func(l *net.TCPListener) {
			if err := eng.Serve(serveCtx, l); err != nil {
				log.Error("serve", "listener", l.Addr().String(), "err", err)
			}
			served <- struct{}{}
		}(l)
	}
	if admin != nil {
		admin.SetReady(true)
	}
	readyArgs := []any{"mechanism", cfg.Mechanism, "listen", strings.Join(addrs, ","),
		"destinations", len(cfg.Intercept.Destinations), "port_ranges", len(cfg.Intercept.Ports)}
	if admin != nil {
		readyArgs = append(readyArgs, "admin", admin.Addr().String())
	}
	log.Info("ready", readyArgs...)

	for waiting := true; waiting; {
		select {
		case <-ctx.Done():
			waiting = false
		case <-hup:
			sets = reload(cfg, eng, sets, log)
		}
	}

	// Orderly stop: not ready, stop accepting, drain, then remove steering (the deferred Remove).
	// Removing the TPROXY rules before the drain would strand the packets of open flows.
	if admin != nil {
		admin.SetReady(false)
	}
	log.Info("stopping: no new flows; draining", "open_flows", eng.Active(), "deadline", cfg.Limits.DrainTimeout.Duration)
	stopServe()
	closeListeners()
	for range lns {
		<-served
	}
	dctx, cancel := context.WithTimeout(context.Background(), cfg.Limits.DrainTimeout.Duration)
	defer cancel()
	if forced := eng.Drain(dctx); forced > 0 {
		log.Warn("drain deadline reached; closed open flows", "closed", forced)
	}
	return nil
}

// configuredDestinations are the prefixes the operator named (steered destinations and route
// matches): their request series are reserved a share of the metric bound that a flood of
// first-come values cannot take.
func configuredDestinations(cfg *config.Config) []netip.Prefix {
	out := append([]netip.Prefix(nil), cfg.Intercept.Destinations...)
	for _, r := range cfg.Routes {
		out = append(out, r.Match.Destinations...)
	}
	return out
}
