package appliance

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"syscall"

	"mcpintercept/auth"
	"mcpintercept/config"
	"mcpintercept/intercept/upstream"
)

// JWKSProbe is what `check --strict` found at one tokens.issuers[].jwks_url.
type JWKSProbe struct {
	Key  string // tokens.issuers[i].jwks_url
	URL  string
	Keys int   // signing keys the set holds
	Err  error // why it could not be used (nil: ok)
}

func (p JWKSProbe) String() string {
	if p.Err != nil {
		return fmt.Sprintf("%s %s: %v", p.Key, p.URL, p.Err)
	}
	return fmt.Sprintf("%s %s: ok: %d key(s)", p.Key, p.URL, p.Keys)
}

// ProbeJWKS fetches every tokens.issuers[].jwks_url once, as the running appliance would (the
// token check's HTTP client: the bypass dialer, system roots, no proxy, no redirect, 5 s, 1 MiB),
// for `check --strict`: a URL that does not answer would otherwise pass the check and answer
// every request with a token 503 at run time. Run unprivileged (no CAP_NET_ADMIN for the bypass
// mark), the fetch goes out unmarked. The probes run one after another; nil: no jwks_url.
func ProbeJWKS(ctx context.Context, cfg *config.Config) []JWKSProbe {
	return probeJWKS(ctx, cfg, probeDial(cfg), nil)
}

func probeJWKS(ctx context.Context, cfg *config.Config, dial func(context.Context, string, string) (net.Conn, error), roots *x509.CertPool) []JWKSProbe {
	var out []JWKSProbe
	for i, is := range cfg.Tokens.Issuers {
		if is.JWKSURL == "" {
			continue
		}
		p := JWKSProbe{Key: fmt.Sprintf("tokens.issuers[%d].jwks_url", i), URL: is.JWKSURL}
		p.Keys, p.Err = auth.ProbeJWKS(ctx, is.JWKSURL, dial, roots)
		out = append(out, p)
	}
	return out
}

// probeDial is the token check's dialer (the bypass mark, limits.connect_timeout), falling back to
// an unmarked dial when the mark cannot be set (check run without CAP_NET_ADMIN).
func probeDial(cfg *config.Config) func(context.Context, string, string) (net.Conn, error) {
	marked := upstream.BypassDialer(cfg.Steering.BypassMark, cfg.Limits.ConnectTimeout.Duration)
	plain := &net.Dialer{Timeout: cfg.Limits.ConnectTimeout.Duration}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := marked.DialContext(ctx, network, addr)
		if err != nil && errors.Is(err, syscall.EPERM) {
			return plain.DialContext(ctx, network, addr)
		}
		return c, err
	}
}
