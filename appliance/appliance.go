// Package appliance wires one running appliance from a configuration: steering mechanism,
// listeners, metrics and admin endpoint, flow log, routing, TLS material and the engine, and runs
// its life cycle (start, reload, drain, remove steering). `run`, `exec` and tests build it the
// same way; the command line only parses flags and calls it.
package appliance

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mcpintercept/auth"
	"net"
	"net/netip"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"mcpintercept/admin"
	"mcpintercept/audit"
	"mcpintercept/chain"
	"mcpintercept/config"
	"mcpintercept/engine"
	"mcpintercept/exchange"
	"mcpintercept/federation"
	"mcpintercept/integrity"
	"mcpintercept/intercept"
	"mcpintercept/intercept/upstream"
	"mcpintercept/inventory"
	"mcpintercept/origin"
	"mcpintercept/pki"
	"mcpintercept/telemetry"
	"mcpintercept/tlsmitm"
	"mcpintercept/tracing"
)

// ErrNeedsLinux is what New (and `run`, `exec`, `cleanup`) return on other systems.
var ErrNeedsLinux = errors.New("needs Linux (netfilter, eBPF, network namespaces)")

// Supported says whether cmd (a subcommand name, for the message) can run on this system:
// "run needs Linux (netfilter, eBPF, network namespaces)" elsewhere.
func Supported(cmd string) error {
	if err := checkPlatform(); err != nil {
		return fmt.Errorf("%s %w", cmd, err)
	}
	return nil
}

// ConfigError is a configuration New refused before opening anything (a rule set that does not
// compile): the command line reports it as a configuration error (exit 2).
type ConfigError struct{ Err error }

func (e *ConfigError) Error() string { return e.Err.Error() }
func (e *ConfigError) Unwrap() error { return e.Err }

// Options are what the caller decides instead of the configuration. The zero value runs the
// configuration as `run` does.
type Options struct {
	// Stdout receives the flow log when log.flows is "stdout" (or unset); nil discards it (exec:
	// stdout belongs to the command).
	Stdout io.Writer
	// Log is the appliance's logger; each component gets a child. Nil discards.
	Log *slog.Logger
	// Mechanism replaces the steering the configuration selects (exec steers a cgroup of its
	// own); nil: NewSteering(cfg).
	Mechanism intercept.Mechanism
	// Listeners, when set, are served instead of binding listen.addresses and listen.port (exec
	// binds ephemeral loopback ports before it builds its mechanism). The appliance closes them.
	Listeners []*net.TCPListener
	// Routing replaces the configuration's routes and rule sets (exec's zero-config route); Reload
	// is then refused.
	Routing *engine.Routing
	// Terminate loads the CA and the upstream roots even when no configured route terminates
	// (a Routing whose auto routes terminate).
	Terminate bool
	// PeekTimeout replaces tls.peek_timeout when positive.
	PeekTimeout time.Duration
	// DrainTimeout replaces limits.drain_timeout when positive.
	DrainTimeout time.Duration
	// NoAdmin leaves the admin endpoint off whatever admin.listen says.
	NoAdmin bool
	// Observe, when set, also receives every flow record (exec's live lines and summary).
	Observe engine.FlowSink
	// HoldReady keeps /readyz at 503 after Start until SetReady (the node agent: ready once it
	// has adopted its pods).
	HoldReady bool
	// Quiet leaves out the life-cycle lines (ready, stopping, steering removed): exec prints its
	// own. Warnings and errors are logged regardless.
	Quiet bool
}

