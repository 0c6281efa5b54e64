package level2

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"math/big"
	"net"
	"net/netip"
	"testing"
	"time"

	"mcpintercept/integrity"
	flowstage "mcpintercept/stage"
)

// pinnedConn is a connection on a Level 2 route with tool_pins mode.
func pinnedConn(mode integrity.Mode, tls string, up net.Conn) *flowstage.Conn {
	return &flowstage.Conn{Route: "r", Level: 2, TLS: tls, Upstream: up,
		Client: netip.MustParseAddrPort("10.200.1.2:40000"), Orig: netip.MustParseAddrPort("10.200.2.2:3011"),
		Options: flowstage.Options{Name: &RouteOptions{ToolPins: mode, QuarantineDivergence: true}}}
}

// Tool integrity (issue 20): a Level 2 route with tool_pins learn or enforce gets the
// appliance's guard under its own settings; a route without tool_pins, or an appliance without
// a guard, gives Level 2 none (a nil interface, not a nil *RouteGuard inside one).
func TestLevel2FlowToolGuard(t *testing.T) {
	g, err := integrity.Open(integrity.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	for _, c := range []struct {
		name  string
		tools *integrity.Guard
		pins  integrity.Mode
		want  bool
	}{
		{"learn", g, integrity.ModeLearn, true},
		{"enforce", g, integrity.ModeEnforce, true},
		{"off", g, integrity.ModeOff, false},
		{"unset", g, "", false},
		{"no guard", nil, integrity.ModeEnforce, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			l2 := FlowOf(pinnedConn(c.pins, "plaintext", nil), Deps{Tools: c.tools})
			if got := l2.Tools != nil; got != c.want {
				t.Fatalf("Level 2 has a guard: %v, want %v (%#v)", got, c.want, l2.Tools)
			}
			if c.want {
				if rg, ok := l2.Tools.(*integrity.RouteGuard); !ok || rg == nil {
					t.Fatalf("Tools is %T %v, want the route's *integrity.RouteGuard", l2.Tools, l2.Tools)
				}
			}
			if l2.UpstreamSPKI != "" {
				t.Fatalf("plaintext upstream has SPKI %q", l2.UpstreamSPKI)
			}
		})
	}
}

// On terminate, Level 2 gets the upstream certificate's public key as "sha256:<hex>" of its
// SubjectPublicKeyInfo.
func TestLevel2FlowUpstreamSPKI(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "server.lab"},
		DNSNames: []string{"server.lab"}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	srv := tls.Server(b, &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}})
	done := make(chan error, 1)
	go func() { done <- srv.Handshake() }()
	up := tls.Client(a, &tls.Config{InsecureSkipVerify: true})
	if err := up.Handshake(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	spki, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(spki)
	want := "sha256:" + hex.EncodeToString(sum[:])

	g, err := integrity.Open(integrity.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if got := FlowOf(pinnedConn(integrity.ModeLearn, "terminate", up), Deps{Tools: g}).UpstreamSPKI; got != want {
		t.Fatalf("UpstreamSPKI %q, want %q", got, want)
	}
	// A terminate route with a plaintext upstream (trusted network) has no key to record.
	if got := FlowOf(pinnedConn(integrity.ModeLearn, "terminate", a), Deps{Tools: g}).UpstreamSPKI; got != "" {
		t.Fatalf("plaintext upstream: UpstreamSPKI %q", got)
	}
}
