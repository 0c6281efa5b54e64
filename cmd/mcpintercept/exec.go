package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"mcpintercept/config"
	"mcpintercept/engine"
	"mcpintercept/intercept"
	"mcpintercept/level1"
	"mcpintercept/pki"
	"mcpintercept/telemetry"
	"mcpintercept/tlsmitm"
)

// execSink prints a live line per request on stderr, keeps the summary, and passes records on to
// the configured flow log (a file; stdout belongs to the command). Lines go through a bounded
// queue: a terminal paused with Ctrl-S must not stall the command's traffic.
type execSink struct {
	summary telemetry.Summary
	lines   chan string
	done    chan struct{}
	next    engine.FlowSink
}

func newExecSink(w io.Writer) *execSink {
	s := &execSink{lines: make(chan string, 4096), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		for l := range s.lines {
			fmt.Fprintln(w, l)
		}
	}()
	return s
}

func (s *execSink) Write(r telemetry.FlowRecord) {
	select {
	case s.lines <- telemetry.LiveLine(r):
	default: // dropped; the summary still counts it
	}
	s.summary.Add(r)
	if s.next != nil {
		s.next.Write(r)
	}
}

// close prints what is queued; Write must not be called afterwards.
func (s *execSink) close() { close(s.lines); <-s.done }

// cmdExec is the zero-config dev-host mode: `mcpintercept exec [--config FILE] [--level 1]
// [--user NAME|UID] -- CMD ARGS...` runs CMD in a cgroup of its own whose TCP connects eBPF steers
// to this process. CMD runs as the user who ran sudo (SUDO_UID), or the --user given; as root only
// when root ran exec directly or --user root says so.
func cmdExec(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("exec", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfgPath := fs.String("config", "", "use this file's routes, rules, CA and upstream trust (mechanism forced to ebpf)")
	level := fs.Int("level", 1, "awareness level for the zero-config route (1; level 2 is not in this build)")
	userFlag := fs.String("user", "", "run the command as `NAME|UID` (default: the user who ran sudo, from SUDO_UID; --user root to run it as root)")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	argv := fs.Args()
	if len(argv) == 0 {
		fmt.Fprintln(stderr, "usage: mcpintercept exec [--config FILE] [--level 1] [--user NAME|UID] -- CMD [ARGS...]")
		return exitUsage
	}
	if *level != 1 {
		fmt.Fprintf(stderr, "mcpintercept exec: --level %d is not available in this build (only 1)\n", *level)
		return exitUsage
	}
	if os.Geteuid() != 0 {
		fmt.Fprintln(stderr, "mcpintercept exec: needs root (eBPF programs, cgroups); try: sudo mcpintercept exec -- "+strings.Join(argv, " "))
		return exitUsage
	}
	userSet := false
	fs.Visit(func(f *flag.Flag) { userSet = userSet || f.Name == "user" })
	who, err := resolveExecUser(*userFlag, userSet, os.Getenv, os.Geteuid(), systemUsers)
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
		cfg = c
	} else {
		cfg = config.Default(config.EBPF)
	}
	log := newLogger(cfg.Log.Level, stderr).With("mode", "exec")
	code, err := execRun(cfg, *cfgPath == "", argv, who, stderr, log)
	if err != nil {
		fmt.Fprintf(stderr, "mcpintercept exec: %v\n", err)
		if code == 0 {
			code = exitRuntime
		}
	}
	return code
}

