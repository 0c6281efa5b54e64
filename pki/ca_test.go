package pki

import (
	"bytes"
	"crypto"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"software.sslmate.com/src/go-pkcs12"
)

func mustExport(t *testing.T, ca *CA, format string) []byte {
	t.Helper()
	b, err := ca.Export(format)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mode(t *testing.T, path string) os.FileMode {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode().Perm()
}

func TestInitFileModes(t *testing.T) {
	// A restrictive umask must not change the modes, and a permissive one must not loosen them.
	for _, umask := range []int{0o022, 0o077, 0o000} {
		t.Run(fmt.Sprintf("umask%04o", umask), func(t *testing.T) {
			old := setUmask(umask)
			defer setUmask(old)
			dir := filepath.Join(t.TempDir(), "nested", "ca")
			ca, err := Init(dir, false)
			if err != nil {
				t.Fatal(err)
			}
			for _, tc := range []struct {
				name string
				path string
				want os.FileMode
			}{
				{"dir", dir, 0o700},
				{"cert", filepath.Join(dir, CertFile), 0o644},
				{"key", filepath.Join(dir, KeyFile), 0o600},
				{"lock", filepath.Join(dir, LockFile), 0o600},
			} {
				if got := mode(t, tc.path); got != tc.want {
					t.Errorf("%s mode = %04o, want %04o", tc.name, got, tc.want)
				}
			}
			entries, _ := os.ReadDir(dir)
			var names []string
			for _, e := range entries {
				names = append(names, e.Name())
			}
			if want := []string{LockFile, KeyFile, CertFile}; !slices.Equal(names, want) {
				t.Errorf("dir holds %q, want %q (temp files left behind?)", names, want)
			}
			if ca.Dir != dir {
				t.Errorf("Dir = %q, want %q", ca.Dir, dir)
			}
		})
	}
}

func TestInitCertificate(t *testing.T) {
	ca, err := Init(t.TempDir(), false)
	if err != nil {
		t.Fatal(err)
	}
	c := ca.Cert
	if !c.IsCA || !c.BasicConstraintsValid {
		t.Error("not a CA")
	}
	if c.MaxPathLen != 0 || !c.MaxPathLenZero {
		t.Errorf("MaxPathLen = %d (zero %v), want 0 (true)", c.MaxPathLen, c.MaxPathLenZero)
	}
	if want := x509.KeyUsageCertSign | x509.KeyUsageCRLSign; c.KeyUsage != want {
		t.Errorf("KeyUsage = %v, want %v", c.KeyUsage, want)
	}
	if c.PublicKeyAlgorithm != x509.ECDSA {
		t.Errorf("key algorithm = %v, want ECDSA", c.PublicKeyAlgorithm)
	}
	if !strings.HasPrefix(c.Subject.CommonName, "mcpintercept CA ") || len(c.Subject.CommonName) <= len("mcpintercept CA ") {
		t.Errorf("CN = %q", c.Subject.CommonName)
	}
	if life := c.NotAfter.Sub(c.NotBefore); life < 10*365*24*60*60*1e9 {
		t.Errorf("lifetime = %v, want >= 10 years", life)
	}
	if err := c.CheckSignatureFrom(c); err != nil {
		t.Errorf("self-signature: %v", err)
	}
	other, err := Init(t.TempDir(), false)
	if err != nil {
		t.Fatal(err)
	}
	if other.Cert.Subject.CommonName == c.Subject.CommonName {
		t.Error("two CAs share a CN; the random id is missing")
	}
}

func TestInitRefusesOverwrite(t *testing.T) {
	for _, tc := range []struct {
		name    string
		present []string
	}{
		{"both", []string{CertFile, KeyFile}},
		{"cert only", []string{CertFile}},
		{"key only", []string{KeyFile}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for _, f := range tc.present {
				if err := os.WriteFile(filepath.Join(dir, f), []byte("old"), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			_, err := Init(dir, false)
			if err == nil || !strings.Contains(err.Error(), "use --force") {
				t.Fatalf("Init without force = %v, want an error saying use --force", err)
			}
			for _, f := range tc.present {
				if b, _ := os.ReadFile(filepath.Join(dir, f)); string(b) != "old" {
					t.Errorf("%s was modified", f)
				}
			}
			if _, err := Init(dir, true); err != nil {
				t.Fatalf("Init with force: %v", err)
			}
			if _, err := Load(dir); err != nil {
				t.Fatalf("Load after forced Init: %v", err)
			}
		})
	}
}

func TestLoadRoundTrip(t *testing.T) {
	dir := t.TempDir()
	ca, err := Init(dir, false)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !got.Cert.Equal(ca.Cert) {
		t.Error("loaded certificate differs")
	}
	if !bytes.Equal(got.CertPEM, ca.CertPEM) {
		t.Error("loaded CertPEM differs")
	}
	if !got.Key.Public().(interface{ Equal(crypto.PublicKey) bool }).Equal(ca.Key.Public()) {
		t.Error("loaded key differs")
	}
}

func TestLoadRejects(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, dir string)
		want  []string
	}{
		{
			name:  "group readable key",
			setup: func(t *testing.T, dir string) { chmod(t, filepath.Join(dir, KeyFile), 0o640) },
			want:  []string{KeyFile, "0640", "chmod 600"},
		},
		{
			name:  "world writable key",
			setup: func(t *testing.T, dir string) { chmod(t, filepath.Join(dir, KeyFile), 0o602) },
			want:  []string{KeyFile, "0602", "chmod 600"},
		},
		{
			name: "key of another CA",
			setup: func(t *testing.T, dir string) {
				other := t.TempDir()
				if _, err := Init(other, false); err != nil {
					t.Fatal(err)
				}
				copyFile(t, filepath.Join(other, KeyFile), filepath.Join(dir, KeyFile), 0o600)
			},
			want: []string{"does not match"},
		},
		{
			name:  "missing cert",
			setup: func(t *testing.T, dir string) { os.Remove(filepath.Join(dir, CertFile)) },
			want:  []string{"read ca certificate"},
		},
		{
			name:  "missing key",
			setup: func(t *testing.T, dir string) { os.Remove(filepath.Join(dir, KeyFile)) },
			want:  []string{"open ca key"},
		},
		{
			name: "garbage key",
			setup: func(t *testing.T, dir string) {
				os.WriteFile(filepath.Join(dir, KeyFile), []byte("not a key"), 0o600)
			},
			want: []string{"no PEM block"},
		},
		{
			name: "leaf instead of CA",
			setup: func(t *testing.T, dir string) {
				ca, err := Load(dir)
				if err != nil {
					t.Fatal(err)
				}
				leaf, err := NewMinter(ca, MinterOptions{}).Leaf("example.com")
				if err != nil {
					t.Fatal(err)
				}
				writePEM(t, filepath.Join(dir, CertFile), "CERTIFICATE", leaf.Certificate[0], 0o644)
			},
			want: []string{"not a CA"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if _, err := Init(dir, false); err != nil {
				t.Fatal(err)
			}
			tc.setup(t, dir)
			_, err := Load(dir)
			if err == nil {
				t.Fatal("Load succeeded")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

func TestLoadOrInit(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ca")
	ca, created, err := LoadOrInit(dir)
	if err != nil || !created {
		t.Fatalf("first LoadOrInit = created %v, %v; want created", created, err)
	}
	again, created, err := LoadOrInit(dir)
	if err != nil || created {
		t.Fatalf("second LoadOrInit = created %v, %v; want loaded", created, err)
	}
	if !again.Cert.Equal(ca.Cert) {
		t.Error("second LoadOrInit returned a different CA")
	}
	os.Remove(filepath.Join(dir, CertFile))
	if _, _, err := LoadOrInit(dir); err == nil {
		t.Error("LoadOrInit replaced a half-present CA")
	}
	if _, err := os.Stat(filepath.Join(dir, CertFile)); err == nil {
		t.Error("LoadOrInit recreated the certificate next to the old key")
	}
}

func TestExport(t *testing.T) {
	ca, err := Init(t.TempDir(), false)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		format string
		parse  func([]byte) ([]byte, error)
	}{
		{"pem", "pem", func(b []byte) ([]byte, error) {
			block, rest := pem.Decode(b)
			if block == nil || block.Type != "CERTIFICATE" || len(bytes.TrimSpace(rest)) != 0 {
				return nil, fmt.Errorf("not exactly one CERTIFICATE block")
			}
			return block.Bytes, nil
		}},
		{"der", "der", func(b []byte) ([]byte, error) { return b, nil }},
		{"p12", "p12", func(b []byte) ([]byte, error) {
			// A trust store decodes only when every bag is a trusted certificate bag: a key bag
			// (or any other) fails it.
			certs, err := pkcs12.DecodeTrustStore(b, P12Password)
			if err != nil {
				return nil, err
			}
			if len(certs) != 1 {
				return nil, fmt.Errorf("%d certificates, want 1", len(certs))
			}
			// Decoding it as a key-and-certificate file must find no key.
			if key, _, _, err := pkcs12.DecodeChain(b, P12Password); err == nil || key != nil {
				return nil, fmt.Errorf("DecodeChain found a key (%T, err %v)", key, err)
			}
			return certs[0].Raw, nil
		}},
		{"upper case", "PEM", func(b []byte) ([]byte, error) {
			block, _ := pem.Decode(b)
			if block == nil {
				return nil, fmt.Errorf("no PEM")
			}
			return block.Bytes, nil
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := ca.Export(tc.format)
			if err != nil {
				t.Fatal(err)
			}
			if bytes.Contains(out, []byte("PRIVATE")) {
				t.Fatal("export contains a private key")
			}
			der, err := tc.parse(out)
			if err != nil {
				t.Fatal(err)
			}
			cert, err := x509.ParseCertificate(der)
			if err != nil {
				t.Fatal(err)
			}
			if !cert.Equal(ca.Cert) {
				t.Error("round trip changed the certificate")
			}
			out[0] ^= 0xff // the caller owns the slice; the CA must be unaffected
			if again, _ := ca.Export(tc.format); again[0] == out[0] {
				t.Error("Export returned the CA's own buffer")
			}
		})
	}
	_, err = ca.Export("pfx")
	if err == nil || !strings.Contains(err.Error(), "pem, der, p12") {
		t.Errorf("Export(pfx) = %v, want an error listing pem, der, p12", err)
	}
	if _, err := pkcs12.DecodeTrustStore(mustExport(t, ca, "p12"), "wrong"); err == nil {
		t.Error("the p12 export decoded with a wrong password: it is not protected by P12Password")
	}
}

// The key must not come out of any of the usual ways a struct gets printed or logged.
func TestCANeverPrintsKey(t *testing.T) {
	ca, err := Init(t.TempDir(), false)
	if err != nil {
		t.Fatal(err)
	}
	secret := keyMaterial(t, ca)
	var logged bytes.Buffer
	slog.New(slog.NewJSONHandler(&logged, nil)).Info("ca", "ca", ca)
	slog.New(slog.NewTextHandler(&logged, nil)).Info("ca", "ca", *ca)
	js, _ := json.Marshal(ca)
	outputs := map[string]string{
		"%v":   fmt.Sprintf("%v", ca),
		"%+v":  fmt.Sprintf("%+v", ca),
		"%#v":  fmt.Sprintf("%#v", ca),
		"%v*":  fmt.Sprintf("%v", *ca),
		"%s":   fmt.Sprintf("%s", ca),
		"slog": logged.String(),
		"json": string(js),
	}
	for name, out := range outputs {
		for _, s := range secret {
			if strings.Contains(out, s) {
				t.Errorf("%s output contains key material: %s", name, out)
			}
		}
		if !strings.Contains(out, ca.Cert.Subject.CommonName) {
			t.Errorf("%s output does not name the CA: %s", name, out)
		}
	}
}
