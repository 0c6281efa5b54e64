//go:build linux

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

const everythingReady = "listening on port 3001"

func everythingArgs() []string {
	return []string{filepath.Join(repoRoot, "e2e/node/node_modules/@modelcontextprotocol/server-everything/dist/index.js"), "streamableHttp"}
}

func init() { os.Setenv("PORT", "3001") } // server-everything reads its port from the environment

var mechanisms = []string{"nftables-tproxy", "iptables-redirect"}

// coreConfig is the transparent core alone: no routes, so every flow is forwarded opaque (level 0).
const coreConfig = `mechanism: nftables-tproxy
listen: {port: 15001}
intercept:
  destinations: [10.200.2.0/24, "fd00:200:2::/64"]
  ports: [80, 443, "3000-3010", 8080, 8443, 9443]
`

type target struct {
	name    string
	server  func(*testing.T) *proc
	url     string
	origDst string
}

func targets() []target {
	return []target{
		{"go-sdk/ipv4", goServer, "http://10.200.2.2:8080/mcp", "10.200.2.2:8080"},
		{"go-sdk/ipv6", goServer, "http://[fd00:200:2::2]:8080/mcp", "[fd00:200:2::2]:8080"},
		{"server-everything/ipv4", everythingServer, "http://10.200.2.2:3001/mcp", "10.200.2.2:3001"},
		{"server-everything/ipv6", everythingServer, "http://[fd00:200:2::2]:3001/mcp", "[fd00:200:2::2]:3001"},
	}
}

// TestTransparentMCP is the draft's Transparent mode end to end: "MUST NOT require client-side
// configuration changes" and "MUST resolve each intercepted connection to exactly one backend, using
// ... the preserved original destination" (Transparent Mode, General Requirements). A real Go SDK
// client in mcpi-client calls real MCP servers in mcpi-server at their own addresses; with steering
// on, every connection goes through the appliance, and the results equal a direct run.
func TestTransparentMCP(t *testing.T) {
	needLab(t)
	direct := map[string]string{}
	for _, tg := range targets() {
		tg.server(t)
		direct[tg.name] = runT(t, 60*time.Second, nsClient, bin("mcpclient"), "-url", tg.url, "-calls", "2")
		if !strings.Contains(direct[tg.name], "hello through the network") {
			t.Fatalf("%s: direct run did not echo:\n%s", tg.name, direct[tg.name])
		}
	}
	for _, mech := range mechanisms {
		t.Run(mech, func(t *testing.T) {
			a := startAppliance(t, mech, coreConfig)
			assertInstalled(t, mech)
			for _, tg := range targets() {
				got := runT(t, 60*time.Second, nsClient, bin("mcpclient"), "-url", tg.url, "-calls", "2")
				if got != direct[tg.name] {
					t.Errorf("%s through %s differs from the direct run:\n--- direct\n%s\n--- through the appliance\n%s", tg.name, mech, direct[tg.name], got)
				}
			}
			recs := a.stopGracefully(t)
			for _, tg := range targets() {
				n, carried := 0, 0
				for _, r := range recs {
					if r.OrigDst != tg.origDst {
						continue
					}
					n++
					ap, err := netip.ParseAddrPort(r.Client)
					if err != nil {
						t.Errorf("client %q is not IP:port: %v", r.Client, err)
						continue
					}
					want := "10.200.1.2"
					if strings.HasPrefix(tg.origDst, "[") {
						want = "fd00:200:1::2"
					}
					if ap.Addr().String() != want {
						t.Errorf("%s: record client %s, want %s", tg.name, r.Client, want)
					}
					if r.Mechanism != mech || r.Decision != "allow" || *r.Level != 0 {
						t.Errorf("%s: record %+v", tg.name, r)
					}
					// An SDK may open a connection it then closes unused; the MCP exchange itself
					// must show up as bytes both ways.
					if r.BytesUp > 0 && r.BytesDown > 0 {
						carried++
					}
				}
				if carried == 0 {
					t.Errorf("%s: no flow to %s carried bytes both ways", tg.name, tg.origDst)
				}
				if n == 0 {
					t.Errorf("%s: no flow record with orig_dst %s in:\n%s", tg.name, tg.origDst, a.stdout)
				}
			}
		})
	}
}

// assertInstalled checks, in the kernel's own view, that the mechanism asked for is the one
// installed (the flow log's mechanism field only echoes the flag).
func assertInstalled(t *testing.T, mech string) {
	t.Helper()
	st := steeringState(t)
	nft := strings.Contains(st, "table inet mcpintercept")
	ipt := strings.Count(st, ":MCPINTERCEPT") == 2 // iptables-save and ip6tables-save
	switch {
	case mech == "nftables-tproxy" && (!nft || ipt), mech == "iptables-redirect" && (nft || !ipt):
		t.Fatalf("%s: installed nftables table %v, iptables chains %v:\n%s", mech, nft, ipt, st)
	}
}

