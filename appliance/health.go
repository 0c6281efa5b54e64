package appliance

import (
	"sync"
	"time"
)

// watchHealth keeps the service manager told whether the appliance is fit to serve: READY=1 (and,
// when the unit has WatchdogSec=, WATCHDOG=1 keep-alives) only while the audit store is writable;
// while it is not, STATUS says why and no keep-alive is sent, so a watchdog sees it. It returns
// what stops it (once; later calls do nothing). Outside systemd it only sends the one READY=1 of Start.
func (a *Appliance) watchHealth() (stop func()) {
	if !sdActive() {
		return func() {}
	}
	healthy := a.auditReady() == nil
	if healthy {
		sdReady()
	} else {
		sdNotStatus(a.auditReady())
	}
	every := sdWatchdogEvery()
	if every <= 0 {
		every = time.Second
	}
	done, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			err := a.auditReady()
			switch {
			case err == nil && !healthy:
				a.log.Info("audit store writable again; ready")
				sdReady()
			case err != nil && healthy:
				a.log.Error("audit store not writable; audited requests are refused until it is", "err", err)
				sdNotStatus(err)
			}
			healthy = err == nil
			if healthy {
				sdWatchdog()
			}
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { close(done); <-finished }) }
}
