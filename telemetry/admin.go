package telemetry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Admin is the operator's HTTP listener. /readyz answers 200 only once SetReady(true) was called,
// which the daemon does after steering is installed, and while every readiness check passes.
type Admin struct {
	ready   atomic.Bool
	srv     *http.Server
	mux     *http.ServeMux
	ln      net.Listener
	log     *slog.Logger
	declare func() any

	mu     sync.Mutex
	checks []readiness
}

// readiness is one condition /readyz requires besides the steering (the audit store is
// writable).
type readiness struct {
	name  string
	check func() error
}

// NewAdmin binds addr now (so a port conflict is reported before anything is installed) and
// serves after Start.
func NewAdmin(addr string, m *Metrics, declare func() any, log *slog.Logger) (*Admin, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("admin listener %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	a := &Admin{ln: ln, log: log, declare: declare, mux: mux}
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if err := a.Ready(); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	mux.HandleFunc("GET /declaration", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.Encode(a.declare())
	})
	a.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	return a, nil
}

// Addr is the bound address (useful when the configuration asked for port 0).
func (a *Admin) Addr() net.Addr { return a.ln.Addr() }

// Start serves in a goroutine owned by the Admin; Shutdown stops it.
func (a *Admin) Start() {
	go func() {
		if err := a.srv.Serve(a.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			a.log.Error("admin listener stopped", "err", err)
		}
	}()
}

// SetReady flips /readyz.
func (a *Admin) SetReady(v bool) { a.ready.Store(v) }

// AddReadiness makes /readyz also require check to pass; its error, under name, is the reason
// /readyz gives.
func (a *Admin) AddReadiness(name string, check func() error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.checks = append(a.checks, readiness{name, check})
}

// Ready is what /readyz reports: nil when the steering is installed and every check passes.
func (a *Admin) Ready() error {
	if !a.ready.Load() {
		return errors.New("steering not installed")
	}
	a.mu.Lock()
	checks := a.checks
	a.mu.Unlock()
	for _, c := range checks {
		if err := c.check(); err != nil {
			return fmt.Errorf("%s: %w", c.name, err)
		}
	}
	return nil
}

// Handle serves h at pattern (a ServeMux pattern, "GET /audit/checkpoint") on the admin listener.
func (a *Admin) Handle(pattern string, h http.Handler) { a.mux.Handle(pattern, h) }

// Shutdown stops the listener.
func (a *Admin) Shutdown(ctx context.Context) error { return a.srv.Shutdown(ctx) }
