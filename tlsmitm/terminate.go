package tlsmitm

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"time"

	"mcpintercept/flowconn"
)

// OriginateConfig is how the appliance verifies the servers it re-originates TLS to.
type OriginateConfig struct {
	// Roots are the trusted roots: the system pool plus configured extra CAs.
	Roots *x509.CertPool
	// HandshakeTimeout bounds the upstream handshake.
	HandshakeTimeout time.Duration
}

// Originate runs a verified TLS client handshake over conn, an upstream TCP connection that is
// already dialled to the original destination. The server name is the client's SNI when it sent
// one (preserved, so virtual hosting and certificate selection work as for the client), else the
// original destination's IP, which then must appear in the certificate's IP SANs. ALPN offers
// only http/1.1, minimum TLS 1.2. Verification failures come back as *VerifyError.
func Originate(ctx context.Context, conn net.Conn, sni string, dst netip.Addr, cfg OriginateConfig) (*tls.Conn, error) {
	name := sni
	if name == "" {
		name = dst.Unmap().String()
	}
	tc := tls.Client(conn, &tls.Config{
		ServerName: name,
		RootCAs:    cfg.Roots,
		NextProtos: []string{"http/1.1"},
		MinVersion: tls.VersionTLS12,
	})
	if cfg.HandshakeTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cfg.HandshakeTimeout)
		defer cancel()
	}
	if err := tc.HandshakeContext(ctx); err != nil {
		if reason, ok := verifyReason(err); ok {
			return nil, &VerifyError{Name: name, Reason: reason, Err: err}
		}
		return nil, fmt.Errorf("upstream tls handshake with %s: %w", name, err)
	}
	return tc, nil
}

// VerifyError is an upstream certificate the appliance refuses to vouch for.
type VerifyError struct {
	Name   string
	Reason string // "expired", "unknown authority", "wrong name", ...
	Err    error
}

func (e *VerifyError) Error() string {
	return fmt.Sprintf("upstream certificate for %s rejected: %s: %v", e.Name, e.Reason, e.Err)
}

func (e *VerifyError) Unwrap() error { return e.Err }

func verifyReason(err error) (string, bool) {
	var inv x509.CertificateInvalidError
	var unk x509.UnknownAuthorityError
	var host x509.HostnameError
	switch {
	case errors.As(err, &inv):
		if inv.Reason == x509.Expired {
			return "expired or not yet valid", true
		}
		return "invalid certificate", true
	case errors.As(err, &unk):
		return "unknown authority (self-signed or untrusted issuer)", true
	case errors.As(err, &host):
		return "certificate is for another name", true
	}
	var cve *tls.CertificateVerificationError
	if errors.As(err, &cve) {
		return "verification failed", true
	}
	return "", false
}

// Terminate completes the client's TLS handshake as the server it addressed. peeked are the bytes
// Peek already consumed (the ClientHello); they are replayed to crypto/tls first (nil when client
// replays them itself, as a flowconn.Conn does). cert is the leaf presented for the name. The
// client's handshake is never started before the upstream's certificate was verified: call
// Originate first.
func Terminate(ctx context.Context, client net.Conn, peeked []byte, cert *tls.Certificate, timeout time.Duration) (*tls.Conn, error) {
	if len(peeked) > 0 {
		// Replayed to crypto/tls, then let go of: the tls.Conn keeps its connection for life.
		client = flowconn.Wrap(client, flowconn.Options{Prefix: peeked})
	}
	tc := tls.Server(client, &tls.Config{
		Certificates: []tls.Certificate{*cert},
		NextProtos:   []string{"http/1.1"},
		MinVersion:   tls.VersionTLS12,
	})
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	if err := tc.HandshakeContext(ctx); err != nil {
		return nil, fmt.Errorf("client tls handshake: %w", err)
	}
	return tc, nil
}

// RefuseHandshake answers a ClientHello with a fatal handshake_failure alert, so the client's
// handshake fails at once and visibly instead of hanging, and no certificate is presented.
func RefuseHandshake(w io.Writer) error {
	// TLS record: type alert (21), version TLS 1.2 (as TLS 1.3 records also say), length 2,
	// level fatal (2), description handshake_failure (40).
	_, err := w.Write([]byte{21, 3, 3, 0, 2, 2, 40})
	return err
}
