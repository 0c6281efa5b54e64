//go:build linux

package e2e

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func labPKI(name string) string { return filepath.Join(repoRoot, ".lab", "pki", name) }

// tlsServer is the Go SDK server with the lab server certificate on 8443 (terminate + Level 1),
// 8444 (terminate + Level 2) and 9443 (passthrough route).
func tlsServer(t *testing.T) *proc {
	return shared(t, "go-sdk-tls-server", "READY", bin("mcpserver"),
		"-listen", "10.200.2.2:8443,[fd00:200:2::2]:8443,10.200.2.2:8444,[fd00:200:2::2]:8444,10.200.2.2:9443,[fd00:200:2::2]:9443",
		"-tls-cert", labPKI("server.pem"), "-tls-key", labPKI("server-key.pem"))
}

// tlsConfig is the lab configuration with a CA directory of the test's own and terminate routes
// for the deliberately broken upstreams on 3006-3008.
func tlsConfig(t *testing.T, caDir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "examples", "lab.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	s = strings.Replace(s, "dir: ../.lab/appliance-ca", "dir: "+caDir, 1)
	s = strings.Replace(s, "extra_cas: [../.lab/pki/server-ca.pem]", "extra_cas: ["+labPKI("server-ca.pem")+"]", 1)
	s = strings.Replace(s, "routes:\n", `routes:
  - name: bad-upstreams
    match: {ports: ["3006-3008"]}
    tls: terminate
    level: 1
`, 1)
	return s
}

// exportCA writes the appliance CA certificate (what an operator distributes to clients).
func exportCA(t *testing.T, cfgText string) string {
	t.Helper()
	cfg := filepath.Join(t.TempDir(), "export.yaml")
	os.WriteFile(cfg, []byte(cfgText), 0o644)
	out, err := exec.Command(bin("mcpintercept"), "ca", "export", "--config", cfg).Output()
	if err != nil {
		t.Fatalf("ca export: %v", err)
	}
	path := filepath.Join(t.TempDir(), "appliance-ca.pem")
	os.WriteFile(path, out, 0o644)
	return path
}

func certSHA256(t *testing.T, pemFile string) string {
	t.Helper()
	b, err := os.ReadFile(pemFile)
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(b)
	sum := sha256.Sum256(blk.Bytes)
	return hex.EncodeToString(sum[:])
}

type probeResult struct {
	Version    string `json:"version"`
	PeerSHA256 string `json:"peer_sha256"`
	PeerIssuer string `json:"peer_issuer"`
	Status     int    `json:"status"`
}

func probe(t *testing.T, args ...string) (probeResult, error) {
	t.Helper()
	out, errOut, err := run(t.Context(), nsClient, bin("tlsprobe"), args...)
	var r probeResult
	if err != nil {
		return r, fmt.Errorf("%v: %s", err, errOut)
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("tlsprobe output %q: %v", out, err)
	}
	return r, nil
}

// TestTLSTerminate: "It MUST present a certificate matching the original destination hostname,
// requiring either dynamic certificate generation or wildcard certificates, and the client MUST
// trust the issuing CA" (draft, TLS Considerations, Termination and re-origination). Real Node and
// Go SDK clients, trusting only the exported appliance CA, call the TLS lab server by address and
// by name; the results equal direct runs that trust the server's own CA.
func TestTLSTerminate(t *testing.T) {
	needLab(t)
	tlsServer(t)
	caDir := filepath.Join(t.TempDir(), "ca")
	cfg := tlsConfig(t, caDir)
	urls := []string{"https://10.200.2.2:8443/mcp", "https://mcp.lab.test:8443/mcp", "https://[fd00:200:2::2]:8443/mcp"}
	direct := map[string]string{}
	nodeDirect := map[string]string{}
	for _, u := range urls {
		direct[u] = runT(t, 60*time.Second, nsClient, bin("mcpclient"), "-url", u, "-ca", labPKI("server-ca.pem"))
		nodeDirect[u] = runNode(t, labPKI("server-ca.pem"), u)
	}
	a := startAppliance(t, "nftables-tproxy", cfg)
	applianceCA := exportCA(t, cfg)
	for _, u := range urls {
		if got := runT(t, 60*time.Second, nsClient, bin("mcpclient"), "-url", u, "-ca", applianceCA); got != direct[u] {
			t.Errorf("Go client %s through terminate:\n%s\nwant\n%s", u, got, direct[u])
		}
		if got := runNode(t, applianceCA, u); got != nodeDirect[u] {
			t.Errorf("Node client %s through terminate:\n%s\nwant\n%s", u, got, nodeDirect[u])
		}
	}
	// The client saw the appliance's leaf, not the server's certificate.
	r, err := probe(t, "-addr", "10.200.2.2:8443", "-sni", "mcp.lab.test", "-ca", applianceCA)
	if err != nil {
		t.Fatal(err)
	}
	if r.PeerSHA256 == certSHA256(t, labPKI("server.pem")) || !strings.HasPrefix(r.PeerIssuer, "mcpintercept CA") {
		t.Errorf("terminate presented %+v; want a leaf from the appliance CA", r)
	}
	recs := a.stopGracefully(t)
	var byName, byAddr, l1 int
	for _, rec := range recs {
		if rec.TLS != "terminate" {
			continue
		}
		if *rec.Level == 1 && rec.Decision == "allow" {
			l1++
		}
		switch rec.SNI {
		case "mcp.lab.test":
			byName++
		case "":
			byAddr++
		}
	}
	if byName == 0 || byAddr == 0 || l1 == 0 {
		t.Errorf("flow log: %d terminated records with SNI, %d by address, %d level-1 requests; want all > 0:\n%s", byName, byAddr, l1, a.stdout)
	}
}

