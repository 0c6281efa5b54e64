package main

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"mcpintercept/appliance"
	"mcpintercept/config"
)

func TestParseExecFlags(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		ok   bool
		cas  []string
		err  string
	}{
		{"none", []string{"--", "true"}, true, nil, ""},
		{"one", []string{"--upstream-ca", "a.pem", "--", "true"}, true, []string{"a.pem"}, ""},
		{"repeated", []string{"--upstream-ca", "a.pem", "--upstream-ca=b.pem", "--level", "1", "--", "true"}, true, []string{"a.pem", "b.pem"}, ""},
		{"empty", []string{"--upstream-ca", "", "--", "true"}, false, nil, "empty file name"},
		{"no value", []string{"--upstream-ca"}, false, nil, "flag needs an argument"},
		{"no command", []string{"--upstream-ca", "a.pem"}, false, nil, "usage:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stderr bytes.Buffer
			ef, ok := parseExecFlags(tc.args, &stderr)
			if ok != tc.ok {
				t.Fatalf("ok %v, want %v (%s)", ok, tc.ok, stderr.String())
			}
			if !ok {
				if !strings.Contains(stderr.String(), tc.err) {
					t.Errorf("stderr %q, want %q", stderr.String(), tc.err)
				}
				return
			}
			if !reflect.DeepEqual(ef.upstreamCAs, tc.cas) || !reflect.DeepEqual(ef.argv, []string{"true"}) {
				t.Errorf("cas %q argv %q, want %q", ef.upstreamCAs, ef.argv, tc.cas)
			}
		})
	}
}

// privateCA writes a CA certificate to dir and returns its file and a server certificate it
// signed for mcp.internal.
func privateCA(t *testing.T, dir string) (string, *x509.Certificate) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "private test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	leafTmpl := &x509.Certificate{SerialNumber: big.NewInt(2), DNSNames: []string{"mcp.internal"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	leafDER, err := x509.CreateCertificate(rand.Reader, leafTmpl, ca, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, _ := x509.ParseCertificate(leafDER)
	f := filepath.Join(dir, "private-ca.pem")
	if err := os.WriteFile(f, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o644); err != nil {
		t.Fatal(err)
	}
	return f, leaf
}

func verifies(t *testing.T, cfg *config.Config, leaf *x509.Certificate) bool {
	t.Helper()
	pool, err := appliance.UpstreamRoots(cfg)
	if err != nil {
		t.Fatal(err)
	}
	_, err = leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: "mcp.internal"})
	return err == nil
}

// --upstream-ca adds to the pool upstream certificates are verified against, with or without
// --config; a config file for exec needs no mechanism.
func TestExecUpstreamCA(t *testing.T) {
	dir := t.TempDir()
	caFile, leaf := privateCA(t, dir)
	var stderr bytes.Buffer

	cfg, ok := execConfig("", nil, &stderr)
	if !ok || verifies(t, cfg, leaf) {
		t.Fatalf("zero config without --upstream-ca: ok %v, verifies a private CA's certificate (%s)", ok, stderr.String())
	}
	cfg, ok = execConfig("", []string{caFile}, &stderr)
	if !ok || !verifies(t, cfg, leaf) {
		t.Fatalf("zero config with --upstream-ca: ok %v, the private CA is not trusted (%s)", ok, stderr.String())
	}

	path := filepath.Join(dir, "exec.yaml")
	yaml := "ca:\n  dir: " + filepath.Join(dir, "ca") + "\nlog:\n  flows: \"off\"\nroutes:\n  - name: tls\n    match: {ports: [443]}\n    tls: terminate\n    level: 2\n"
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, ok = execConfig(path, []string{caFile}, &stderr)
	if !ok {
		t.Fatalf("a config without mechanism refused: %s", stderr.String())
	}
	if cfg.Mechanism != config.EBPF || !reflect.DeepEqual(cfg.Upstream.ExtraCAs, []string{caFile}) || !verifies(t, cfg, leaf) {
		t.Fatalf("mechanism %s, extra CAs %q, want ebpf and the flag's CA trusted", cfg.Mechanism, cfg.Upstream.ExtraCAs)
	}
	// run reads the same file with the default mechanism, which needs what exec does not.
	if _, err := config.Load(path, config.Overrides{}); err == nil || !strings.Contains(err.Error(), "intercept.destinations") {
		t.Errorf("config.Load without Exec: %v, want intercept.destinations required", err)
	}

	for _, bad := range []struct{ file, want string }{
		{filepath.Join(dir, "missing.pem"), "no such file"},
		{path, "no PEM certificate"},
	} {
		stderr.Reset()
		if _, ok := execConfig("", []string{bad.file}, &stderr); ok || !strings.Contains(stderr.String(), "--upstream-ca "+bad.file+": ") || !strings.Contains(stderr.String(), bad.want) {
			t.Errorf("--upstream-ca %s: ok %v, stderr %q, want %q", bad.file, ok, stderr.String(), bad.want)
		}
	}
}

// check --strict: an unusable JWKS URL goes to stderr and fails the check, a usable one is "ok"
// on stdout.
func TestCheckJWKSReport(t *testing.T) {
	ok := appliance.JWKSProbe{Key: "tokens.issuers[0].jwks_url", URL: "https://a/jwks", Keys: 2}
	bad := appliance.JWKSProbe{Key: "tokens.issuers[1].jwks_url", URL: "https://b/jwks", Err: os.ErrDeadlineExceeded}
	var out, errb bytes.Buffer
	if !checkJWKS([]appliance.JWKSProbe{ok}, "c.yaml", &out, &errb) || out.String() != "c.yaml: tokens.issuers[0].jwks_url https://a/jwks: ok: 2 key(s)\n" || errb.Len() != 0 {
		t.Fatalf("ok probe: stdout %q stderr %q", out.String(), errb.String())
	}
	out.Reset()
	if checkJWKS([]appliance.JWKSProbe{ok, bad}, "c.yaml", &out, &errb) ||
		!strings.Contains(errb.String(), "c.yaml: tokens.issuers[1].jwks_url https://b/jwks: i/o timeout") ||
		!strings.Contains(errb.String(), "1 JWKS URL(s) unusable") {
		t.Fatalf("bad probe: stdout %q stderr %q", out.String(), errb.String())
	}
}
