package appliance

import "os"

// notifyReopen does nothing on Windows, which has no SIGUSR1 (and `run` is Linux-only anyway).
func notifyReopen(chan os.Signal) {}
