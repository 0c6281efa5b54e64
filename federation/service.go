package federation

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync"
	"time"

	"mcpintercept/auth"
	"mcpintercept/integrity"
	"mcpintercept/policy"
	"mcpintercept/tracing"
)

// Options configure a Service.
type Options struct {
	Listen         string
	TLS            *tls.Config // nil: plaintext
	Refresh        time.Duration
	Limits         Limits
	AggregateTools int
	RequestBytes   int64
	ResultBytes    int64
	Downstreams    []*Downstream
	Rules          *policy.Set
	// Store is the durable audit log; required. AuditReady reports its health.
	Store      Appender
	AuditReady func() error
	Metrics    *Metrics
	Tracer     *tracing.Tracer
	Log        *slog.Logger
	// Pins, when set, pins every downstream's tool definitions (tool integrity, the downstream's
	// URL its server key): a definition quarantined (changed since pinned — a rug pull —, or not
	// pinned under enforce) is not published until an operator approves it.
	Pins *integrity.RouteGuard
	// Tokens, when set, checks every request's credentials against the endpoint's canonical URI
	// before it is read (token audience on the ingress).
	Tokens *TokenCheck
}

// TokenCheck is the ingress's token check and how records name the caller.
type TokenCheck struct {
	Check interface {
		CheckRequest(ctx context.Context, cr auth.Credentials, canonical string) (auth.Result, error)
	}
	Identity string // tokens.record_identity: plain, hash or off
}

// DownstreamHealth is one downstream's refresh state.
type DownstreamHealth struct {
	ID          string    `json:"id"`
	State       string    `json:"state"` // pending | ok | failed
	Version     string    `json:"version,omitempty"`
	Tools       int       `json:"tools"`
	Quarantined []string  `json:"quarantined,omitempty"`
	Error       string    `json:"error,omitempty"`
	LastAttempt time.Time `json:"last_attempt,omitzero"`
	LastSuccess time.Time `json:"last_success,omitzero"`
}

// Health is what the federation reports of itself.
type Health struct {
	Live        bool               `json:"live"`
	Ready       bool               `json:"ready"`
	NotReady    string             `json:"not_ready,omitempty"`
	Audit       string             `json:"audit"` // ok | the error
	Generation  uint64             `json:"generation"`
	Tools       int                `json:"tools"`
	Rejected    string             `json:"last_rejection,omitempty"`
	Downstreams []DownstreamHealth `json:"downstreams"`
}

// Service is the federation endpoint: the refresh loop, the registry, the dispatcher and the
// ingress HTTP server.
type Service struct {
	o    Options
	reg  *Registry
	disp *Dispatcher
	log  *slog.Logger
	ln   net.Listener
	srv  *http.Server

	mu       sync.Mutex
	health   map[string]*DownstreamHealth
	catalogs map[string]*Catalog
	rejected string
	rules    *policy.Set

	refreshNow   chan struct{}
	stopRefresh  context.CancelFunc
	refreshDone  chan struct{}
	served       chan struct{}
	shutdownOnce sync.Once
}

