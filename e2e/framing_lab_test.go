//go:build linux

package e2e

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// framingPort is e2e/peers/framingsrv's port: a raw MCP server whose tools/call answer is an SSE
// stream framed as HTTP/1.0 with Transfer-Encoding: chunked (issue 29 item 2).
const framingPort = "3057"

// framingConfig is the lab configuration with framingsrv's port steered onto the plaintext Level 2
// route (rule set lab-level2: no-sampling-for-untrusted).
func framingConfig(t *testing.T) string {
	t.Helper()
	s := tlsConfig(t, filepath.Join(t.TempDir(), "ca"))
	for _, r := range [][2]string{
		{`"3000-3014"`, `"3000-3014", "` + framingPort + `"`},
		{`match: {ports: ["3011-3014"]}`, `match: {ports: ["3011-3014", "` + framingPort + `"]}`},
	} {
		if strings.Count(s, r[0]) != 1 {
			t.Fatalf("lab.yaml changed: %q occurs %d times", r[0], strings.Count(s, r[0]))
		}
		s = strings.Replace(s, r[0], r[1], 1)
	}
	return s
}

// TestFramingHTTP10ChunkedLab: the TypeScript SDK client (Node's fetch) named lab-agent-untrusted
// calls a tool whose answer carries a sampling request in an HTTP/1.0 response with
// Transfer-Encoding: chunked. RFC 9112 §6.1: Transfer-Encoding in an HTTP/1.0 message means faulty
// framing. Control: directly, undici de-chunks the stream and the client serves the sampling
// request. Through Level 2 the appliance must not read that body any other way than the client:
// the response is refused (the connection closes, the call fails), and the client serves no
// sampling request. Before issue 29 the appliance read it to the close, the chunk-size lines
// split the sampling request's "data:" so no rule saw it, and the client served it.
func TestFramingHTTP10ChunkedLab(t *testing.T) {
	needLab(t)
	srvBin := filepath.Join(t.TempDir(), "framingsrv")
	build := exec.Command("go", "build", "-o", srvBin, "./e2e/peers/framingsrv")
	build.Dir = repoRoot
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build framingsrv: %v\n%s", err, out)
	}
	srv := startT(t, nsServer, srvBin, "-listen", "10.200.2.2:"+framingPort)
	if err := srv.waitFor("READY", 30*time.Second); err != nil {
		t.Fatal(err)
	}
	url := "http://10.200.2.2:" + framingPort + "/mcp"

	r, out, _ := runSamplingClient(t, url, "lab-agent-untrusted", "framing", "{}")
	if r.Served.Sampling != 1 || r.Call.Text != "framed result" {
		t.Fatalf("control: the TS SDK client did not read the HTTP/1.0 chunked stream as undici is expected to (one sampling request served, then the result): %s", out)
	}
	t.Logf("control (direct): %s", out)

	a := startAppliance(t, "nftables-tproxy", framingConfig(t))
	r, out, _ = runSamplingClient(t, url, "lab-agent-untrusted", "framing", "{}")
	t.Logf("through Level 2: %s", out)
	if r.Served.Sampling != 0 {
		t.Errorf("through Level 2 the untrusted client served %d sampling requests the appliance never judged", r.Served.Sampling)
	}
	if r.Call.Error == nil {
		t.Errorf("through Level 2 the call got a result from a response the appliance must refuse: %s", out)
	}
	for _, rec := range a.stopGracefully(t) {
		if rec.MCPMethod == "tools/call" {
			t.Logf("record: status %d decision %q rule %q reason %q", rec.Status, rec.Decision, rec.Rule, rec.Reason)
		}
	}
}