// Appliance is one wired appliance. New binds and loads everything; Start installs the steering
// and serves; Stop drains and removes the steering. Stop must be called whatever happened after a
// successful New.
type Appliance struct {
	cfg  *config.Config
	opt  Options
	log  *slog.Logger
	mech intercept.Mechanism
	// jwksLog is every route's token checks' (and kept across reloads): an issuer whose keys
	// cannot be read is logged once a minute, not once per route.
	jwksLog *auth.JWKSLog
	lns     []*net.TCPListener

	metrics  *telemetry.Metrics
	admin    *admin.Server
	flows    *telemetry.FlowLog      // nil when the flow log is off
	flowFile *telemetry.RotatingFile // log.flows when it is a file
	eng      *engine.Engine
	caFile   string           // the CA certificate, when it is loaded (terminate routes can be served)
	opened   intercept.Opener // the mechanism's own resources (dns: VIP table, DNS sockets)
	// audit is the durable audit store, open while some route is audited; auditCfg the section
	// it was opened with.
	audit    atomic.Pointer[audit.Store]
	auditCfg config.AuditConfig
	// tools is the tool-integrity guard, open from New to Stop when some route pins
	// definitions; toolsCfg the section it was opened with; adminToken the SHA-256 of the token
	// POST /tools/approve requires.
	tools      atomic.Pointer[integrity.Guard]
	toolsCfg   config.ToolIntegrityConfig
	adminToken []byte
	// tracer exports spans over OTLP (nil: telemetry.otlp off); telemetryCfg the section it was
	// opened with.
	tracer       *tracing.Tracer
	telemetryCfg config.TelemetryConfig
	// live is the live view (admin.go; its endpoints are package admin's): the hub every record also goes to, and the admin
	// token GET /observe and /ui require.
	live *liveView
	// inventory is the MCP servers seen (GET /inventory; nil: no admin listener to ask it).
	inventory  *inventory.Table
	stopHealth func()
	// federation is the aggregate endpoint (nil: federation off).
	federation *federation.Service
	// running is the configuration the last reload applied (nil: cfg), for /config_dump.
	running atomic.Pointer[config.Config]

	mu        sync.Mutex // orders Reload, Start and Stop
	sets      CompiledRuleSets
	keep      []netip.Prefix // the destinations the request series keep a share for
	installed bool
	stopped   bool
	stopServe context.CancelFunc
	serveCtx  context.Context // what listeners are served under, from Start to Stop
	served    chan struct{}
	extra     extraListeners // ServeSource's listeners (the node agent's pods)
	inbound   *inbound       // Sidecar mode (nil when the inbound section is off)
	ready     chan struct{}
}

