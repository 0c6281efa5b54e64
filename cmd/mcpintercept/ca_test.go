package main

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"path/filepath"
	"strings"
	"testing"

	"software.sslmate.com/src/go-pkcs12"

	"mcpintercept/pki"
)

// TestCAExportFormats: `ca export --format F` prints the CA certificate of the directory in each
// encoding, never a key; p12 is a trust store the same library decodes with the documented
// password.
func TestCAExportFormats(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ca")
	var out, errb bytes.Buffer
	if code := realMain([]string{"ca", "init", "--dir", dir}, &out, &errb); code != exitOK {
		t.Fatalf("ca init: exit %d: %s", code, errb.String())
	}
	ca, err := pki.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		format string
		certs  func(t *testing.T, b []byte) []*x509.Certificate
	}{
		{name: "pem", format: "pem", certs: func(t *testing.T, b []byte) []*x509.Certificate {
			block, _ := pem.Decode(b)
			if block == nil || block.Type != "CERTIFICATE" {
				t.Fatalf("not a PEM certificate: %q", b)
			}
			c, err := x509.ParseCertificates(block.Bytes)
			if err != nil {
				t.Fatal(err)
			}
			return c
		}},
		{name: "der", format: "der", certs: func(t *testing.T, b []byte) []*x509.Certificate {
			c, err := x509.ParseCertificates(b)
			if err != nil {
				t.Fatal(err)
			}
			return c
		}},
		{name: "p12", format: "p12", certs: func(t *testing.T, b []byte) []*x509.Certificate {
			// DecodeTrustStore fails on any bag that is not a trusted certificate, a key
			// bag included.
			c, err := pkcs12.DecodeTrustStore(b, "changeit")
			if err != nil {
				t.Fatalf("decode the p12 with the password the help names: %v", err)
			}
			if key, _, _, err := pkcs12.DecodeChain(b, "changeit"); err == nil || key != nil {
				t.Fatalf("the p12 holds a private key (%T)", key)
			}
			return c
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			if code := realMain([]string{"ca", "export", "--dir", dir, "--format", tc.format}, &out, &errb); code != exitOK {
				t.Fatalf("exit %d: %s", code, errb.String())
			}
			if bytes.Contains(out.Bytes(), []byte("PRIVATE KEY")) {
				t.Fatal("export printed a private key")
			}
			certs := tc.certs(t, out.Bytes())
			if len(certs) != 1 || !certs[0].Equal(ca.Cert) {
				t.Fatalf("exported %d certificate(s), want exactly the CA's", len(certs))
			}
		})
	}
	var help, errh bytes.Buffer
	if code := realMain([]string{"ca", "export", "--help"}, &help, &errh); code != exitOK || !strings.Contains(help.String(), `password "changeit"`) || !strings.Contains(help.String(), "p12") {
		t.Errorf("ca export --help (exit %d) does not document the p12 password:\n%s", code, help.String())
	}
}
