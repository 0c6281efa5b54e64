package appliance

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"time"

	"mcpintercept/auth"
	"mcpintercept/config"
	"mcpintercept/federation"
	"mcpintercept/integrity"
	"mcpintercept/intercept/upstream"
	"mcpintercept/telemetry"
)

// federationOptions turns the federation section into the service's options (the store, rules
// and telemetry are the appliance's).
func (a *Appliance) federationOptions(cfg *config.Config) (federation.Options, error) {
	f := cfg.Federation
	o := federation.Options{
		Listen:         f.Listen,
		Refresh:        f.Refresh.Duration,
		Limits:         federation.Limits{Pages: f.Limits.Pages, Tools: f.Limits.Tools, Bytes: f.Limits.Bytes},
		AggregateTools: f.AggregateLimits.Tools,
		RequestBytes:   f.Limits.RequestBytes,
		ResultBytes:    f.Limits.ResultBytes,
		Tracer:         a.tracer,
		Log:            a.log.With("component", "federation"),
	}
	if f.TLS.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(f.TLS.CertFile, f.TLS.KeyFile)
		if err != nil {
			return o, fmt.Errorf("federation.tls: %w", err)
		}
		o.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12, NextProtos: []string{"http/1.1"}}
	}
	roots, err := upstreamRoots(cfg)
	if err != nil {
		return o, err
	}
	dial := upstream.BypassDialer(cfg.Steering.BypassMark, cfg.Limits.ConnectTimeout.Duration)
	for i, d := range f.Downstreams {
		pool := roots
		if d.CAFile != "" {
			pem, err := os.ReadFile(d.CAFile)
			if err != nil {
				return o, fmt.Errorf("federation.downstreams[%d].ca_file: %w", i, err)
			}
			pool = x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return o, fmt.Errorf("federation.downstreams[%d].ca_file: no PEM certificate in %s", i, d.CAFile)
			}
		}
		var hs []federation.Header
		for _, name := range d.HeaderNames() {
			h := d.Headers[name]
			hs = append(hs, federation.Header{Name: name, Value: h.Value, File: h.File})
		}
		o.Downstreams = append(o.Downstreams, federation.NewDownstream(d.ID, d.URL, d.Timeout.Duration, hs,
			&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, dial.DialContext))
	}
	if fedPins(cfg) {
		o.Pins = a.tools.Load().Route(integrity.RouteOptions{Mode: integrity.Mode(f.ToolPins)})
	}
	if f.TokenAudience != config.Off {
		tc, err := tokenChecker(cfg, config.Route{Name: "federation"}, a.jwksLog)
		if err != nil {
			return o, err
		}
		if tc != nil {
			o.Tokens = &federation.TokenCheck{Check: tc.(interface {
				CheckRequest(ctx context.Context, cr auth.Credentials, canonical string) (auth.Result, error)
			}), Identity: cfg.Tokens.RecordIdentity}
		}
	}
	if f.RuleSet != "" {
		o.Rules = a.sets[f.RuleSet]
		if o.Rules == nil {
			return o, fmt.Errorf("federation.rule_set %q is not a rule set", f.RuleSet)
		}
	}
	return o, nil
}

// openFederation starts the federation endpoint (bound now, serving; ready later) over the open
// audit store. Federation refuses to start without one.
func (a *Appliance) openFederation(cfg *config.Config) error {
	if !cfg.FederationOn() {
		return nil
	}
	store := a.audit.Load()
	if store == nil {
		return errors.New("federation needs the durable audit store (audit.dir): it records every call before dispatch")
	}
	o, err := a.federationOptions(cfg)
	if err != nil {
		return err
	}
	o.Store, o.AuditReady = store, store.Ready
	o.Metrics = federation.NewMetrics(a.metrics.Registry)
	federation.Version = telemetry.Version
	svc, err := federation.Start(o)
	if err != nil {
		return err
	}
	a.federation = svc
	if a.admin != nil {
		a.admin.AddReadiness("federation", svc.Ready)
		a.admin.Handle("GET /federation", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			enc := json.NewEncoder(w)
			enc.SetIndent("", "  ")
			_ = enc.Encode(svc.Health())
		}))
	}
	return nil
}

// reloadFederation gives the federation the reloaded rule set (its downstreams and listener keep
// their start-up values).
func (a *Appliance) reloadFederation(next *config.Config, sets CompiledRuleSets) {
	if a.federation == nil {
		if next.FederationOn() {
			a.log.Warn("reload: federation was added; it starts with the appliance, restart to serve it")
		}
		return
	}
	if fmt.Sprint(next.Federation.Downstreams) != fmt.Sprint(a.cfg.Federation.Downstreams) || next.Federation.Listen != a.cfg.Federation.Listen {
		a.log.Warn("reload: federation downstreams or listener changed; they keep their start-up values, restart to apply them")
	}
	a.federation.SetRules(sets[next.Federation.RuleSet])
}

// stopFederation shuts the federation down in its order (admission and acceptance, cancel,
// terminal audit paths, refresh joined); the audit store is closed after it.
func (a *Appliance) stopFederation(ctx context.Context) {
	if a.federation == nil {
		return
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), a.cfg.Audit.Timeout.Duration+10*time.Second)
	defer cancel()
	if err := a.federation.Shutdown(sctx); err != nil {
		a.log.Error("federation shutdown", "err", err)
	}
	a.federation = nil
}