// New wires an appliance from cfg: it compiles the routing first (a *ConfigError, nothing
// opened), then binds the listeners and the admin endpoint, opens the flow log and loads the TLS
// material, so that nothing is installed on the host before everything that can fail has.
func New(ctx context.Context, cfg *config.Config, opt Options) (_ *Appliance, err error) {
	if err := checkPlatform(); err != nil {
		return nil, err
	}
	log := opt.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	a := &Appliance{cfg: cfg, opt: opt, log: log, lns: opt.Listeners, ready: make(chan struct{}),
		jwksLog: auth.NewJWKSLog(log.With("component", "tokens"))}
	defer func() {
		if err != nil {
			a.release()
		}
	}()

	routing := opt.Routing
	if routing == nil {
		if routing, a.sets, err = routingFromConfig(cfg, nil, a.jwksLog); err != nil {
			return nil, &ConfigError{Err: err}
		}
	}
	for _, w := range cfg.Warnings() {
		log.Warn("configuration: " + w)
	}

	steering := SteeringOptions(cfg)
	a.mech = opt.Mechanism
	if a.mech == nil {
		if a.mech, err = intercept.New(steering); err != nil {
			return nil, err
		}
	}
	// Bind everything before installing anything, so that a port in use leaves the host untouched.
	if a.lns == nil {
		if a.lns, err = intercept.Listen(ctx, cfg.Listen.Addresses, cfg.Listen.Port, intercept.Transparent(steering)); err != nil {
			return nil, err
		}
	}

	if err := a.openInbound(ctx, cfg); err != nil {
		return nil, err
	}

	a.metrics = telemetry.NewMetrics()
	a.live = newLive(a)
	a.setKeep(cfg)
	if o, ok := a.mech.(intercept.Opener); ok {
		if err := o.Open(ctx, a.metrics.Registry, log.With("component", "dns")); err != nil {
			return nil, err
		}
		a.opened = o
	}
	// Every mechanism's upstream dials pass upstream_deny; dns dials the name behind a VIP.
	dialer, err := intercept.NewUpstreamDialer(a.mech, cfg.UpstreamDeny,
		upstream.BypassDialer(cfg.Steering.BypassMark, cfg.Limits.ConnectTimeout.Duration),
		a.metrics.Registry, log.With("component", "dialer"))
	if err != nil {
		return nil, err
	}
	if !opt.NoAdmin && cfg.Admin.Listen != "off" && cfg.Admin.Listen != "" {
		a.admin, err = admin.New(cfg.Admin.Listen, a.metrics, func() any { return Declaration(cfg) }, log.With("component", "admin"))
		if err != nil {
			return nil, err
		}
		a.admin.AllowHosts(cfg.Admin.Hosts...)
		a.inventory = inventory.New(inventory.Limits{})
		// Served from now on (metrics, health); /readyz says ready once the steering is in place
		// and the audit store (when a route is audited) is writable.
		a.serveAdmin()
		a.admin.Start()
	}

	if err := a.openFlowLog(); err != nil {
		return nil, err
	}
	// Before the engine exists, so no flow is served on an audited route without its store.
	if err := a.openAudit(cfg, routing); err != nil {
		return nil, err
	}
	// Before the engine too: a route that pins definitions never serves a list unchecked.
	if err := a.openTools(cfg, routing); err != nil {
		return nil, err
	}

	if err := a.openTracer(ctx, cfg); err != nil {
		return nil, err
	}
	// After the audit store and the tracer, which every federated call uses.
	if err := a.openFederation(cfg); err != nil {
		return nil, err
	}

	tlsOpt := engine.TLSOptions{
		PeekTimeout:      cfg.TLS.PeekTimeout.Duration,
		MaxClientHello:   cfg.TLS.MaxClientHello,
		HandshakeTimeout: cfg.Upstream.HandshakeTimeout.Duration,
	}
	if opt.PeekTimeout > 0 {
		tlsOpt.PeekTimeout = opt.PeekTimeout
	}
	if opt.Terminate || UsesTerminate(cfg) {
		minter, err := loadMinter(cfg, log)
		if err != nil {
			return nil, err
		}
		roots, err := upstreamRoots(cfg)
		if err != nil {
			return nil, err
		}
		tlsOpt.Leaves = minter
		tlsOpt.Upstream = tlsmitm.OriginateConfig{Roots: roots, HandshakeTimeout: cfg.Upstream.HandshakeTimeout.Duration}
		a.caFile = filepath.Join(cfg.CA.Dir, pki.CertFile)
	}

	deps := chain.Deps{Tools: a.tools.Load(), Tracer: a.tracer}
	if a.metrics.Registry != nil {
		deps.Registry = a.metrics.Registry // a nil *Registry must not become a non-nil Registerer
	}
	engOpt := engine.Options{
		Mechanism: string(a.mech.Name()),
		Steering:  a.mech,
		Dialer:    dialer,
		Limits:    limitsOf(cfg),
		Flows:     a.sink(),
		Records:   a.recorder(), // the flow log and Options.Observe (Flows), and the live view
		Metrics:   a.metrics,
		Log:       log.With("component", "engine"),
		Routing:   routing,
		TLS:       tlsOpt,
		HTTP:      httpOptionsOf(cfg),
		// The chain every HTTP-aware connection runs through, with what its stages share.
		Stages:   chain.Stages(deps),
		ConnSpan: chain.ConnSpan(deps),
	}
	if a.inventory != nil {
		// MCP on flows no route inspects, from their first bytes (after forwarding them).
		engOpt.OpaqueHead = a.inventory
	}
	a.eng = engine.New(engOpt)
	return a, nil
}

// limitsOf is the engine's share of the configuration's limits.
func limitsOf(cfg *config.Config) engine.Limits {
	return engine.Limits{
		MaxFlows:          cfg.Limits.MaxFlows,
		MaxFlowsPerClient: cfg.Limits.MaxFlowsPerClient,
		IdleTimeout:       cfg.Limits.IdleTimeout.Duration,
		ConnectTimeout:    cfg.Limits.ConnectTimeout.Duration,
		BodyTimeout:       cfg.Limits.BodyTimeout.Duration,
	}
}

