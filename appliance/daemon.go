package appliance

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

// Daemon is the signals of a long-running command (run, node-agent): SIGPIPE is ignored (a flow
// log piped into a reader that quits, `| head`, must not kill the daemon with its steering
// installed: the write fails and is reported instead), Ctx ends on SIGINT or SIGTERM, and SIGHUP
// arrives on Reload (unhandled, it would kill the daemon with its steering left in place).
type Daemon struct {
	Ctx    context.Context
	Reload <-chan os.Signal
	stop   func()
}

// NewDaemon installs the handlers; Stop removes them.
func NewDaemon() *Daemon {
	signal.Ignore(syscall.SIGPIPE)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	return &Daemon{Ctx: ctx, Reload: hup, stop: func() { signal.Stop(hup); stop() }}
}

// Stop removes the handlers NewDaemon installed.
func (d *Daemon) Stop() { d.stop() }

// OnReload calls reload on each SIGHUP until Ctx ends.
func (d *Daemon) OnReload(reload func()) {
	for {
		select {
		case <-d.Ctx.Done():
			return
		case <-d.Reload:
			reload()
		}
	}
}
