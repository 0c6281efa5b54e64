package config

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// inboundOn is a valid inbound section on line 4 of a file, its ports on line 5.
const inboundOn = minimal + "inbound:\n  ports: [8443]\n"

func TestInboundDefaults(t *testing.T) {
	for _, tt := range []struct {
		name, src string
		want      Inbound
	}{
		{"no section: off, with the listener's default port", minimal, Inbound{ListenPort: DefaultInboundPort}},
		{"empty section", minimal + "inbound: {}\n", Inbound{ListenPort: DefaultInboundPort}},
		{"ports only: on, listen_port 15006", inboundOn, Inbound{Ports: []PortRange{{8443, 8443}}, ListenPort: 15006}},
		{"every key but tls", minimal + "inbound:\n  ports: [8443, \"9000-9010\"]\n  addresses: [10.0.0.5, \"fd00::5\", \"fe80::5\"]\n  listen_port: 15100\n",
			Inbound{Ports: []PortRange{{8443, 8443}, {9000, 9010}},
				Addresses:  []netip.Addr{netip.MustParseAddr("10.0.0.5"), netip.MustParseAddr("fd00::5"), netip.MustParseAddr("fe80::5")},
				ListenPort: 15100}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := mustParse(t, tt.src, Overrides{})
			if !reflect.DeepEqual(c.Inbound, tt.want) {
				t.Errorf("got  %+v\nwant %+v", c.Inbound, tt.want)
			}
			if c.InboundOn() != (len(tt.want.Ports) > 0) {
				t.Errorf("InboundOn() = %v", c.InboundOn())
			}
			if err := c.Validate(); err != nil {
				t.Errorf("does not re-validate: %v", err)
			}
			roundTrip(t, c)
		})
	}
	t.Run("Default has the section's defaults", func(t *testing.T) {
		if got := Default(NftablesTProxy).Inbound; !reflect.DeepEqual(got, Inbound{ListenPort: DefaultInboundPort}) {
			t.Errorf("got %+v", got)
		}
	})
}