// TestLocalProcessNoLoop: a process on the appliance host itself whose traffic matches the rules
// goes through the appliance (output path), and the appliance's own upstream dial, which matches
// the same rules, is not intercepted again: exactly one record per connection, no loop refusal.
func TestLocalProcessNoLoop(t *testing.T) {
	needLab(t)
	goServer(t)
	want := runT(t, 60*time.Second, nsClient, bin("mcpclient"), "-url", "http://10.200.2.2:8080/mcp")
	for _, mech := range mechanisms {
		t.Run(mech, func(t *testing.T) {
			a := startAppliance(t, mech, "")
			for _, url := range []string{"http://10.200.2.2:8080/mcp", "http://[fd00:200:2::2]:8080/mcp"} {
				got := runT(t, 60*time.Second, nsAppliance, bin("mcpclient"), "-url", url)
				if got != want {
					t.Errorf("local client via %s:\n%s\nwant\n%s", url, got, want)
				}
			}
			recs := a.stopGracefully(t)
			// Each family's output path was steered: a record from the appliance's own address
			// to that family's server address.
			for _, w := range []struct{ client, dst string }{{"10.200.2.1", "10.200.2.2:8080"}, {"fd00:200:2::1", "[fd00:200:2::2]:8080"}} {
				ok := false
				for _, r := range recs {
					ap, _ := netip.ParseAddrPort(r.Client)
					if ap.Addr().String() == w.client && r.OrigDst == w.dst && r.BytesDown > 0 {
						ok = true
					}
				}
				if !ok {
					t.Errorf("no intercepted local flow %s -> %s:\n%s", w.client, w.dst, a.stdout)
				}
			}
			local, carried := 0, 0
			for _, r := range recs {
				if r.Reason == "loop" {
					t.Errorf("loop refusal: %+v", r)
				}
				ap, _ := netip.ParseAddrPort(r.Client)
				if ap.Addr() == netip.MustParseAddr("10.200.2.1") || ap.Addr() == netip.MustParseAddr("fd00:200:2::1") {
					local++
					if r.Decision != "allow" {
						t.Errorf("local flow record %+v", r)
					}
					if r.BytesDown > 0 {
						carried++
					}
				}
			}
			if local == 0 || carried == 0 {
				t.Fatalf("no flow from the appliance host's own process was intercepted and answered:\n%s", a.stdout)
			}
			// Had the appliance's own upstream dial been steered back into it, each dial would be
			// accepted and dialled again until max_flows_per_client refused one, or the listener
			// itself became an original destination: both show up as refusals.
			for _, r := range recs {
				if r.Decision == "deny" {
					t.Errorf("refused flow (a loop would be refused): %+v", r)
				}
			}
		})
	}
}

type pumpResult struct {
	SentBytes      int64  `json:"sent_bytes"`
	SentSHA256     string `json:"sent_sha256"`
	ReceivedBytes  int64  `json:"received_bytes"`
	ReceivedSHA256 string `json:"received_sha256"`
}

// TestByteExact64MiB: 64 MiB each way with random payloads and random write sizes; SHA-256 equal at
// both ends. The server answers only after it has read the client's FIN, so the reply proves the
// half-close crossed the appliance while the reverse direction stayed open.
func TestByteExact64MiB(t *testing.T) {
	needLab(t)
	srv := bytePump(t)
	const n = 64 << 20
	cases := []struct{ mech, addr string }{
		{"nftables-tproxy", "10.200.2.2:3005"},
		{"nftables-tproxy", "[fd00:200:2::2]:3005"},
		{"iptables-redirect", "10.200.2.2:3005"},
		{"iptables-redirect", "[fd00:200:2::2]:3005"},
	}
	for i, c := range cases {
		t.Run(c.mech+"/"+c.addr, func(t *testing.T) {
			a := startAppliance(t, c.mech, "")
			before := strings.Count(srv.stdout.String(), "\n")
			out := runT(t, 3*time.Minute, nsClient, bin("bytepump"), "send", "-addr", c.addr,
				"-bytes", fmt.Sprint(n), "-seed", fmt.Sprint(100+i), "-expect-bytes", fmt.Sprint(n))
			var cl pumpResult
			if err := json.Unmarshal([]byte(out), &cl); err != nil {
				t.Fatalf("bytepump send output %q: %v", out, err)
			}
			var sv pumpResult
			deadline := time.Now().Add(10 * time.Second)
			for {
				lines := strings.Split(strings.TrimSpace(srv.stdout.String()), "\n")
				if len(lines) > before {
					if err := json.Unmarshal([]byte(lines[len(lines)-1]), &sv); err != nil {
						t.Fatalf("bytepump serve output: %v", err)
					}
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the server reported no connection")
				}
				time.Sleep(20 * time.Millisecond)
			}
			if cl.SentBytes != n || sv.ReceivedBytes != n || cl.SentSHA256 != sv.ReceivedSHA256 {
				t.Errorf("client→server: sent %d %s, received %d %s", cl.SentBytes, cl.SentSHA256, sv.ReceivedBytes, sv.ReceivedSHA256)
			}
			if cl.ReceivedBytes != n || sv.SentBytes != n || cl.ReceivedSHA256 != sv.SentSHA256 {
				t.Errorf("server→client: sent %d %s, received %d %s", sv.SentBytes, sv.SentSHA256, cl.ReceivedBytes, cl.ReceivedSHA256)
			}
			recs := a.stopGracefully(t)
			found := false
			for _, r := range recs {
				if r.OrigDst == c.addr && r.BytesUp == n && r.BytesDown == n {
					found = true
				}
			}
			if !found {
				t.Errorf("no flow record with %d bytes each way to %s:\n%s", n, c.addr, a.stdout)
			}
		})
	}
}

