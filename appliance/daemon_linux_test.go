package appliance

import (
	"os"
	"syscall"
	"testing"
	"time"
)

// TestDaemonSignals: SIGHUP reaches OnReload (it does not kill the process), SIGTERM ends Ctx and
// with it OnReload. The deadline is a hang guard.
func TestDaemonSignals(t *testing.T) {
	d := NewDaemon()
	defer d.Stop()
	reloads := make(chan struct{}, 1)
	done := make(chan struct{})
	go func() { d.OnReload(func() { reloads <- struct{}{} }); close(done) }()
	syscall.Kill(os.Getpid(), syscall.SIGHUP)
	select {
	case <-reloads:
	case <-time.After(time.Minute):
		t.Fatal("SIGHUP did not reload")
	}
	syscall.Kill(os.Getpid(), syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("SIGTERM did not end the daemon's context")
	}
	if d.Ctx.Err() == nil {
		t.Fatal("Ctx not done after SIGTERM")
	}
}
