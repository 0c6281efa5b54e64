package appliance

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"mcpintercept/config"
	"mcpintercept/inventory"
	"mcpintercept/origin"
)

// byListener steers each listener's flows to its own destination.
type byListener struct {
	*fakeMech
	dst map[string]netip.AddrPort // listener address → original destination
}

func (m byListener) Origin(c *net.TCPConn) (origin.Origin, error) {
	return origin.Origin{Dst: m.dst[c.LocalAddr().String()]}, nil
}

// mcpUpstream answers JSON-RPC as an MCP server with two tools.
func mcpUpstream(t *testing.T) *httptest.Server {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
		}
		json.NewDecoder(r.Body).Decode(&req)
		w.Header().Set("Content-Type", "application/json")
		switch req.Method {
		case "tools/list":
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"tools":[{"name":"echo","inputSchema":{"type":"object"}},{"name":"add","inputSchema":{"type":"object"}}]}}`, req.ID)
		default:
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{}}`, req.ID)
		}
	}))
	t.Cleanup(up.Close)
	return up
}

// TestInventoryEndpoint: GET /inventory needs the admin token (401 without it or with another);
// with it, it lists the server a Level 2 route covers (its version and, the route pinning tools,
// its tool count) and the one reached on a port no route covers, recognised from its first
// request and listed as uncovered.
func TestInventoryEndpoint(t *testing.T) {
	covered, uncovered := mcpUpstream(t), mcpUpstream(t)
	covAddr := netip.MustParseAddrPort(strings.TrimPrefix(covered.URL, "http://"))
	uncAddr := netip.MustParseAddrPort(strings.TrimPrefix(uncovered.URL, "http://"))
	dir := filepath.Join(t.TempDir(), "tools")
	cfg := pinnedConfig(t, dir, "")
	cfg.Routes[0].Match.Ports = []config.PortRange{{From: covAddr.Port(), To: covAddr.Port()}}
	lnCov, lnUnc := loopbackListener(t), loopbackListener(t)
	mech := byListener{&fakeMech{}, map[string]netip.AddrPort{lnCov.Addr().String(): covAddr, lnUnc.Addr().String(): uncAddr}}
	a, err := New(context.Background(), cfg, Options{Mechanism: mech, Listeners: []*net.TCPListener{lnCov, lnUnc}})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Stop(context.Background())
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(dir, config.AdminTokenFile))
	if err != nil {
		t.Fatal(err)
	}
	token := strings.TrimSpace(string(raw))
	for _, tc := range []struct {
		name, token string
	}{{"no token", ""}, {"wrong token", strings.Repeat("0", 64)}, {"token with a suffix", token + "x"}} {
		if code, body := adminDo(t, a, "GET", "/inventory", tc.token, ""); code != 401 || strings.Contains(body, "servers") {
			t.Errorf("%s: %d %q, want 401 without the inventory", tc.name, code, body)
		}
	}

	rpc := func(ln *net.TCPListener, url string, id int, method, params string, version bool) {
		t.Helper()
		tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "tcp", ln.Addr().String())
		}}
		defer tr.CloseIdleConnections()
		body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":%q,"params":%s}`, id, method, params)
		req, _ := http.NewRequest("POST", url+"/mcp", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if version {
			req.Header.Set("MCP-Protocol-Version", "2025-06-18")
		}
		resp, err := (&http.Client{Transport: tr}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("%s through the appliance: %d", method, resp.StatusCode)
		}
	}
	initParams := `{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}`
	rpc(lnCov, covered.URL, 1, "initialize", initParams, true)
	rpc(lnCov, covered.URL, 2, "tools/list", `{}`, true)
	rpc(lnUnc, uncovered.URL, 1, "initialize", initParams, false)

	code, body := adminDo(t, a, "GET", "/inventory", token, "")
	if code != 200 {
		t.Fatalf("GET /inventory with the token: %d %s", code, body)
	}
	var snap inventory.Snapshot
	if err := json.Unmarshal([]byte(body), &snap); err != nil {
		t.Fatalf("%v\n%s", err, body)
	}
	byDst := map[string]inventory.Server{}
	for _, s := range snap.Servers {
		byDst[s.Destination] = s
	}
	c, u := byDst[covAddr.String()], byDst[uncAddr.String()]
	if len(snap.Servers) != 2 || !c.Covered || c.Level != 2 || c.Path != "/mcp" || c.Tools == nil || *c.Tools != 2 ||
		strings.Join(c.Versions, ",") != "2025-06-18" || strings.Join(c.Clients, ",") != "127.0.0.1" {
		t.Errorf("the covered server: %+v (tools %v)\n%s", c, c.Tools, body)
	}
	if u.Covered || u.Level != 0 || u.Path != "/mcp" || u.Tools != nil || strings.Join(u.Methods, ",") != "initialize" ||
		strings.Join(u.Versions, ",") != "2025-06-18" {
		t.Errorf("the uncovered server: %+v\n%s", u, body)
	}
}
