package appliance

import (
	"context"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"mcpintercept/audit"
)

// TestWatchHealth: under systemd with a watchdog, READY=1 then keep-alives while the audit store
// is writable; once it is not, STATUS says so and the keep-alives stop before anything else is
// sent (the next message after the STATUS line is never WATCHDOG=1 while it stays unwritable).
func TestWatchHealth(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "notify")
	l, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	t.Setenv("NOTIFY_SOCKET", sock)
	t.Setenv("WATCHDOG_USEC", "20000")
	t.Setenv("WATCHDOG_PID", "")
	if got := sdWatchdogEvery(); got != 10*time.Millisecond {
		t.Fatalf("sdWatchdogEvery = %v, want 10ms", got)
	}
	log := slog.New(slog.DiscardHandler)
	s, err := audit.Open(audit.Config{Dir: filepath.Join(t.TempDir(), "audit")}, log)
	if err != nil {
		t.Fatal(err)
	}
	a := &Appliance{log: log}
	a.audit.Store(s)
	stop := a.watchHealth()
	defer stop()
	buf := make([]byte, 4096)
	next := func() string {
		t.Helper()
		l.SetReadDeadline(time.Now().Add(10 * time.Second))
		n, err := l.Read(buf)
		if err != nil {
			t.Fatalf("read: %v", err)
		}
		return string(buf[:n])
	}
	if m := next(); !strings.HasPrefix(m, "READY=1") {
		t.Fatalf("first message %q, want READY=1", m)
	}
	if m := next(); m != "WATCHDOG=1" {
		t.Fatalf("second message %q, want WATCHDOG=1", m)
	}
	s.Close(context.Background())
	for m := next(); m == "WATCHDOG=1"; m = next() {
		// keep-alives sent before the watch saw the store closed
		_ = m
	}
	stop()
	stop() // a second stop does nothing
	l.SetReadDeadline(time.Now())
	// Whatever was queued after the STATUS line: never a keep-alive.
	for {
		n, err := l.Read(buf)
		if err != nil {
			break
		}
		if string(buf[:n]) == "WATCHDOG=1" {
			t.Fatal("a keep-alive after the store became unwritable")
		}
	}
	t.Setenv("WATCHDOG_PID", "1")
	if got := sdWatchdogEvery(); got != 0 {
		t.Errorf("a watchdog for another process: %v, want 0", got)
	}
}
