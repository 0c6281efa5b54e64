//go:build !linux

package appliance

// sd_notify exists only where systemd does; elsewhere readiness is the "ready" log line.

func sdNotify(string) bool { return false }
func sdReady()             {}
func sdReloading() func()  { return func() {} }
func sdStopping()          {}
