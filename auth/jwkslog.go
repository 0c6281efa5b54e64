package auth

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"
)

// JWKSLog says in the operational log why an issuer's keys could not be read when a token
// needed them: without it every such request is answered 503 and nothing says why. One line per
// issuer per refresh interval (a minute), however many requests, routes or Checkers share it:
// the appliance gives every route's Checker the same one.
type JWKSLog struct {
	log      *slog.Logger
	interval time.Duration

	mu   sync.Mutex
	last map[string]time.Time // issuer → when its failure was last logged
}

// NewJWKSLog logs to log (nil: nothing is logged).
func NewJWKSLog(log *slog.Logger) *JWKSLog {
	return &JWKSLog{log: log, interval: refreshInterval, last: map[string]time.Time{}}
}

// failed logs that issuer's keys at source (a JWKS URL or file) could not be read at now, unless
// that issuer's failure was logged less than an interval before. held is the number of keys
// still held from an earlier read (0: every token of the issuer gets 503).
func (l *JWKSLog) failed(now time.Time, issuer, source string, err error, held int) {
	if l == nil || l.log == nil {
		return
	}
	l.mu.Lock()
	if t, ok := l.last[issuer]; ok && now.Sub(t) < l.interval && !now.Before(t) {
		l.mu.Unlock()
		return
	}
	l.last[issuer] = now
	l.mu.Unlock()
	msg := "jwks: issuer keys unavailable; requests with this issuer's tokens are answered 503 until it answers"
	if held > 0 {
		msg = "jwks: refresh failed; keeping the keys read before"
	}
	l.log.Warn(msg, "issuer", issuer, "jwks", source, "err", err, "keys_held", held,
		"next_log_after", l.interval.String())
}

// ProbeJWKS fetches a JWKS URL once as a Checker would (the same client: dial, no proxy, no
// redirect, fetchTimeout, at most 1 MiB) and returns how many signing keys it holds; a set without
// one is an error, since no token could verify. roots nil: the system roots. For `check --strict`.
func ProbeJWKS(ctx context.Context, u string, dial func(ctx context.Context, network, addr string) (net.Conn, error), roots *x509.CertPool) (int, error) {
	if _, err := newIssuer(Issuer{Issuer: "probe", JWKSURL: u}, nil, time.Now); err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, fetchTimeout)
	defer cancel()
	set, err := fetchJWKS(ctx, newHTTPClient(dial, roots), u)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) || isTimeout(err) {
			return 0, fmt.Errorf("no answer within %v: %w", fetchTimeout, err)
		}
		return 0, err
	}
	if len(set.Keys) == 0 {
		return 0, errors.New("jwks: no public signing key in the set (no token could verify)")
	}
	return len(set.Keys), nil
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
