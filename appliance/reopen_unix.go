//go:build !windows

package appliance

import (
	"os"
	"os/signal"
	"syscall"
)

// notifyReopen relays SIGUSR1 (reopen the flow log) to c.
func notifyReopen(c chan os.Signal) { signal.Notify(c, syscall.SIGUSR1) }