// Start binds the endpoint and starts refreshing and serving. It returns once the listener is
// bound; readiness comes later (Ready).
func Start(o Options) (*Service, error) {
	if o.Store == nil {
		return nil, errors.New("federation needs the durable audit store (audit.dir)")
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	ln, err := net.Listen("tcp", o.Listen)
	if err != nil {
		return nil, fmt.Errorf("federation listener %s: %w", o.Listen, err)
	}
	if o.TLS != nil {
		ln = tls.NewListener(ln, o.TLS)
	}
	s := &Service{o: o, reg: &Registry{}, log: o.Log, ln: ln, health: map[string]*DownstreamHealth{},
		catalogs: map[string]*Catalog{}, rules: o.Rules, refreshNow: make(chan struct{}, 1),
		refreshDone: make(chan struct{}), served: make(chan struct{})}
	for _, d := range o.Downstreams {
		s.health[d.ID] = &DownstreamHealth{ID: d.ID, State: "pending"}
	}
	s.disp = NewDispatcher(s.reg, o.Store, o.Downstreams, o.ResultBytes, o.Metrics, o.Tracer, o.Log)
	s.srv = &http.Server{Handler: s.ingress(), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute,
		ErrorLog: slog.NewLogLogger(o.Log.Handler(), slog.LevelDebug)}
	ctx, cancel := context.WithCancel(context.Background())
	s.stopRefresh = cancel
	go s.refreshLoop(ctx)
	go func() {
		defer close(s.served)
		if err := s.srv.Serve(s.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("federation: serve", "err", err)
		}
	}()
	s.log.Info("federation listening", "addr", ln.Addr().String(), "tls", o.TLS != nil, "downstreams", len(o.Downstreams))
	return s, nil
}

// Addr is the bound address.
func (s *Service) Addr() net.Addr { return s.ln.Addr() }

// Registry is the service's registry (tests and the admin view read it).
func (s *Service) Registry() *Registry { return s.reg }

// Refresh asks for a refresh of every downstream now (SIGHUP).
func (s *Service) Refresh() {
	select {
	case s.refreshNow <- struct{}{}:
	default:
	}
}

// SetRules replaces the rule set (a reload) and republishes the current catalogs under it.
func (s *Service) SetRules(rules *policy.Set) {
	s.mu.Lock()
	s.rules = rules
	s.mu.Unlock()
	s.Refresh()
}

func (s *Service) refreshLoop(ctx context.Context) {
	defer close(s.refreshDone)
	t := time.NewTicker(s.o.Refresh)
	defer t.Stop()
	for {
		s.refreshAll(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-s.refreshNow:
		}
	}
}

// refreshAll refreshes every downstream at once, then publishes one generation of the catalogs
// that succeeded (a failed refresh removes its downstream's catalog).
func (s *Service) refreshAll(ctx context.Context) {
	type res struct {
		c   *Catalog
		err error
	}
	out := make([]res, len(s.o.Downstreams))
	var wg sync.WaitGroup
	for i, d := range s.o.Downstreams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := d.Refresh(ctx, s.o.Limits)
			out[i] = res{c, err}
		}()
	}
	wg.Wait()
	if ctx.Err() != nil {
		return // shutting down: publish nothing half-read
	}
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, d := range s.o.Downstreams {
		h := s.health[d.ID]
		h.LastAttempt = now
		if err := out[i].err; err != nil {
			if h.State != "failed" || h.Error != err.Error() {
				s.log.Warn("federation: refresh failed; its catalog is withdrawn", "downstream", d.ID, "err", err)
			}
			h.State, h.Error, h.Tools = "failed", err.Error(), 0
			delete(s.catalogs, d.ID)
			s.o.Metrics.refreshed(d.ID, false)
			continue
		}
		quarantined := s.pin(d, out[i].c)
		if h.State != "ok" {
			s.log.Info("federation: downstream catalog read", "downstream", d.ID, "version", out[i].c.Version, "tools", len(out[i].c.Tools))
		}
		h.State, h.Error, h.Version, h.Tools, h.LastSuccess = "ok", "", out[i].c.Version, len(out[i].c.Tools), now
		h.Quarantined = quarantined
		s.catalogs[d.ID] = out[i].c
		s.o.Metrics.refreshed(d.ID, true)
	}
	cats := make([]*Catalog, 0, len(s.catalogs))
	for _, c := range s.catalogs {
		cats = append(cats, c)
	}
	sort.Slice(cats, func(i, j int) bool { return cats[i].Downstream < cats[j].Downstream })
	g, err := Build(cats, s.rules, s.o.AggregateTools)
	if err != nil {
		var rj *Rejection
		reason := "malformed"
		if errors.As(err, &rj) {
			reason = rj.Reason
		}
		if s.rejected != err.Error() {
			s.log.Error("federation: aggregate generation rejected; the previous one stays published", "err", err)
		}
		s.rejected = err.Error()
		s.o.Metrics.reject(reason)
		return
	}
	s.rejected = ""
	if prev := s.reg.Current(); prev != nil && sameGeneration(prev, g) && s.reg.Rules() == s.rules {
		return // nothing changed: keep the number
	}
	n := s.reg.Publish(g, s.rules)
	s.o.Metrics.published(g)
	s.log.Info("federation: aggregate generation published", "generation", n, "tools", len(g.Tools), "downstreams", len(g.Downstreams), "filtered", g.Filtered)
}

