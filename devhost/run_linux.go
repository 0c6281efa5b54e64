package devhost

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"mcpintercept/appliance"
	"mcpintercept/engine"
	"mcpintercept/intercept"
	"mcpintercept/telemetry"
)

// Options are what Run needs.
type Options struct {
	// NewAppliance makes the appliance (appliance.New with the configuration: routes, rules, CA,
	// upstream trust, limits and the flow log file) from the options Run decides: the mechanism
	// is always eBPF on a cgroup Run creates, the listeners ephemeral loopback ports.
	NewAppliance func(context.Context, appliance.Options) (*appliance.Appliance, error)
	// Steering is the configuration's steering (appliance.SteeringOptions): its destinations,
	// ports and bypass mark are the eBPF program's.
	Steering intercept.Options
	// ZeroConfig replaces the routes with ZeroConfigRouting (exec without --config).
	ZeroConfig bool
	// Level is the zero-config route's awareness level (1 or 2; 0 means 2).
	Level int
	// Argv is the command and its arguments.
	Argv []string
	// User is who the command runs as (ResolveUser).
	User User
	// Stderr gets the live request lines, the summary and Run's own messages.
	Stderr io.Writer
	Log    *slog.Logger
	// CgroupCreated, when set, is told the command's cgroup as soon as it exists (the watchdog of
	// `mcpintercept exec` removes it should this process crash).
	CgroupCreated func(path string)
	// NoLoopback leaves the command's connects to loopback destinations alone (--no-loopback);
	// by default they are steered like any other (development servers listen on localhost).
	NoLoopback bool
}

// AllowLoopback is upstream_deny without its loopback entries (127.0.0.0/8, ::1/128): with
// loopback steering, exec dials the command's localhost servers for it. Nothing else is dropped.
func AllowLoopback(deny []netip.Prefix) []netip.Prefix {
	var out []netip.Prefix
	for _, p := range deny {
		// Inside 127.0.0.0/8 or exactly ::1: a wider entry also denies more than loopback.
		if p.Addr().IsLoopback() && (p.Addr().Is4() && p.Bits() >= 8 || p.Addr().Is6() && p.Bits() == 128) {
			continue
		}
		out = append(out, p)
	}
	return out
}

// ZeroConfigRouting is exec's route when no configuration is given: everything (loopback too, unless --no-loopback), TLS
// terminated when the client speaks TLS, HTTP read at level (2 by default: every JSON-RPC message
// is read, so each line names its method and tool whatever headers the client sends), the rest
// opaque.
func ZeroConfigRouting(level int) *engine.Routing {
	if level <= 0 {
		level = 2
	}
	return &engine.Routing{Routes: []*engine.Route{{Name: "exec", TLS: engine.Auto, Level: level, OnMismatch: "passthrough"}}}
}

// zeroConfigPeek is how long a client that speaks second (SSH, SMTP) waits before its flow is
// forwarded opaque under the zero-config route.
const zeroConfigPeek = 500 * time.Millisecond

// execDrain bounds how long the command's last flows may take once it has exited.
const execDrain = 2 * time.Second

// execSink prints a live line per request on stderr and keeps the summary. Lines go through a
// bounded queue: a terminal paused with Ctrl-S must not stall the command's traffic.
type execSink struct {
	summary telemetry.Summary
	lines   chan string
	done    chan struct{}
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
}

// close prints what is queued; Write must not be called afterwards.
func (s *execSink) close() { close(s.lines); <-s.done }