// httpOptionsOf is the HTTP framing's share of the configuration.
func httpOptionsOf(cfg *config.Config) exchange.Options {
	return exchange.Options{
		Limits:        exchange.Limits{MaxHeaderBytes: cfg.HTTP.MaxHeaderBytes},
		HeaderTimeout: cfg.HTTP.HeaderTimeout.Duration,
	}
}

// openFlowLog opens log.flows: "off", "stdout" (Options.Stdout) or a file appended to, rotated
// by size (log.flows_max_size, log.flows_max_files) and reopened by ReopenFlowLog.
func (a *Appliance) openFlowLog() error {
	var out io.Writer
	switch l := a.cfg.Log; l.Flows {
	case config.Off:
	case config.FlowsStdout, "":
		out = a.opt.Stdout
	default:
		f, err := telemetry.OpenRotatingFile(l.Flows, l.FlowsMaxSize, l.FlowsMaxFiles, a.log.With("component", "flowlog"))
		if err != nil {
			return fmt.Errorf("flow log: %w", err)
		}
		a.flowFile, out = f, f
	}
	if out != nil {
		a.flows = telemetry.NewFlowLog(out, 8192, a.log.With("component", "flowlog"), a.metrics.LogDropped.Inc)
	}
	return nil
}

// ReopenFlowLog closes and reopens the flow log file (SIGUSR1, sent by logrotate's postrotate
// after it renamed the file): the records logged before go to the renamed file, the later ones
// to a new file at log.flows; none is lost. Without a flow log file it does nothing.
func (a *Appliance) ReopenFlowLog() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.flows == nil || a.flowFile == nil {
		a.log.Info("flow log: not a file; nothing to reopen", "flows", a.cfg.Log.Flows)
		return nil
	}
	if err := a.flows.Reopen(); err != nil {
		a.log.Error("flow log: reopen failed; records are dropped until the file opens (retried every second)", "file", a.flowFile.Path(), "err", err)
		return fmt.Errorf("reopen flow log: %w", err)
	}
	a.log.Info("flow log reopened", "file", a.flowFile.Path())
	return nil
}

// sink is where the engine writes records: the flow log, Options.Observe, both or neither.
func (a *Appliance) sink() engine.FlowSink {
	switch {
	case a.flows != nil && a.opt.Observe != nil:
		return tee{a.opt.Observe, a.flows}
	case a.flows != nil:
		return a.flows
	case a.opt.Observe != nil:
		return a.opt.Observe
	}
	return nil
}

type tee [2]engine.FlowSink

func (t tee) Write(r telemetry.FlowRecord) { t[0].Write(r); t[1].Write(r) }

// Start installs the steering and serves every listener; it logs "ready" (unless Quiet) and
// /readyz turns ready. On error nothing stays installed; call Stop to release the rest.
func (a *Appliance) Start(ctx context.Context) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.stopped {
		return errors.New("appliance stopped")
	}
	if a.installed {
		return errors.New("appliance already started")
	}
	if err := a.mech.Install(ctx); err != nil {
		return fmt.Errorf("install %s steering: %w", a.mech.Name(), err)
	}
	a.installed = true

	// Flows are not tied to ctx: stopping must leave open flows to drain (Stop).
	serveCtx, stop := context.WithCancel(context.Background())
	a.stopServe, a.serveCtx = stop, serveCtx
	a.served = make(chan struct{}, len(a.lns))
	for _, l := range a.lns {
		go func(l *net.TCPListener) {
			if err := a.eng.Serve(serveCtx, l); err != nil {
				a.log.Error("serve", "listener", l.Addr().String(), "err", err)
			}
			a.served <- struct{}{}
		}(l)
	}
	if err := a.startInbound(ctx); err != nil {
		a.removeInbound(context.WithoutCancel(ctx))
		return err
	}
	if a.admin != nil && !a.opt.HoldReady {
		a.admin.SetReady(true)
	}
	args := []any{"mechanism", a.mech.Name(), "listen", strings.Join(a.listenAddrs(), ","),
		"destinations", len(a.cfg.Intercept.Destinations), "port_ranges", len(a.cfg.Intercept.Ports)}
	if a.admin != nil {
		args = append(args, "admin", a.admin.Addr().String())
	}
	a.info("ready", args...)
	close(a.ready)
	// systemd hears READY=1 now only when the audit store is writable; otherwise from the health
	// watch, once it is.
	a.stopHealth = a.watchHealth()
	return nil
}

