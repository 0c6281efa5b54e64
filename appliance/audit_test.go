package appliance

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"mcpintercept/audit"
)

// auditedLike is an external-steering configuration whose one route audits every request; %s are
// the upstream's port and the audit directory.
const auditedLike = `mechanism: external
external: {original_dst: local-address}
listen: {addresses: [127.0.0.1], port: 15001}
intercept: {destinations: [127.0.0.0/8], ports: [1-65535]}
limits: {drain_timeout: 5s}
admin: {listen: "off"}
upstream_deny: [169.254.169.254/32]
audit: {dir: DIR}
routes:
  - name: audited
    match: {ports: [PORT]}
    tls: plaintext
    level: 1
    development: true
    audit: true
`

func adminGet(t *testing.T, a *Appliance, path string) (int, string, string) {
	t.Helper()
	resp, err := http.Get("http://" + a.AdminAddr().String() + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Content-Type"), string(b)
}

// TestAuditLifecycle: with an audited route the store opens with the appliance; /readyz is ready
// only while it is writable (503 with the reason otherwise); /audit/checkpoint serves a checkpoint
// that verifies with /audit/pubkey; Stop closes the store after the drain, and what is on disk
// verifies and names the call.
func TestAuditLifecycle(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	t.Cleanup(srv.Close)
	up := netip.MustParseAddrPort(strings.TrimPrefix(srv.URL, "http://"))
	dir := filepath.Join(t.TempDir(), "audit")
	src := strings.NewReplacer("DIR", dir, "PORT", strconv.Itoa(int(up.Port()))).Replace(auditedLike)
	cfg := writeConfig(t, filepath.Join(t.TempDir(), "audited.yaml"), src)
	cfg.Admin.Listen = "127.0.0.1:0"
	ln := loopbackListener(t)
	a, err := New(context.Background(), cfg, Options{Mechanism: &fakeMech{dst: up}, Listeners: []*net.TCPListener{ln}})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if code, _, body := adminGet(t, a, "/readyz"); code != 200 {
		t.Fatalf("/readyz with the store open: %d %q", code, body)
	}

	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "tcp", ln.Addr().String())
	}}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Post(srv.URL+"/mcp", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("audited call: %d", resp.StatusCode)
	}
	tr.CloseIdleConnections() // the flow ends; Stop need not wait for the drain deadline

	code, ctype, pub := adminGet(t, a, "/audit/pubkey")
	if code != 200 || !strings.HasPrefix(ctype, "text/plain") || strings.Count(pub, "+") < 2 {
		t.Fatalf("/audit/pubkey: %d %q %q", code, ctype, pub)
	}
	code, ctype, note := adminGet(t, a, "/audit/checkpoint")
	if code != 200 || !strings.HasPrefix(ctype, "text/plain") {
		t.Fatalf("/audit/checkpoint: %d %q", code, ctype)
	}
	if _, err := audit.OpenCheckpoint([]byte(note), pub); err != nil {
		t.Errorf("the checkpoint does not verify with the served key: %v\n%s", err, note)
	}

	// A store that cannot write makes the appliance not ready, with the reason.
	s := a.audit.Load()
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if code, _, body := adminGet(t, a, "/readyz"); code != 503 || !strings.Contains(body, "audit") {
		t.Errorf("/readyz with the store closed: %d %q, want 503 naming audit", code, body)
	}
	if err := a.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}

	rep, err := audit.Verify(dir, audit.VerifyOptions{PublicKey: pub})
	if err != nil || !rep.OK() {
		t.Fatalf("verify: %v %+v", err, rep.Problem)
	}
	var kinds []string
	for r, err := range audit.Query(dir, audit.Filter{}) {
		if err != nil {
			t.Fatal(err)
		}
		kinds = append(kinds, r.Kind+" "+r.Method+" "+r.Outcome+" "+r.Reason)
	}
	if want := "authorization POST /mcp  ,outcome POST /mcp result http 200"; strings.Join(kinds, ",") != want {
		t.Errorf("records %q, want %q", kinds, want)
	}
}