// Run runs o.Argv with its TCP connects steered through an appliance until it exits, and returns
// its exit code (128+signal when a signal killed it; 127 when it could not start).
func Run(ctx context.Context, o Options) (int, error) {
	log := o.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	root, _, err := intercept.Cgroup2Mount()
	if err != nil {
		return 0, fmt.Errorf("cgroup v2: %w", err)
	}
	cg, err := intercept.NewCgroup(root)
	if err != nil {
		return 0, fmt.Errorf("create cgroup: %w", err)
	}
	if o.CgroupCreated != nil {
		o.CgroupCreated(cg)
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
	steer := o.Steering
	steer.Loopback = !o.NoLoopback
	mech, err := newMechanism(steer, cg, lns)
	if err != nil {
		for _, l := range lns {
			l.Close()
		}
		return 0, err
	}

	opt := appliance.Options{Log: log, Mechanism: mech, Listeners: lns, DrainTimeout: execDrain, NoAdmin: true, Quiet: true}
	if o.ZeroConfig {
		opt.Routing, opt.Terminate, opt.PeekTimeout = ZeroConfigRouting(o.Level), true, zeroConfigPeek
	}
	sink := newExecSink(o.Stderr)
	opt.Observe = sink
	app, err := o.NewAppliance(ctx, opt)
	if err != nil {
		sink.close()
		return 0, err
	}
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			app.Stop(context.WithoutCancel(ctx))
			sink.close()
		}
	}
	defer stop()
	if err := app.Start(ctx); err != nil {
		return 0, err
	}

	env := setEnv(os.Environ(), o.User.Env...)
	if caFile := app.CAFile(); caFile != "" {
		var trustDir string
		env, trustDir, err = trustEnv(env, caFile, o.User.Cred)
		if trustDir != "" {
			defer os.RemoveAll(trustDir)
		}
		if err != nil {
			return 0, err
		}
	}
	argv := o.Argv
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = env
	if err := startInCgroup(cmd, o.User.Cred, cg); err != nil {
		return 127, err
	}
	as := ""
	if o.User.Cred != nil {
		as = " as " + o.User.Name
	}
	fmt.Fprintf(o.Stderr, "mcpintercept: steering the TCP connects of %q (pid %d%s, cgroup %s) to %s\n", strings.Join(argv, " "), cmd.Process.Pid, as, cg, addrList(app.Addrs()))

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

	// The command is gone: let its last flows finish, then stop and summarise. What the command
	// connected to that was left alone is read before the programs go.
	skipped, serr := mech.Skipped()
	stop()
	sink.summary.WriteTable(o.Stderr)
	if sink.summary.Len() == 0 {
		writeSkipped(o.Stderr, skipped, serr)
	}

	var ee *exec.ExitError
	if errors.As(werr, &ee) {
		code := ee.ExitCode()
		if code < 0 { // killed by a signal: the shell convention
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				code = 128 + int(ws.Signal())
			}
		}
		return code, nil
	} else if werr != nil {
		return 1, werr
	}
	return 0, nil
}

// newMechanism is eBPF steering of the cgroup cg to the listeners lns, limited to the
// configuration's destinations and ports (steer).
func newMechanism(steer intercept.Options, cg string, lns []*net.TCPListener) (*intercept.EBPF, error) {
	opts := intercept.EBPFOptions{CgroupPath: cg, Destinations: steer.Destinations, Ports: steer.Ports, BypassMark: steer.BypassMark, Loopback: steer.Loopback}
	for _, l := range lns {
		ap := l.Addr().(*net.TCPAddr).AddrPort()
		if ap.Addr().Is4() {
			opts.ListenV4 = ap
		} else {
			opts.ListenV6 = ap
		}
	}
	return intercept.NewEBPF(opts)
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

func addrList(addrs []netip.AddrPort) string {
	var s []string
	for _, a := range addrs {
		s = append(s, a.String())
	}
	return strings.Join(s, ", ")
}

// writeSkipped says why nothing was intercepted: the command's connects that were seen and left
// alone (at most 10 destinations), or that none was seen at all.
func writeSkipped(w io.Writer, skipped []intercept.SkippedConnect, err error) {
	if err != nil {
		fmt.Fprintf(w, "mcpintercept: could not read the connects left alone: %v\n", err)
		return
	}
	if len(skipped) == 0 {
		fmt.Fprintln(w, "mcpintercept: the command made no TCP connect that exec could steer (none seen; a UDP, Unix-socket or stdio MCP server is not intercepted)")
		return
	}
	fmt.Fprintln(w, "mcpintercept: connects seen and left alone:")
	for i, s := range skipped {
		if i == 10 {
			fmt.Fprintf(w, "  ... and %d more destinations\n", len(skipped)-10)
			break
		}
		fmt.Fprintf(w, "  %s x%d: %s\n", s.Dst, s.Count, s.Reason)
	}
}
