package appliance

import (
	"context"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/pprof"

	"mcpintercept/config"
	"mcpintercept/origin"
)

// RunOptions are Run's.
type RunOptions struct {
	// Stdout receives the flow log when it is "stdout"; Log the appliance's own log.
	Stdout io.Writer
	Log    *slog.Logger
	// Steering, when set, is told the mechanism before any steering is installed (the crash
	// watchdog's WatchdogLink.Steering).
	Steering func(origin.Mechanism)
}

// Run is the daemon (`mcpintercept run`): it wires the appliance from cfg, starts it and serves
// until SIGINT or SIGTERM, then drains and stops it (steering that could not be removed is
// logged with the way out, `mcpintercept cleanup`). SIGHUP reloads routes and rules, SIGUSR1
// reopens the flow log file. An error from New is returned as it is (a *ConfigError: nothing was
// opened); one from Start after the appliance was stopped again.
func Run(cfg *config.Config, o RunOptions) error {
	// SIGPIPE ignored, SIGINT and SIGTERM end ctx, SIGHUP reloads routes and rules (a bad file
	// keeps the running ones).
	d := NewDaemon()
	defer d.Stop()
	ctx := d.Ctx
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

	if o.Steering != nil {
		o.Steering(origin.Mechanism(cfg.Mechanism))
		if cfg.InboundOn() {
			o.Steering(origin.Inbound)
		}
	}
	app, err := New(ctx, cfg, Options{Stdout: o.Stdout, Log: o.Log})
	if err != nil {
		return err
	}
	if err := app.Start(ctx); err != nil {
		app.Stop(context.Background())
		return err
	}
	for waiting := true; waiting; {
		select {
		case <-ctx.Done():
			waiting = false
		case <-d.Reload:
			app.Reload("") // logs what it did, or why it kept the running configuration
		case <-usr1:
			app.ReopenFlowLog() // logs the reopen, or why it failed
		}
	}
	app.Stop(context.Background())
	return nil
}