func execRun(cfg *config.Config, zeroConfig bool, argv []string, who execIdentity, stderr io.Writer, log *slog.Logger) (int, error) {
	ctx := context.Background()
	root, _, err := intercept.Cgroup2Mount()
	if err != nil {
		return 0, fmt.Errorf("cgroup v2: %w", err)
	}
	cg, err := intercept.NewCgroup(root)
	if err != nil {
		return 0, fmt.Errorf("create cgroup: %w", err)
	}
	defer func() {
		if err := intercept.RemoveCgroup(cg); err != nil {
			log.Warn("remove cgroup; `mcpintercept cleanup` will", "cgroup", cg, "err", err)
		}
	}()

	// Ephemeral loopback listeners: exec never collides with a daemon on the same host.
	lns, err := intercept.Listen(ctx, []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("::1")}, 0, false)
	if err != nil {
		return 0, err
	}
	defer func() {
		for _, l := range lns {
			l.Close()
		}
	}()
	opts := intercept.EBPFOptions{CgroupPath: cg, Destinations: cfg.Intercept.Destinations, BypassMark: cfg.Steering.BypassMark}
	for _, p := range cfg.Intercept.Ports {
		opts.Ports = append(opts.Ports, intercept.EBPFPortRange{From: p.From, To: p.To})
	}
	for _, l := range lns {
		ap := l.Addr().(*net.TCPAddr).AddrPort()
		if ap.Addr().Is4() {
			opts.ListenV4 = ap
		} else {
			opts.ListenV6 = ap
		}
	}
	mech, err := intercept.NewEBPF(opts)
	if err != nil {
		return 0, err
	}

	var routing *engine.Routing
	var caFile string
	tlsOpt := engine.TLSOptions{PeekTimeout: cfg.TLS.PeekTimeout.Duration, MaxClientHello: cfg.TLS.MaxClientHello,
		HandshakeTimeout: cfg.Upstream.HandshakeTimeout.Duration}
	terminate := zeroConfig || usesTerminate(cfg)
	if zeroConfig {
		// Everything but loopback: TLS terminated, HTTP read at Level 1, the rest opaque.
		routing = &engine.Routing{Routes: []*engine.Route{{Name: "exec", TLS: engine.Auto, Level: 1, OnMismatch: "passthrough"}}}
		// A client that speaks second (SSH, SMTP) waits this long before it is forwarded opaque.
		tlsOpt.PeekTimeout = 500 * time.Millisecond
	} else {
		routing, _, err = engine.RoutingFromConfig(cfg, nil)
		if err != nil {
			return 0, err
		}
	}
	if terminate {
		minter, err := loadMinter(cfg, log)
		if err != nil {
			return 0, err
		}
		roots, err := upstreamRoots(cfg)
		if err != nil {
			return 0, err
		}
		tlsOpt.Leaves = minter
		tlsOpt.Upstream = tlsmitm.OriginateConfig{Roots: roots, HandshakeTimeout: cfg.Upstream.HandshakeTimeout.Duration}
		caFile = filepath.Join(cfg.CA.Dir, pki.CertFile)
	}

	metrics := telemetry.NewMetrics()
	sink := newExecSink(stderr)
	if cfg.Log.Flows != "stdout" && cfg.Log.Flows != "off" && cfg.Log.Flows != "" {
		f, err := os.OpenFile(cfg.Log.Flows, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o640)
		if err != nil {
			return 0, fmt.Errorf("flow log: %w", err)
		}
		defer f.Close()
		fl := telemetry.NewFlowLog(f, 8192, log, metrics.LogDropped.Inc)
		defer fl.Close()
		sink.next = fl
	}
	eng := engine.New(engine.Options{
		Mechanism: string(config.EBPF),
		Steering:  mech,
		Dialer:    intercept.BypassDialer(cfg.Steering.BypassMark, cfg.Limits.ConnectTimeout.Duration),
		Limits: engine.Limits{MaxFlows: cfg.Limits.MaxFlows, MaxFlowsPerClient: cfg.Limits.MaxFlowsPerClient,
			IdleTimeout: cfg.Limits.IdleTimeout.Duration, ConnectTimeout: cfg.Limits.ConnectTimeout.Duration,
			BodyTimeout: cfg.Limits.BodyTimeout.Duration},
		Flows: sink, Metrics: metrics, Log: log.With("component", "engine"),
		Routing: routing, TLS: tlsOpt,
		HTTP: level1.Options{Limits: level1.Limits{MaxHeaderBytes: cfg.HTTP.MaxHeaderBytes}, HeaderTimeout: cfg.HTTP.HeaderTimeout.Duration},
	})

	if err := mech.Install(ctx); err != nil {
		return 0, fmt.Errorf("install eBPF steering: %w", err)
	}
	removed := false
	remove := func() {
		if !removed {
			removed = true
			if err := mech.Remove(context.Background()); err != nil {
				log.Error("remove eBPF steering", "err", err)
			}
		}
	}
	defer remove()

	serveCtx, stopServe := context.WithCancel(ctx)
	defer stopServe()
	served := make(chan struct{}, len(lns))
	for _, l := range lns {
		go func(l *net.TCPListener) { eng.Serve(serveCtx, l); served <- struct{}{} }(l)
	}

	env := setEnv(os.Environ(), who.Env...)
	if terminate {
		var trustDir string
		env, trustDir, err = trustEnv(env, caFile, who.Cred)
		if trustDir != "" {
			defer os.RemoveAll(trustDir)
		}
		if err != nil {
			return 0, err
		}
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = env
	if err := startInCgroup(cmd, who.Cred, cg); err != nil {
		return 127, err
	}
	as := ""
	if who.Cred != nil {
		as = " as " + who.Name
	}
	fmt.Fprintf(stderr, "mcpintercept: steering the TCP connects of %q (pid %d%s, cgroup %s) to %s\n", strings.Join(argv, " "), cmd.Process.Pid, as, cg, listenerList(lns))

	// Ctrl-C and Ctrl-\ from the terminal reach the command directly (same process group); exec
	// only has to survive them and wait. SIGTERM and SIGHUP sent to exec are passed on.
	signal.Ignore(syscall.SIGINT, syscall.SIGQUIT, syscall.SIGPIPE)
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	var werr error
	for done := false; !done; {
		select {
		case s := <-sigs:
			cmd.Process.Signal(s) // the command decides what a signal means
		case werr = <-waited:
			done = true
		}
	}

	// The command is gone: let its last flows finish, then stop.
	stopServe()
	for _, l := range lns {
		l.Close()
	}
	for range lns {
		<-served
	}
	dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	eng.Drain(dctx)
	cancel()
	remove()
	sink.close()
	sink.summary.WriteTable(stderr)

	code := 0
	var ee *exec.ExitError
	if errors.As(werr, &ee) {
		code = ee.ExitCode()
		if code < 0 { // killed by a signal: the shell convention
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				code = 128 + int(ws.Signal())
			}
		}
	} else if werr != nil {
		return 1, werr
	}
	return code, nil
}