// TestCrashSafety: SIGKILL the daemon while flows are open; `mcpintercept cleanup` (no config file)
// removes everything and the client reaches the server directly again. "The host is never left
// broken" (DESIGN.md).
func TestCrashSafety(t *testing.T) {
	needLab(t)
	goServer(t)
	baseline := steeringState(t)
	for _, mech := range mechanisms {
		t.Run(mech, func(t *testing.T) {
			a := startAppliance(t, mech, "")
			// An open flow at the moment of the kill.
			pump := bytePump(t)
			_ = pump
			open := startT(t, nsClient, bin("bytepump"), "send", "-addr", "10.200.2.2:3005", "-bytes", fmt.Sprint(int64(1)<<40))
			time.Sleep(300 * time.Millisecond)
			a.stopped = true
			a.cmd.Process.Signal(syscall.SIGKILL)
			<-a.done
			// Whatever fails below, later tests must not inherit a dead daemon's steering.
			t.Cleanup(func() { run(context.Background(), nsAppliance, bin("mcpintercept"), "cleanup") })
			open.kill()
			if len(oursLeft(steeringState(t))) == 0 {
				t.Fatal("steering vanished with the daemon; this test would prove nothing")
			}
			out := runT(t, 30*time.Second, nsAppliance, bin("mcpintercept"), "cleanup")
			if !strings.Contains(out, "removed") {
				t.Errorf("cleanup did not say what it removed:\n%s", out)
			}
			if left := oursLeft(steeringState(t)); len(left) > 0 {
				t.Fatalf("after cleanup, still installed:\n%s", strings.Join(left, "\n"))
			}
			if got := steeringState(t); got != baseline {
				t.Errorf("host state differs from before the daemon ran:\n--- before\n%s\n--- after\n%s", baseline, got)
			}
			again := runT(t, 30*time.Second, nsAppliance, bin("mcpintercept"), "cleanup")
			if strings.TrimSpace(again) != "nothing to remove" {
				t.Errorf("second cleanup is not idempotent: %q", again)
			}
			// Direct connectivity is back.
			runT(t, 60*time.Second, nsClient, bin("mcpclient"), "-url", "http://10.200.2.2:8080/mcp")
		})
	}
}

// TestRefusedStartsLeaveHostUntouched: a bad config, an unknown mechanism and a listen port in use
// each give a clear error, and nothing is installed.
func TestRefusedStartsLeaveHostUntouched(t *testing.T) {
	needLab(t)
	lab := filepath.Join(repoRoot, "examples", "lab.yaml")
	badPath := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(badPath, []byte("mechanism: nftables-tproxy\nintercept:\n  destinations: [10.200.2.0/24]\n  ports: [80, \"9000-8000\"]\nlimits:\n  idle_timout: 5m\n"), 0o644)
	cases := []struct {
		name     string
		args     []string
		holdPort bool
		code     int
		want     []string
	}{
		{"bad config", []string{"run", "--config", badPath}, false, 2, []string{"bad.yaml:4:", "intercept.ports", "bad.yaml:6:", "limits.idle_timout"}},
		{"unknown mechanism", []string{"run", "--config", lab, "--mechanism", "carrier-pigeon"}, false, 2, []string{"carrier-pigeon", "nftables-tproxy"}},
		{"missing file", []string{"run", "--config", "/nonexistent/mcpintercept.yaml"}, false, 2, []string{"/nonexistent/mcpintercept.yaml"}},
		{"port in use", []string{"run", "--config", lab}, true, 1, []string{"127.0.0.1:15001", "already in use"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := steeringState(t)
			if c.holdPort {
				h := startT(t, nsAppliance, bin("bytepump"), "serve", "-listen", "127.0.0.1:15001", "-reply-bytes", "0")
				if err := h.waitFor("READY", 10*time.Second); err != nil {
					t.Fatal(err)
				}
			}
			p := startT(t, nsAppliance, bin("mcpintercept"), c.args...)
			select {
			case <-p.done:
			case <-time.After(30 * time.Second):
				t.Fatal("the daemon did not refuse to start")
			}
			code := -1
			if p.cmd.ProcessState != nil {
				code = p.cmd.ProcessState.ExitCode()
			}
			if code != c.code {
				t.Errorf("exit code %d, want %d; stderr:\n%s", code, c.code, p.stderr)
			}
			for _, w := range c.want {
				if !strings.Contains(p.stderr.String(), w) {
					t.Errorf("error output lacks %q:\n%s", w, p.stderr)
				}
			}
			if after := steeringState(t); after != before {
				t.Errorf("host state changed:\n--- before\n%s\n--- after\n%s", before, after)
			}
		})
	}
}
