package config

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"net/netip"
	"os"
)

// Inbound is Sidecar mode (the draft's Sidecar): connections arriving from other hosts for the
// co-located server's ports are steered into the appliance and delivered to the server with the
// client's own source address.
type Inbound struct {
	Ports      []PortRange  `yaml:"ports"`       // the server's ports; empty: inbound off
	Addresses  []netip.Addr `yaml:"addresses"`   // the server's local addresses; empty: any local address
	ListenPort uint16       `yaml:"listen_port"` // the inbound transparent listener's port, default DefaultInboundPort
	TLS        InboundTLS   `yaml:"tls"`         // the server's own certificate, presented on terminate routes
}

// InboundTLS is the co-located server's own certificate and key (files, PEM), which the appliance
// presents to inbound clients on terminate routes. Relative to the config file.
type InboundTLS struct {
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
}

// DefaultInboundPort is the inbound transparent listener's port.
const DefaultInboundPort uint16 = 15006

// InboundOn reports whether inbound (Sidecar mode) is configured.
func (c *Config) InboundOn() bool { return len(c.Inbound.Ports) > 0 }

// maxInboundPEM bounds a certificate or key file read while validating: a chain of a few
// certificates is a few KiB.
const maxInboundPEM = 1 << 20

// inbound relates the inbound section to the rest of the file. The table checks each key's own
// value; with ports empty (off) any other key set under inbound is refused as having no effect.
func (v *validator) inbound(c *Config) {
	in := c.Inbound
	const noEffect = "has no effect without inbound.ports: list the co-located server's ports, e.g. [8443], or remove it"
	switch {
	case in.TLS.CertFile != "" && in.TLS.KeyFile == "":
		v.check("inbound.tls.key_file", "required with cert_file: the certificate's private key (PEM)")
	case in.TLS.CertFile == "" && in.TLS.KeyFile != "":
		v.check("inbound.tls.cert_file", "required with key_file: the server's certificate (PEM)")
	}
	if !c.InboundOn() {
		if len(in.Addresses) > 0 {
			v.check("inbound.addresses", noEffect)
		}
		if in.TLS.CertFile != "" {
			v.check("inbound.tls.cert_file", noEffect)
		}
		if in.TLS.KeyFile != "" {
			v.check("inbound.tls.key_file", noEffect)
		}
		return
	}
	lp, port := in.ListenPort, c.Listen.Port
	if lp != 0 && lp == port {
		v.checkAlt("inbound.listen_port", "listen.port",
			fmt.Sprintf("must differ from listen.port (both are %d): the inbound listener and the transparent listeners need ports of their own", lp))
	}
	for i, r := range in.Ports {
		if checkPortRange(r) != "" {
			continue
		}
		k := fmt.Sprintf("inbound.ports[%d]", i)
		if lp != 0 && r.Contains(lp) {
			v.checkAlt("inbound.listen_port", k,
				fmt.Sprintf("%d lies inside %s (%s): connections to the inbound listener would be steered back into it (a loop)", lp, k, r))
		}
		if port != 0 && r.Contains(port) {
			v.checkAlt(k, "listen.port",
				fmt.Sprintf("listen.port (%d) lies inside it: connections to the transparent listeners would be steered to the inbound listener (a loop)", port))
		}
	}
	t := in.TLS
	if t.CertFile != "" && t.KeyFile != "" && checkPath(t.CertFile) == "" && checkPath(t.KeyFile) == "" {
		certKey, keyKey, msg := checkInboundKeyPair(t.CertFile, t.KeyFile)
		if certKey {
			v.check("inbound.tls.cert_file", msg)
		}
		if keyKey {
			v.check("inbound.tls.key_file", msg)
		}
	}
}

// checkInboundAddr refuses the addresses no connection from another host arrives for.
func checkInboundAddr(a netip.Addr) string {
	u := a.Unmap()
	switch {
	case !a.IsValid():
		return "invalid address"
	case a.Zone() != "":
		return fmt.Sprintf("%s: an address with a zone is not supported", a)
	case u.IsLoopback():
		return fmt.Sprintf("%s is a loopback address: loopback traffic is never steered inbound (it never arrives from another host); give the server's address other hosts connect to, or leave addresses out for any local address", a)
	case u.IsUnspecified():
		return fmt.Sprintf("%s is the unspecified address: leave addresses out for any local address", a)
	case u.IsMulticast(), u.IsLinkLocalMulticast():
		return fmt.Sprintf("%s is a multicast address: give a unicast address of this host", a)
	}
	return ""
}

// checkInboundKeyPair loads the certificate and key as the appliance will (tls.X509KeyPair) and
// says what is wrong, and whether the cert_file or the key_file is to blame. Only regular files
// are read, and at most maxInboundPEM bytes of each, so that a device or a FIFO named by mistake
// cannot hang validation.
func checkInboundKeyPair(certFile, keyFile string) (certKey, keyKey bool, msg string) {
	certPEM, msg := readInboundPEM(certFile)
	if msg != "" {
		return true, false, msg
	}
	keyPEM, msg := readInboundPEM(keyFile)
	if msg != "" {
		return false, true, msg
	}
	var found bool
	for rest := certPEM; ; {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		found = true
		if _, err := x509.ParseCertificate(b.Bytes); err != nil {
			return true, false, fmt.Sprintf("%s: %v", certFile, err)
		}
	}
	if !found {
		return true, false, fmt.Sprintf("%s holds no PEM certificate (-----BEGIN CERTIFICATE-----)", certFile)
	}
	if _, err := tls.X509KeyPair(certPEM, keyPEM); err != nil {
		return false, true, fmt.Sprintf("%s does not load with cert_file %s: %v", keyFile, certFile, err)
	}
	return false, false, ""
}

func readInboundPEM(path string) ([]byte, string) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err.Error()
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Sprintf("%s is not a regular file", path)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err.Error()
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxInboundPEM+1))
	switch {
	case err != nil:
		return nil, err.Error()
	case len(b) > maxInboundPEM:
		return nil, fmt.Sprintf("%s is larger than %d bytes: not a PEM certificate or key", path, maxInboundPEM)
	}
	return b, ""
}