// pin judges c's definitions with the tool-integrity guard and removes the quarantined ones
// from c (they are not published); it returns their names.
func (s *Service) pin(d *Downstream, c *Catalog) []string {
	if s.o.Pins == nil || len(c.Tools) == 0 {
		return nil
	}
	defs := make([]integrity.Def, len(c.Tools))
	for i, t := range c.Tools {
		defs[i] = integrity.Def{Kind: integrity.KindTool, Name: t.Name, Raw: t.Def}
	}
	verdicts, events := s.o.Pins.Observe(integrity.Server{Key: serverKey(d.URL)}, "federation", defs, true)
	for _, e := range events {
		s.log.Info("federation: tool integrity", "downstream", d.ID, "event", e.Kind, "tool", e.Name, "detail", e.Detail)
	}
	var out []string
	kept := c.Tools[:0:0]
	for i, v := range verdicts {
		if v.Quarantined {
			out = append(out, c.Tools[i].Name)
			s.log.Warn("federation: tool quarantined, not published", "downstream", d.ID, "tool", c.Tools[i].Name, "reason", v.Reason)
			continue
		}
		kept = append(kept, c.Tools[i])
	}
	c.Tools = kept
	return out
}

// serverKey is the downstream's identity for pins: host:port/path of its URL.
func serverKey(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	host, port := u.Hostname(), u.Port()
	if port == "" {
		port = "80"
		if u.Scheme == "https" {
			port = "443"
		}
	}
	return strings.ToLower(net.JoinHostPort(host, port)) + strings.TrimSuffix(u.Path, "/")
}

// sameGeneration reports whether a and b publish the same tools and definitions.
func sameGeneration(a, b *Generation) bool {
	if len(a.Tools) != len(b.Tools) {
		return false
	}
	for i := range a.Tools {
		x, y := a.Tools[i], b.Tools[i]
		if x.Name != y.Name || x.Version != y.Version || string(x.Def) != string(y.Def) {
			return false
		}
	}
	return true
}

// Ready is nil once every downstream attempted its first refresh, at least one is healthy, a
// generation is published and the audit store is writable.
func (s *Service) Ready() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.readyLocked()
}

func (s *Service) readyLocked() error {
	healthy := 0
	for _, h := range s.health {
		if h.State == "pending" {
			return fmt.Errorf("downstream %s has not been refreshed yet", h.ID)
		}
		if h.State == "ok" {
			healthy++
		}
	}
	if healthy == 0 {
		return errors.New("no downstream is healthy")
	}
	if s.reg.Current() == nil {
		return errors.New("no aggregate generation published")
	}
	if s.o.AuditReady != nil {
		if err := s.o.AuditReady(); err != nil {
			return fmt.Errorf("audit: %w", err)
		}
	}
	return nil
}

// Health is the service's state.
func (s *Service) Health() Health {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := Health{Live: true, Audit: "ok", Rejected: s.rejected}
	if s.o.AuditReady != nil {
		if err := s.o.AuditReady(); err != nil {
			h.Audit = err.Error()
		}
	}
	if err := s.readyLocked(); err != nil {
		h.NotReady = err.Error()
	} else {
		h.Ready = true
	}
	if g := s.reg.Current(); g != nil {
		h.Generation, h.Tools = g.N, len(g.Tools)
	}
	for _, d := range s.o.Downstreams {
		h.Downstreams = append(h.Downstreams, *s.health[d.ID])
	}
	return h
}

// Shutdown stops the federation in Conduit's order: dispatch admission and HTTP acceptance stop,
// active dispatches are cancelled, their terminal audit paths (and session cleanups) are waited
// for, the refresh loop is cancelled and joined. The caller closes the audit store after it.
func (s *Service) Shutdown(ctx context.Context) error {
	var err error
	s.shutdownOnce.Do(func() {
		s.reg.Close()
		s.log.Info("federation: shutdown: admission stopped")
		s.srv.SetKeepAlivesEnabled(false)
		_ = s.ln.Close()
		s.disp.Cancel()
		s.log.Info("federation: shutdown: active dispatches cancelled")
		done := make(chan struct{})
		go func() {
			s.reg.Wait()
			s.disp.WaitCleanup()
			close(done)
		}()
		select {
		case <-done:
			s.log.Info("federation: shutdown: terminal audit paths done")
		case <-ctx.Done():
			err = fmt.Errorf("federation shutdown: calls still writing their records: %w", ctx.Err())
		}
		if e := s.srv.Shutdown(ctx); e != nil && err == nil {
			err = e
		}
		<-s.served
		s.stopRefresh()
		<-s.refreshDone
		for _, d := range s.o.Downstreams {
			d.CloseIdle()
		}
		s.log.Info("federation: shutdown: refresh joined")
	})
	return err
}