// TestInboundTLS: the certificate and key are relative to the config file, and load.
func TestInboundTLS(t *testing.T) {
	src := inboundOn + "  tls: {cert_file: pki/inbound.pem, key_file: pki/inbound.key}\n"
	c, err := Parse("testdata/sidecar.yaml", []byte(src), Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	want := InboundTLS{CertFile: filepath.Join("testdata", "pki", "inbound.pem"), KeyFile: filepath.Join("testdata", "pki", "inbound.key")}
	if c.Inbound.TLS != want {
		t.Errorf("tls = %+v, want %+v", c.Inbound.TLS, want)
	}
	if err := c.Validate(); err != nil {
		t.Errorf("does not re-validate: %v", err)
	}
	roundTrip(t, c)
}

// TestInboundExternal: an appliance whose integration steers only inbound connections needs no
// intercept section, as a federation-only one does not; another mechanism still does.
func TestInboundExternal(t *testing.T) {
	src := "mechanism: external\nlisten: {addresses: [127.0.0.1]}\ninbound: {ports: [8443]}\n"
	c := mustParse(t, src, Overrides{})
	if !c.InboundOn() || len(c.Intercept.Destinations) != 0 {
		t.Errorf("inbound %+v, intercept %+v", c.Inbound, c.Intercept)
	}
	if err := c.Validate(); err != nil {
		t.Errorf("does not re-validate: %v", err)
	}
	_, err := Parse("test.yaml", []byte("inbound: {ports: [8443]}\n"), Overrides{})
	if err == nil || !strings.Contains(err.Error(), "intercept.destinations: required") {
		t.Errorf("nftables-tproxy with inbound only: %v, want intercept.destinations required", err)
	}
	_, err = Parse("test.yaml", []byte("mechanism: external\nlisten: {addresses: [127.0.0.1]}\ninbound: {addresses: [10.0.0.5]}\n"), Overrides{})
	if err == nil || !strings.Contains(err.Error(), "intercept.destinations: required") {
		t.Errorf("external with inbound off: %v, want intercept.destinations required", err)
	}
}

// TestInboundErrors pins every refusal of the section with its position and its exact text.
func TestInboundErrors(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cert, key := filepath.Join("testdata", "pki", "inbound.pem"), filepath.Join("testdata", "pki", "inbound.key")
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	otherKey := write("other.key", pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))
	notPEM := write("not.pem", []byte("hello\n"))
	badCert := write("bad.pem", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte("not DER")}))
	missing := filepath.Join(dir, "missing.pem")
	tlsOn := func(c, k string) string {
		return inboundOn + "  tls: {cert_file: '" + c + "', key_file: '" + k + "'}\n"
	} // line 6
	sec := func(body string) string { return minimal + "inbound:\n" + body } // body from line 5
	for _, tt := range []struct {
		name, src string
		want      []string
	}{
		// listen_port: its own range, listen.port, the ports steered.
		{"listen_port 0", sec("  ports: [8443]\n  listen_port: 0\n"), []string{"test.yaml:6:16: inbound.listen_port: must be between 1 and 65535, got 0"}},
		{"listen_port is listen.port", sec("  ports: [8443]\n  listen_port: 15001\n"), []string{
			"test.yaml:6:16: inbound.listen_port: must differ from listen.port (both are 15001): the inbound listener and the transparent listeners need ports of their own"}},
		{"listen.port is the default listen_port", minimal + "listen: {port: 15006}\n" + "inbound: {ports: [8443]}\n", []string{
			"test.yaml:4:16: inbound.listen_port: must differ from listen.port (both are 15006): the inbound listener and the transparent listeners need ports of their own"}},
		{"listen_port inside the ports", sec("  ports: [8443, \"9000-9010\"]\n  listen_port: 9005\n"), []string{
			"test.yaml:6:16: inbound.listen_port: 9005 lies inside inbound.ports[1] (9000-9010): connections to the inbound listener would be steered back into it (a loop)"}},
		{"the default listen_port inside the ports", sec("  ports: [\"15005-15010\"]\n"), []string{
			"test.yaml:5:11: inbound.listen_port: 15006 lies inside inbound.ports[0] (15005-15010): connections to the inbound listener would be steered back into it (a loop)"}},
		{"listen.port inside the ports", sec("  ports: [8443, 15001]\n"), []string{
			"test.yaml:5:17: inbound.ports[1]: listen.port (15001) lies inside it: connections to the transparent listeners would be steered to the inbound listener (a loop)"}},
		{"a port of 0", sec("  ports: [0]\n"), []string{"test.yaml:5:11: inbound.ports[0]: must be between 1 and 65535, got 0"}},

		// addresses.
		{"loopback address", sec("  ports: [8443]\n  addresses: [10.0.0.5, 127.0.0.1, \"::1\", \"::ffff:127.0.0.2\"]\n"), []string{
			"test.yaml:6:25: inbound.addresses[1]: 127.0.0.1 is a loopback address: loopback traffic is never steered inbound (it never arrives from another host); give the server's address other hosts connect to, or leave addresses out for any local address",
			"test.yaml:6:36: inbound.addresses[2]: ::1 is a loopback address: loopback traffic is never steered inbound (it never arrives from another host); give the server's address other hosts connect to, or leave addresses out for any local address",
			"test.yaml:6:43: inbound.addresses[3]: ::ffff:127.0.0.2 is a loopback address: loopback traffic is never steered inbound (it never arrives from another host); give the server's address other hosts connect to, or leave addresses out for any local address"}},
		{"unspecified address", sec("  ports: [8443]\n  addresses: [0.0.0.0, \"::\"]\n"), []string{
			"test.yaml:6:15: inbound.addresses[0]: 0.0.0.0 is the unspecified address: leave addresses out for any local address",
			"test.yaml:6:24: inbound.addresses[1]: :: is the unspecified address: leave addresses out for any local address"}},
		{"multicast and link-local multicast", sec("  ports: [8443]\n  addresses: [224.0.0.1, \"ff02::1\", \"ff05::2\"]\n"), []string{
			"test.yaml:6:15: inbound.addresses[0]: 224.0.0.1 is a multicast address: give a unicast address of this host",
			"test.yaml:6:26: inbound.addresses[1]: ff02::1 is a multicast address: give a unicast address of this host",
			"test.yaml:6:37: inbound.addresses[2]: ff05::2 is a multicast address: give a unicast address of this host"}},
		{"address with a zone", sec("  ports: [8443]\n  addresses: [\"fe80::1%eth0\"]\n"), []string{
			"test.yaml:6:15: inbound.addresses[0]: fe80::1%eth0: an address with a zone is not supported"}},
		{"duplicate address", sec("  ports: [8443]\n  addresses: [10.0.0.5, 10.0.0.5]\n"), []string{
			"test.yaml:6:25: inbound.addresses[1]: duplicate of inbound.addresses[0] (10.0.0.5)"}},
		{"not an address", sec("  ports: [8443]\n  addresses: [10.0.0.0/8]\n"), []string{
			`test.yaml:6:15: inbound.addresses[0]: invalid IP address "10.0.0.0/8"`}},

		// Off: a key that would take effect only with ports.
		{"addresses without ports", sec("  addresses: [10.0.0.5]\n"), []string{
			"test.yaml:5:14: inbound.addresses: has no effect without inbound.ports: list the co-located server's ports, e.g. [8443], or remove it"}},
		{"tls without ports: nothing loaded", sec("  ports: []\n  tls: {cert_file: '" + missing + "', key_file: '" + missing + "'}\n"), []string{
			"test.yaml:6:20: inbound.tls.cert_file: has no effect without inbound.ports: list the co-located server's ports, e.g. [8443], or remove it",
			"test.yaml:6:" + strconv.Itoa(34+len(missing)) + ": inbound.tls.key_file: has no effect without inbound.ports: list the co-located server's ports, e.g. [8443], or remove it"}},

		// tls: both or neither, and the pair must load.
		{"cert_file without key_file", inboundOn + "  tls: {cert_file: c.pem}\n", []string{
			"test.yaml:6:3: inbound.tls.key_file: required with cert_file: the certificate's private key (PEM)"}},
		{"key_file without cert_file", inboundOn + "  tls: {key_file: c.key}\n", []string{
			"test.yaml:6:3: inbound.tls.cert_file: required with key_file: the server's certificate (PEM)"}},
		{"cert_file missing", tlsOn(missing, key), []string{
			"test.yaml:6:20: inbound.tls.cert_file: stat " + missing + ": no such file or directory"}},
		{"key_file missing", tlsOn(cert, missing), []string{
			"test.yaml:6:" + strconv.Itoa(34+len(cert)) + ": inbound.tls.key_file: stat " + missing + ": no such file or directory"}},
		{"cert_file a directory", tlsOn(dir, key), []string{
			"test.yaml:6:20: inbound.tls.cert_file: " + dir + " is not a regular file"}},
		{"cert_file not PEM", tlsOn(notPEM, key), []string{
			"test.yaml:6:20: inbound.tls.cert_file: " + notPEM + " holds no PEM certificate (-----BEGIN CERTIFICATE-----)"}},
		{"cert_file a key", tlsOn(key, key), []string{
			"test.yaml:6:20: inbound.tls.cert_file: " + key + " holds no PEM certificate (-----BEGIN CERTIFICATE-----)"}},
		{"cert_file not a certificate", tlsOn(badCert, key), []string{
			"test.yaml:6:20: inbound.tls.cert_file: " + badCert + ": x509: malformed certificate"}},
		{"key_file of another certificate", tlsOn(cert, otherKey), []string{
			"test.yaml:6:" + strconv.Itoa(34+len(cert)) + ": inbound.tls.key_file: " + otherKey + " does not load with cert_file " + cert + ": tls: private key does not match public key"}},
		{"key_file a certificate", tlsOn(cert, cert), []string{
			"test.yaml:6:" + strconv.Itoa(34+len(cert)) + ": inbound.tls.key_file: " + cert + " does not load with cert_file " + cert + ": tls: found a certificate rather than a key in the PEM for the private key"}},

		{"unknown key", sec("  prots: [8443]\n"), []string{
			`test.yaml:5:3: inbound.prots: unknown key "prots" (valid: ports, addresses, listen_port, tls)`}},
	} {
		t.Run(tt.name, func(t *testing.T) { wantParseErrors(t, tt.src, tt.want) })
	}
}

// TestInboundValidateInCode: a config built in code is held to the same rules.
func TestInboundValidateInCode(t *testing.T) {
	c := Default(NftablesTProxy)
	c.Intercept.Destinations = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	c.Intercept.Ports = []PortRange{{443, 443}}
	c.Inbound.Ports = []PortRange{{8443, 8443}}
	if err := c.Validate(); err != nil {
		t.Fatalf("valid: %v", err)
	}
	c.Inbound.Addresses = []netip.Addr{netip.IPv6Loopback()}
	c.Inbound.ListenPort = c.Listen.Port
	err := c.Validate()
	for _, want := range []string{"inbound.addresses[0]: ::1 is a loopback address", "inbound.listen_port: must differ from listen.port"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v, want %q", err, want)
		}
	}
}
