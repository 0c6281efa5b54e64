// Package admin is the operator's HTTP API: the admin listener (admin.listen), its Host check
// (admin.hosts) and every endpoint it serves — /metrics, /healthz, /readyz, /declaration (the
// listener's own), and what it reads from the appliance through Sources: /observe, /ui,
// /ui/login, /ui/config and /config_dump (the live view, admin token), /inventory (the MCP
// servers seen, admin token), /tools, /tools/pins and
// /tools/approve (tool integrity), /audit/checkpoint and /audit/pubkey (the audit store). The
// appliance builds it and hands it what the endpoints read; nothing else registers a handler.
package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"mcpintercept/telemetry"
)

// Server is the operator's HTTP listener. /readyz answers 200 only once SetReady(true) was called,
// which the daemon does after steering is installed, and while every readiness check passes.
type Server struct {
	ready   atomic.Bool
	srv     *http.Server
	mux     *http.ServeMux
	ln      net.Listener
	log     *slog.Logger
	declare func() any

	mu     sync.Mutex
	checks []readiness

	hosts atomic.Pointer[hostPolicy]
}

// readiness is one condition /readyz requires besides the steering (the audit store is
// writable).
type readiness struct {
	name  string
	check func() error
}

// New binds addr now (so a port conflict is reported before anything is installed) and serves
// after Start: /metrics (m), /healthz, /readyz and /declaration (declare); Serve adds the
// appliance's endpoints.
func New(addr string, m *telemetry.Metrics, declare func() any, log *slog.Logger) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("admin listener %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	a := &Server{ln: ln, log: log, declare: declare, mux: mux}
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
	a.hosts.Store(newHostPolicy(addr, ln.Addr()))
	a.srv = &http.Server{Handler: a.checkHost(mux), ReadHeaderTimeout: 5 * time.Second}
	return a, nil
}

// AllowHosts adds names (or addresses) the listener answers to besides its own (admin.hosts:
// the name Prometheus scrapes it by, a NAT address). Call it before Start.
func (a *Server) AllowHosts(names ...string) {
	p := *a.hosts.Load()
	p.names = maps.Clone(p.names)
	p.addrs = maps.Clone(p.addrs)
	for _, n := range names {
		n = normalizeHost(n)
		if ip, err := netip.ParseAddr(n); err == nil {
			p.addrs[ip.Unmap()] = true
		} else if n != "" {
			p.names[n] = true
		}
	}
	a.hosts.Store(&p)
}

// hostPolicy is which Host values name the admin listener. DNS rebinding makes a browser on
// the appliance send a request for an attacker's name to this listener, with that name as Host
// and the page's origin the attacker's: the token-free endpoints (/metrics, /tools, /declaration)
// would be readable by the page. A name the operator did not give is therefore refused; an IP
// literal cannot be rebound (the browser connects to it directly and the origin is the
// listener's own), nor can localhost (browsers resolve it to loopback themselves). The port is
// not compared: a rebinding page chooses its port freely, while a port forward legitimately
// changes it.
type hostPolicy struct {
	names map[string]bool     // localhost, admin.listen's host when it is a name, admin.hosts
	addrs map[netip.Addr]bool // the bound address, admin.hosts' addresses
	anyIP bool                // bound to a wildcard: every address of the host reaches it
}

func newHostPolicy(listen string, bound net.Addr) *hostPolicy {
	p := &hostPolicy{names: map[string]bool{"localhost": true}, addrs: map[netip.Addr]bool{}}
	if h, _, err := net.SplitHostPort(listen); err == nil {
		if h = normalizeHost(h); h != "" {
			if ip, err := netip.ParseAddr(h); err == nil {
				p.addrs[ip.Unmap()] = true
			} else {
				p.names[h] = true
			}
		}
	}
	if ta, ok := bound.(*net.TCPAddr); ok {
		if ip, ok := netip.AddrFromSlice(ta.IP); ok {
			ip = ip.Unmap()
			p.addrs[ip] = true
			p.anyIP = ip.IsUnspecified()
		}
	}
	return p
}

// normalizeHost lower-cases a host name, drops one trailing dot (the same name in DNS) and
// an IPv6 literal's brackets.
func normalizeHost(h string) string {
	h = strings.ToLower(strings.TrimSpace(h))
	if strings.HasPrefix(h, "[") && strings.HasSuffix(h, "]") {
		return h[1 : len(h)-1]
	}
	return strings.TrimSuffix(h, ".")
}

// allows reports whether host (a Host value, or an absolute-form target's authority, with or
// without a port) names the listener.
func (p *hostPolicy) allows(host string) bool {
	if host == "" {
		return true // HTTP/1.0 without Host: no browser sends that, so nothing was rebound
	}
	h := host
	if hp, port, err := net.SplitHostPort(host); err == nil {
		if strings.Trim(port, "0123456789") != "" {
			return false // "localhost:1@evil.example" is no port
		}
		h = hp
	} else if strings.Count(host, ":") > 0 && !strings.HasPrefix(host, "[") {
		return false // an unbracketed IPv6 literal or a stray colon: not a Host a client sends
	}
	h = normalizeHost(h)
	if p.names[h] {
		return true
	}
	ip, err := netip.ParseAddr(h)
	if err != nil || ip.Zone() != "" {
		return false
	}
	ip = ip.Unmap()
	return ip.IsLoopback() || p.anyIP || p.addrs[ip]
}

// checkHost refuses, with 421 Misdirected Request, a request whose Host does not name the
// listener. Go's server takes r.Host from an absolute-form target's authority (RFC 9112 §3.2.2:
// the Host field is then ignored), so such targets are judged on the authority they name.
func (a *Server) checkHost(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !a.hosts.Load().allows(r.Host) {
			a.log.Debug("admin request for another host refused", "host", r.Host, "remote", r.RemoteAddr)
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.Header().Set("X-Content-Type-Options", "nosniff")
			w.Header().Set("Cache-Control", "no-store")
			w.WriteHeader(http.StatusMisdirectedRequest)
			fmt.Fprintf(w, "mcpintercept: Host %q does not name this admin listener; use localhost, a loopback address or the listener's address, or add the name to admin.hosts\n", r.Host)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// Addr is the bound address (useful when the configuration asked for port 0).
func (a *Server) Addr() net.Addr { return a.ln.Addr() }

// Start serves in a goroutine owned by the Server; Shutdown stops it.
func (a *Server) Start() {
	go func() {
		if err := a.srv.Serve(a.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			a.log.Error("admin listener stopped", "err", err)
		}
	}()
}

// SetReady flips /readyz.
func (a *Server) SetReady(v bool) { a.ready.Store(v) }

// AddReadiness makes /readyz also require check to pass; its error, under name, is the reason
// /readyz gives.
func (a *Server) AddReadiness(name string, check func() error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.checks = append(a.checks, readiness{name, check})
}

// Ready is what /readyz reports: nil when the steering is installed and every check passes.
func (a *Server) Ready() error {
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

// handle serves h at pattern (a ServeMux pattern, "GET /audit/checkpoint") on the admin listener.
func (a *Server) handle(pattern string, h http.Handler) { a.mux.Handle(pattern, h) }

// Handle adds an endpoint of another component (the federation's health). Call it before Start
// or at least before anyone may request pattern.
func (a *Server) Handle(pattern string, h http.Handler) { a.mux.Handle(pattern, h) }

// Shutdown stops the listener.
func (a *Server) Shutdown(ctx context.Context) error { return a.srv.Shutdown(ctx) }
