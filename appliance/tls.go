package appliance

import (
	"crypto/x509"
	"fmt"
	"io"
	"log/slog"
	"os"

	"mcpintercept/config"
	"mcpintercept/pki"
)

// UsesTerminate reports whether any route (the default route included) terminates TLS, and so
// needs the CA.
func UsesTerminate(cfg *config.Config) bool {
	for _, r := range cfg.Routes {
		if r.TLS == config.TLSTerminate {
			return true
		}
	}
	if d := cfg.DefaultRoute; d != nil && d.Route != nil && d.Route.TLS == config.TLSTerminate {
		return true
	}
	return false
}

// upstreamRoots is the system pool plus the configured extra CAs.
func upstreamRoots(cfg *config.Config) (*x509.CertPool, error) {
	pool, err := x509.SystemCertPool()
	if err != nil || pool == nil {
		pool = x509.NewCertPool()
	}
	for _, f := range cfg.Upstream.ExtraCAs {
		pem, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("upstream_tls.extra_cas: %w", err)
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("upstream_tls.extra_cas: no PEM certificate in %s", f)
		}
	}
	return pool, nil
}

// loadMinter loads the CA (creating it on first start) and returns a leaf minter.
func loadMinter(cfg *config.Config, log *slog.Logger) (*pki.Minter, error) {
	ca, created, err := pki.LoadOrInit(cfg.CA.Dir)
	if err != nil {
		return nil, fmt.Errorf("ca: %w", err)
	}
	if created {
		log.Warn("created a new appliance CA; clients must trust it to accept terminated TLS (mcpintercept ca export)", "dir", cfg.CA.Dir)
	}
	return pki.NewMinter(ca, pki.MinterOptions{CacheSize: cfg.TLS.LeafCache, Validity: cfg.TLS.LeafValidity.Duration}), nil
}

// NewLogger is the appliance's text logger at level (debug, info, warn, error; info when unknown).
func NewLogger(level string, w io.Writer) *slog.Logger {
	return NewLoggerFormat(level, config.LogText, w)
}

// NewLoggerFormat is NewLogger in log.format: config.LogJSON writes one JSON object a line
// (slog's JSON handler: time, level, msg, then the attributes); anything else, text.
func NewLoggerFormat(level, format string, w io.Writer) *slog.Logger {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		l = slog.LevelInfo
	}
	o := &slog.HandlerOptions{Level: l}
	if format == config.LogJSON {
		return slog.New(slog.NewJSONHandler(w, o))
	}
	return slog.New(slog.NewTextHandler(w, o))
}

// UpstreamRoots is the pool upstream certificates are verified against: the system roots plus
// upstream_tls.extra_cas (and exec's --upstream-ca, which adds to them).
func UpstreamRoots(cfg *config.Config) (*x509.CertPool, error) { return upstreamRoots(cfg) }
