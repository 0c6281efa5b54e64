package appliance

import (
	"net"
	"os"
	"strconv"
	"time"
)

// sd_notify, the systemd readiness protocol, spoken directly (no library): one datagram of
// newline-separated KEY=VALUE assignments to the AF_UNIX socket named by $NOTIFY_SOCKET (a path,
// or an abstract name written with a leading '@'). It is what lets the unit be Type=notify:
// systemd considers the service started only once READY=1 arrives, which Start sends after the
// steering is installed, so `After=mcpintercept.service` means "the network is steered". Without
// $NOTIFY_SOCKET (not under systemd, or a unit of another type) every call does nothing.

// sdNotify sends state to the service manager and reports whether it was delivered. Errors are
// not returned: readiness reporting must never stop the appliance (systemd's own timeout is the
// judge when a message is lost).
func sdNotify(state string) bool {
	name := os.Getenv("NOTIFY_SOCKET")
	if name == "" || (name[0] != '/' && name[0] != '@') {
		return false
	}
	conn, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		return false
	}
	defer conn.Close()
	conn.SetWriteDeadline(time.Now().Add(time.Second))
	_, err = conn.Write([]byte(state))
	return err == nil
}

// sdReady says the steering is installed and flows are served (`systemctl start` returns now).
func sdReady() { sdNotify("READY=1\nSTATUS=steering installed; serving") }

// sdReloading says a reload began and returns what says it ended: `defer sdReloading()()`. The
// unit shows "reloading" in between; systemd 252 (Debian 12) does not make `systemctl reload`
// wait for the end, the journal's "reloaded routes and rules" (or "reload refused") line does.
func sdReloading() func() {
	sdNotify("RELOADING=1\nSTATUS=reloading routes and rules")
	return func() { sdNotify("READY=1\nSTATUS=steering installed; serving") }
}

// sdStopping says an orderly stop began (drain, then steering removal).
func sdStopping() {
	sdNotify("STOPPING=1\nSTATUS=stopping: draining open flows, then removing steering")
}

// sdActive reports whether a service manager listens ($NOTIFY_SOCKET is set).
func sdActive() bool { return os.Getenv("NOTIFY_SOCKET") != "" }

// sdNotStatus says the appliance runs but is not fit to serve (the audit store is not writable):
// audited requests are refused meanwhile.
func sdNotStatus(err error) {
	sdNotify("STATUS=not ready: audit: " + err.Error() + "; audited requests refused")
}

// sdWatchdog is one keep-alive of the unit's WatchdogSec=.
func sdWatchdog() { sdNotify("WATCHDOG=1") }

// sdWatchdogEvery is how often systemd wants a keep-alive: half of $WATCHDOG_USEC, as
// sd_watchdog_enabled(3) advises; 0 when no watchdog is asked for this process.
func sdWatchdogEvery() time.Duration {
	if pid := os.Getenv("WATCHDOG_PID"); pid != "" && pid != strconv.Itoa(os.Getpid()) {
		return 0
	}
	usec, err := strconv.ParseUint(os.Getenv("WATCHDOG_USEC"), 10, 63)
	if err != nil || usec == 0 {
		return 0
	}
	return time.Duration(usec) * time.Microsecond / 2
}