// startInCgroup starts cmd as cred (nil: as exec itself) directly inside the cgroup at path
// (clone3 CLONE_INTO_CGROUP): there is no moment in which it runs unsteered. The clone is done by
// exec (root); the child then takes cred's groups, gid and uid before it executes the command.
func startInCgroup(cmd *exec.Cmd, cred *syscall.Credential, cgroup string) error {
	cgFD, err := os.Open(cgroup)
	if err != nil {
		return fmt.Errorf("open cgroup: %w", err)
	}
	defer cgFD.Close()
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(cgFD.Fd()), Credential: cred}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", cmd.Args[0], err)
	}
	return nil
}

func listenerList(lns []*net.TCPListener) string {
	var s []string
	for _, l := range lns {
		s = append(s, l.Addr().String())
	}
	return strings.Join(s, ", ")
}

// trustEnv makes the usual TLS stacks trust the appliance CA in the child: OpenSSL, Go, curl, git
// and Python read a bundle that replaces the system store, so they get the system bundle plus the
// CA; Node adds NODE_EXTRA_CA_CERTS to its own store, so it gets the CA (plus whatever extra file
// the user had set). The files go to a fresh 0700 directory that belongs to the command's user
// (cred; nil: exec's own), removed by the caller at exit; the files the environment names are read
// with that user's permissions, and only the CA certificate (never its key) is read as root.
func trustEnv(env []string, caFile string, cred *syscall.Credential) ([]string, string, error) {
	ca, err := os.ReadFile(caFile)
	if err != nil {
		return nil, "", fmt.Errorf("appliance CA: %w", err)
	}
	dir, root, err := newTrustDir(cred)
	if err != nil {
		return nil, "", err
	}
	defer root.Close()
	get := func(k string) string {
		for _, kv := range env {
			if v, ok := strings.CutPrefix(kv, k+"="); ok {
				return v
			}
		}
		return ""
	}
	bundle := []byte{}
	base := get("SSL_CERT_FILE")
	if base == "" {
		base = "/etc/ssl/certs/ca-certificates.crt"
	}
	if b, err := readFileAs(base, cred); err == nil {
		bundle = append(bundle, b...)
		bundle = append(bundle, '\n')
	}
	bundle = append(bundle, ca...)
	bundlePath := filepath.Join(dir, "bundle.pem")
	if err := writeTrustFile(root, "bundle.pem", bundle); err != nil {
		return nil, dir, fmt.Errorf("trust bundle: %w", err)
	}
	extra := append([]byte{}, ca...)
	if user := get("NODE_EXTRA_CA_CERTS"); user != "" {
		if b, err := readFileAs(user, cred); err == nil {
			extra = append(append(b, '\n'), ca...)
		}
	}
	extraPath := filepath.Join(dir, "node-extra.pem")
	if err := writeTrustFile(root, "node-extra.pem", extra); err != nil {
		return nil, dir, fmt.Errorf("trust bundle: %w", err)
	}
	if err := handOver(root, cred); err != nil {
		return nil, dir, fmt.Errorf("trust bundle: %w", err)
	}
	set := map[string]string{
		"SSL_CERT_FILE": bundlePath, "REQUESTS_CA_BUNDLE": bundlePath, "CURL_CA_BUNDLE": bundlePath,
		"GIT_SSL_CAINFO": bundlePath, "NODE_EXTRA_CA_CERTS": extraPath,
	}
	out := env[:0:0]
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if _, ok := set[k]; !ok {
			out = append(out, kv)
		}
	}
	for k, v := range set {
		out = append(out, k+"="+v)
	}
	return out, dir, nil
}