func runNode(t *testing.T, caFile, url string) string {
	t.Helper()
	return runNodeArgs(t, caFile, url)
}

// TestTLSPassthrough: "The encrypted stream is forwarded without being decrypted. No certificate is
// presented" (draft, TLS Considerations, Passthrough): the client sees the server's own
// certificate, byte for byte, and the flow log shows the SNI.
func TestTLSPassthrough(t *testing.T) {
	needLab(t)
	tlsServer(t)
	cfg := tlsConfig(t, filepath.Join(t.TempDir(), "ca"))
	a := startAppliance(t, "nftables-tproxy", cfg)
	want := certSHA256(t, labPKI("server.pem"))
	for _, addr := range []string{"10.200.2.2:9443", "[fd00:200:2::2]:9443"} {
		r, err := probe(t, "-addr", addr, "-sni", "mcp.lab.test", "-ca", labPKI("server-ca.pem"))
		if err != nil {
			t.Fatal(err)
		}
		if r.PeerSHA256 != want {
			t.Errorf("%s: client saw certificate %s, want the server's own %s", addr, r.PeerSHA256, want)
		}
	}
	runT(t, 60*time.Second, nsClient, bin("mcpclient"), "-url", "https://mcp.lab.test:9443/mcp", "-ca", labPKI("server-ca.pem"))
	recs := a.stopGracefully(t)
	n := 0
	for _, r := range recs {
		if r.TLS == "passthrough" && strings.HasSuffix(r.OrigDst, ":9443") {
			n++
			if r.SNI != "mcp.lab.test" || *r.Level != 0 || r.BytesDown == 0 {
				t.Errorf("passthrough record %+v", r)
			}
		}
	}
	if n < 3 {
		t.Errorf("%d passthrough records, want at least 3:\n%s", n, a.stdout)
	}
}

