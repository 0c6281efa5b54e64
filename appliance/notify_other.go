//go:build !linux

package appliance

import "time"

// sd_notify exists only where systemd does; elsewhere readiness is the "ready" log line.

func sdNotify(string) bool           { return false }
func sdReady()                       {}
func sdReloading() func()            { return func() {} }
func sdStopping()                    {}
func sdActive() bool                 { return false }
func sdNotStatus(error)              {}
func sdWatchdog()                    {}
func sdWatchdogEvery() time.Duration { return 0 }
