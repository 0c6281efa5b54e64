package appliance

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"

	"mcpintercept/config"
	"mcpintercept/engine"
	"mcpintercept/intercept"
	"mcpintercept/intercept/upstream"
)

// ModeSidecar is the draft's mode of the flows the inbound section steers.
const ModeSidecar = "Sidecar"

// inbound is Sidecar mode (the inbound: section): its steering, its transparent listeners and the
// source their flows are served with (the transparent dialer, the server's own certificate).
type inbound struct {
	steer *intercept.Inbound
	lns   []*net.TCPListener
	src   engine.Source
	// stops are ServeSource's, once served.
	stops []func()
}

// openInbound binds the inbound listeners and loads the server's certificate (New: everything
// that can fail before anything is installed). Nothing when inbound is off.
func (a *Appliance) openInbound(ctx context.Context, cfg *config.Config) error {
	if !cfg.InboundOn() {
		return nil
	}
	in := &inbound{
		steer: intercept.NewInbound(InboundOptions(cfg)),
		src: engine.Source{
			Steering:       nil,
			Dialer:         upstream.TransparentDialer(cfg.Steering.BypassMark, cfg.Limits.ConnectTimeout.Duration),
			Mode:           ModeSidecar,
			DialFromClient: true,
		},
	}
	in.src.Steering = in.steer
	if t := cfg.Inbound.TLS; t.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return fmt.Errorf("inbound.tls: %w", err)
		}
		leaf, err := x509.ParseCertificate(cert.Certificate[0])
		if err != nil {
			return fmt.Errorf("inbound.tls.cert_file: %w", err)
		}
		cert.Leaf = leaf
		// The re-originated connection to the server is verified against the server's own
		// certificate: the appliance vouches for that server and no other.
		roots := x509.NewCertPool()
		roots.AddCert(leaf)
		in.src.Certificate, in.src.UpstreamRoots = &cert, roots
	}
	lns, err := intercept.Listen(ctx, cfg.Listen.Addresses, cfg.Inbound.ListenPort, true)
	if err != nil {
		return fmt.Errorf("inbound: %w", err)
	}
	in.lns = lns
	a.inbound = in
	return nil
}

// InboundOptions maps the inbound section onto the steering's options.
func InboundOptions(cfg *config.Config) intercept.InboundOptions {
	var ports []intercept.PortRange
	for _, p := range cfg.Inbound.Ports {
		ports = append(ports, intercept.PortRange{From: p.From, To: p.To})
	}
	return intercept.InboundOptions{
		Ports: ports, Addresses: cfg.Inbound.Addresses,
		Listen: cfg.Listen.Addresses, ListenPort: cfg.Inbound.ListenPort,
		Mark: cfg.Steering.Mark, BypassMark: cfg.Steering.BypassMark,
		RouteTable: cfg.Steering.RouteTable, RulePriority: cfg.Steering.RulePriority,
	}
}

// startInbound serves the inbound listeners, then installs the inbound steering (Start, under
// a.mu). On error nothing of it stays installed.
func (a *Appliance) startInbound(ctx context.Context) error {
	in := a.inbound
	if in == nil {
		return nil
	}
	for _, ln := range in.lns {
		stop, err := a.serveSource(ln, in.src)
		if err != nil {
			return err
		}
		in.stops = append(in.stops, stop)
	}
	if err := in.steer.Install(ctx); err != nil {
		return fmt.Errorf("install inbound steering: %w", err)
	}
	a.info("inbound steering installed (Sidecar)", "ports", fmt.Sprint(a.cfg.Inbound.Ports),
		"listen_port", a.cfg.Inbound.ListenPort)
	return nil
}

// removeInbound takes the inbound steering away (Stop, after the drain).
func (a *Appliance) removeInbound(ctx context.Context) error {
	if a.inbound == nil {
		return nil
	}
	if err := a.inbound.steer.Remove(ctx); err != nil {
		a.log.Error("remove inbound steering; run `mcpintercept cleanup`", "err", err)
		return fmt.Errorf("remove inbound steering: %w", err)
	}
	a.info("inbound steering removed")
	return nil
}

// closeInbound closes listeners that were never served (New failed after openInbound).
func (a *Appliance) closeInbound() {
	if a.inbound == nil {
		return
	}
	for _, ln := range a.inbound.lns {
		ln.Close()
	}
}