// TestTLSBadUpstreamRefused: an expired, a self-signed and a wrong-name upstream certificate each
// make the client's handshake fail, the log says why, and nothing reaches the server's HTTP layer.
// "The intermediary MUST NOT downgrade TLS" and, per DESIGN.md, an invalid upstream certificate is
// never laundered into a valid one.
func TestTLSBadUpstreamRefused(t *testing.T) {
	needLab(t)
	dir := t.TempDir()
	caCert, caKey := loadLabCA(t)
	cases := []struct {
		name, port, why string
		make            func() (certPEM, keyPEM []byte)
	}{
		{"expired", "3006", "expired", func() ([]byte, []byte) {
			return signLeaf(t, caCert, caKey, []net.IP{net.ParseIP("10.200.2.2")}, nil, time.Now().Add(-48*time.Hour), time.Now().Add(-24*time.Hour))
		}},
		{"self-signed", "3007", "unknown authority", func() ([]byte, []byte) {
			return signLeaf(t, nil, nil, []net.IP{net.ParseIP("10.200.2.2")}, nil, time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour))
		}},
		{"wrong name", "3008", "another name", func() ([]byte, []byte) {
			return signLeaf(t, caCert, caKey, nil, []string{"other.example"}, time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour))
		}},
	}
	servers := map[string]*proc{}
	for _, c := range cases {
		cp, kp := c.make()
		cf, kf := filepath.Join(dir, c.port+".pem"), filepath.Join(dir, c.port+"-key.pem")
		os.WriteFile(cf, cp, 0o644)
		os.WriteFile(kf, kp, 0o600)
		p := startT(t, nsServer, bin("mcpserver"), "-listen", "10.200.2.2:"+c.port, "-tls-cert", cf, "-tls-key", kf)
		if err := p.waitFor("READY", 30*time.Second); err != nil {
			t.Fatal(err)
		}
		servers[c.port] = p
	}
	cfg := tlsConfig(t, filepath.Join(dir, "ca"))
	a := startAppliance(t, "nftables-tproxy", cfg)
	applianceCA := exportCA(t, cfg)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := probe(t, "-addr", "10.200.2.2:"+c.port, "-ca", applianceCA)
			if err == nil || !strings.Contains(err.Error(), "handshake") {
				t.Fatalf("client handshake through terminate to a %s upstream: %v; want it to fail", c.name, err)
			}
			// Even a client that trusts nothing in particular gets no certificate at all.
			if _, err := probe(t, "-addr", "10.200.2.2:"+c.port, "-insecure"); err == nil {
				t.Fatalf("an insecure client completed a handshake to a %s upstream", c.name)
			}
			if strings.Contains(servers[c.port].stderr.String(), "msg=request") {
				t.Fatalf("a request reached the %s server's HTTP layer:\n%s", c.name, servers[c.port].stderr)
			}
		})
	}
	recs := a.stopGracefully(t)
	for _, c := range cases {
		found := false
		for _, r := range recs {
			if strings.HasSuffix(r.OrigDst, ":"+c.port) && r.Decision == "deny" && strings.Contains(r.Reason, c.why) {
				found = true
			}
		}
		if !found {
			t.Errorf("%s: no deny record saying %q:\n%s", c.name, c.why, a.stdout)
		}
		if !strings.Contains(a.stderr.String(), c.why) {
			t.Errorf("%s: the appliance log does not say %q", c.name, c.why)
		}
	}
}

// TestTLSClientVariants: TLS 1.2 and 1.3 clients, a ClientHello split into 1-byte TCP writes, and a
// ClientHello larger than one TLS record all get through terminate to the server's HTTP layer.
func TestTLSClientVariants(t *testing.T) {
	needLab(t)
	srv := tlsServer(t)
	cfg := tlsConfig(t, filepath.Join(t.TempDir(), "ca"))
	a := startAppliance(t, "nftables-tproxy", cfg)
	applianceCA := exportCA(t, cfg)
	cases := []struct {
		name    string
		args    []string
		version string
	}{
		{"tls1.3", []string{"-tls-max", "1.3"}, "TLS 1.3"},
		{"tls1.2", []string{"-tls-max", "1.2"}, "TLS 1.2"},
		{"one-byte writes", []string{"-one-byte-writes"}, "TLS 1.3"},
		{"hello over two records", []string{"-big-hello"}, "TLS 1.3"},
		{"both", []string{"-big-hello", "-one-byte-writes", "-tls-max", "1.2"}, "TLS 1.2"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := strings.Count(srv.stderr.String(), "msg=request")
			r, err := probe(t, append([]string{"-addr", "10.200.2.2:8443", "-sni", "mcp.lab.test", "-ca", applianceCA}, c.args...)...)
			if err != nil {
				t.Fatal(err)
			}
			if r.Version != c.version || r.Status == 0 || !strings.HasPrefix(r.PeerIssuer, "mcpintercept CA") {
				t.Fatalf("probe %+v; want %s, an HTTP status, an appliance leaf", r, c.version)
			}
			if strings.Count(srv.stderr.String(), "msg=request") <= before {
				t.Fatal("the request did not reach the server")
			}
		})
	}
	a.stopGracefully(t)
}

func loadLabCA(t *testing.T) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	cb, err := os.ReadFile(labPKI("server-ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(cb)
	cert, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := os.ReadFile(labPKI("server-ca-key.pem"))
	if err != nil {
		t.Fatal(err)
	}
	kblk, _ := pem.Decode(kb)
	key, err := x509.ParseECPrivateKey(kblk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return cert, key
}

// signLeaf makes a server certificate; with a nil CA it is self-signed.
func signLeaf(t *testing.T, ca *x509.Certificate, caKey *ecdsa.PrivateKey, ips []net.IP, names []string, from, to time.Time) ([]byte, []byte) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	serial, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 64))
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: "bad lab server"},
		NotBefore: from, NotAfter: to, IPAddresses: ips, DNSNames: names,
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	parent, signer := tmpl, any(key)
	if ca != nil {
		parent, signer = ca, caKey
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, signer)
	if err != nil {
		t.Fatal(err)
	}
	kd, _ := x509.MarshalECPrivateKey(key)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kd})
}
