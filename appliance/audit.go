package appliance

import (
	"context"
	"fmt"
	"time"

	"mcpintercept/audit"
	"mcpintercept/audit/auditstage"
	"mcpintercept/config"
	"mcpintercept/engine"
)

// auditStoreConfig is the audit store's share of the configuration.
func auditStoreConfig(cfg *config.Config) audit.Config {
	a := cfg.Audit
	return audit.Config{
		Dir:             a.Dir,
		Timeout:         a.Timeout.Duration,
		SegmentBytes:    a.SegmentBytes,
		RetainSegments:  a.RetainSegments,
		RetainAge:       a.RetainAge.Duration,
		CheckpointEvery: a.CheckpointEvery.Duration,
	}
}

// routeAudit is r's audit options (nil: r is nil or not audited).
func routeAudit(r *engine.Route) *auditstage.Options {
	if r == nil {
		return nil
	}
	return auditstage.Of(r.Stages)
}

// audited reports whether some route of rt writes audit records.
func audited(rt *engine.Routing) bool {
	for _, r := range rt.Routes {
		if routeAudit(r) != nil {
			return true
		}
	}
	return routeAudit(rt.Default) != nil
}

// openAudit opens the audit store when a route of rt is audited and it is not open yet, then
// gives the audited routes of rt the store. Called before the engine accepts (and on a reload that
// audits a route for the first time).
func (a *Appliance) openAudit(cfg *config.Config, rt *engine.Routing) error {
	if !audited(rt) && !cfg.FederationOn() {
		return nil
	}
	if a.audit.Load() == nil {
		s, err := audit.Open(auditStoreConfig(cfg), a.log.With("component", "audit"))
		if err != nil {
			return fmt.Errorf("audit store %s: %w", cfg.Audit.Dir, err)
		}
		a.audit.Store(s)
		a.auditCfg = cfg.Audit
		a.info("audit store open", "dir", cfg.Audit.Dir, "fail", cfg.Audit.Fail)
	}
	s := a.audit.Load()
	attach := func(r *engine.Route) {
		if ra := routeAudit(r); ra != nil {
			ra.Store = s
		}
	}
	for _, r := range rt.Routes {
		attach(r)
	}
	attach(rt.Default)
	return nil
}

// auditReady is the audit part of readiness: nil without a store, the store's Ready otherwise.
func (a *Appliance) auditReady() error {
	if s := a.audit.Load(); s != nil {
		return s.Ready()
	}
	return nil
}

// closeAudit writes the final checkpoint and closes the store. Stop calls it after the drain, so
// that every flow's outcome records are in before it.
func (a *Appliance) closeAudit(ctx context.Context) {
	s := a.audit.Swap(nil)
	if s == nil {
		return
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), a.auditCfg.Timeout.Duration+5*time.Second)
	defer cancel()
	if err := s.Close(cctx); err != nil {
		a.log.Error("audit store: close", "err", err)
		return
	}
	a.info("audit store closed")
}