// SetReady turns /readyz to 200 (Options.HoldReady).
func (a *Appliance) SetReady() {
	if a.admin != nil {
		a.admin.SetReady(true)
	}
}

// Ready is closed once Start has installed the steering and the listeners serve.
func (a *Appliance) Ready() <-chan struct{} { return a.ready }

// Addrs are the listeners' addresses.
func (a *Appliance) Addrs() []netip.AddrPort {
	var out []netip.AddrPort
	for _, l := range a.lns {
		if ap, err := origin.AddrPortOf(l.Addr()); err == nil {
			out = append(out, ap)
		}
	}
	return out
}

func (a *Appliance) listenAddrs() []string {
	var s []string
	for _, l := range a.lns {
		s = append(s, l.Addr().String())
	}
	return s
}

// AdminAddr is the admin endpoint's address, nil when it is off.
func (a *Appliance) AdminAddr() net.Addr {
	if a.admin == nil {
		return nil
	}
	return a.admin.Addr()
}

// CAFile is the appliance CA's certificate file when TLS is terminated, "" otherwise (exec makes
// its command trust it).
func (a *Appliance) CAFile() string { return a.caFile }

// Engine is the engine flows run in (tests read its state).
func (a *Appliance) Engine() *engine.Engine { return a.eng }

// Metrics is the appliance's metric set.
func (a *Appliance) Metrics() *telemetry.Metrics { return a.metrics }

// Reload re-reads the configuration file (path; "" for the one it started from, with the same
// mechanism override) and swaps routes and rule sets without touching open flows. Listeners,
// steering, limits and TLS material keep their start-up values: changing those needs a restart,
// and the log says so. A file that does not load or compile keeps the running routing; the error
// is logged and returned.
func (a *Appliance) Reload(path string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	defer sdReloading()()
	if a.opt.Routing != nil {
		err := errors.New("routing was fixed at start-up")
		a.log.Error("reload refused; keeping the running configuration", "err", err)
		return err
	}
	if path == "" {
		path = a.cfg.Path
	}
	next, err := config.Load(path, config.Overrides{Mechanism: a.cfg.Mechanism})
	if err != nil {
		a.log.Error("reload refused: invalid configuration; keeping the running one", "err", err)
		return fmt.Errorf("reload refused: invalid configuration: %w", err)
	}
	routing, sets, err := routingFromConfig(next, a.sets, a.jwksLog)
	if err != nil {
		a.log.Error("reload refused: invalid policy; keeping the running one", "err", err)
		return fmt.Errorf("reload refused: invalid policy: %w", err)
	}
	if a.audit.Load() != nil && next.Audit != a.auditCfg {
		a.log.Warn("reload: the audit section changed; the store keeps the settings it opened with, restart to apply them")
	}
	if err := a.openAudit(next, routing); err != nil {
		a.log.Error("reload refused: audit store; keeping the running configuration", "err", err)
		return fmt.Errorf("reload refused: %w", err)
	}
	a.reloadTools(next, routing)
	if telemetryChanged(a.telemetryCfg, next.Telemetry) {
		a.log.Warn("reload: the telemetry section changed; the OTLP exporter keeps the settings it started with, needs a restart to apply them")
	}
	if !slices.Equal(next.UpstreamDeny, a.cfg.UpstreamDeny) {
		a.log.Warn("reload: upstream_deny changed; the dialer keeps the list it started with, restart to apply it")
	}
	if !reflect.DeepEqual(next.Inbound, a.cfg.Inbound) {
		a.log.Warn("reload: the inbound section changed; Sidecar steering, its listener and the server's certificate keep their start-up values, restart to apply them")
	}
	if UsesTerminate(next) && a.caFile == "" {
		a.log.Warn("reload: terminate routes were added; the CA is loaded at start-up, restart to serve them")
	}
	a.eng.SetRouting(routing)
	a.reloadFederation(next, sets)
	a.setKeep(next)
	a.sets = sets
	a.running.Store(next)
	a.log.Info("reloaded routes and rules", "routes", len(routing.Routes), "rule_sets", len(sets))
	return nil
}

