//go:build !linux

package appliance

import "io"

// Only Linux installs steering, so elsewhere nothing needs watching.

// IsWatchdog is false: no watchdog runs here.
func IsWatchdog() bool { return false }

// RunWatchdog is never called here.
func RunWatchdog(io.Writer) error { return nil }

// StartWatchdog starts none.
func StartWatchdog(string, io.Writer) *WatchdogLink { return nil }