// Stop is the orderly stop: not ready, stop accepting, drain open flows until the drain deadline
// (limits.drain_timeout, within ctx), then remove the steering (removing TPROXY rules before the
// drain would strand the packets of open flows), then close the flow log and the admin endpoint.
// It is idempotent; the error is the steering's removal (logged too).
func (a *Appliance) Stop(ctx context.Context) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.stopped {
		return nil
	}
	a.stopped = true
	if a.stopHealth != nil {
		a.stopHealth()
	}
	sdStopping()
	if a.admin != nil {
		a.admin.SetReady(false)
	}
	drain := a.cfg.Limits.DrainTimeout.Duration
	if a.opt.DrainTimeout > 0 {
		drain = a.opt.DrainTimeout
	}
	if a.stopServe != nil {
		a.info("stopping: no new flows; draining", "open_flows", a.eng.Active(), "deadline", drain)
		a.stopServe()
	}
	a.closeListeners()
	if a.served != nil {
		for range a.lns {
			<-a.served
		}
	}
	a.closeExtra()
	if a.eng != nil {
		dctx, cancel := context.WithTimeout(ctx, drain)
		if forced := a.eng.Drain(dctx); forced > 0 {
			a.log.Warn("drain deadline reached; closed open flows", "closed", forced)
		}
		cancel()
	}
	// The federation's calls write their terminal records before the store closes.
	a.stopFederation(ctx)
	// Only now: the drain has written every flow's outcome records (uncertain for the flows its
	// deadline cut), and the final checkpoint covers them.
	a.closeAudit(ctx)
	a.closeTools()
	a.closeTracer(ctx)
	var err error
	if a.installed {
		if err = a.mech.Remove(context.WithoutCancel(ctx)); err != nil {
			a.log.Error("remove steering; run `mcpintercept cleanup`", "err", err)
			err = fmt.Errorf("remove %s steering: %w", a.mech.Name(), err)
		} else {
			a.info("steering removed", "mechanism", a.mech.Name())
		}
		err = errors.Join(err, a.removeInbound(context.WithoutCancel(ctx)))
	}
	a.release()
	return err
}

// info logs a life-cycle line unless Options.Quiet.
func (a *Appliance) info(msg string, args ...any) {
	if !a.opt.Quiet {
		a.log.Info(msg, args...)
	}
}

// release closes what New opened (the steering aside).
func (a *Appliance) release() {
	a.stopFederation(context.Background())
	a.closeAudit(context.Background())
	a.closeTools()
	a.closeTracer(context.Background())
	if a.flows != nil {
		a.flows.Close()
		a.flows = nil
	}
	if a.flowFile != nil {
		a.flowFile.Close()
		a.flowFile = nil
	}
	a.closeLive()
	if a.admin != nil {
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		a.admin.Shutdown(sctx)
		cancel()
		a.admin = nil
	}
	a.closeListeners()
	a.closeInbound()
	if a.opened != nil {
		if err := a.opened.Close(); err != nil {
			a.log.Warn("close "+string(a.mech.Name()), "err", err)
		}
		a.opened = nil
	}
}

func (a *Appliance) closeListeners() {
	for _, l := range a.lns {
		l.Close()
	}
}

// setKeep reserves a share of the request series for cfg's configured destinations.
func (a *Appliance) setKeep(cfg *config.Config) {
	a.keep = configuredDestinations(cfg)
	a.metrics.Requests.SetKeep(telemetry.KeepPrefixes(a.keep))
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
