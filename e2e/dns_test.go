//go:build linux

package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// The dns mechanism end to end (issue 12; the draft names "DNS-based interception" among the
// ways traffic reaches a Transparent intermediary, "Transparent Mode"). mcpi-client resolves
// through the appliance (a per-namespace resolv.conf); the upstream is the lab's DNS server
// (dnsmasq, which scripts/lab.sh up starts in mcpi-server on 10.200.2.2:53, UDP and TCP, logging
// every query to .lab/dns/dnsmasq.log); only the VIP pool is steered, never the server's real
// addresses. The lab server covers every case, truncation included (big.lab.test: 40 TXT strings
// of 200 bytes, truncated over UDP, whole over TCP), so the test starts no DNS server of its own;
// dnsupstream serves only as its DNS client (`dnsupstream query`).

const dnsPool = "198.18.0.0/24"

// dnsLabConfig is examples/lab-dns.yaml with the test's own CA and state directories.
func dnsLabConfig(t *testing.T, caDir, stateDir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "examples", "lab-dns.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	for old, new := range map[string]string{
		"dir: ../.lab/appliance-ca":              "dir: " + caDir,
		"extra_cas: [../.lab/pki/server-ca.pem]": "extra_cas: [" + labPKI("server-ca.pem") + "]",
		"state_dir: ../.lab/dns-state":           "state_dir: " + stateDir,
		"admin:\n  listen: 127.0.0.1:9464":       "admin:\n  listen: 127.0.0.1:9464",
		"mechanism: dns\n":                       "mechanism: dns\nlog: {level: debug}\n",
	} {
		if !strings.Contains(s, old) {
			t.Fatalf("examples/lab-dns.yaml lacks %q", old)
		}
		s = strings.Replace(s, old, new, 1)
	}
	return s
}

// dnsPeer builds (once) the lab DNS peer (the test's DNS client).
func dnsPeer(t *testing.T) string {
	t.Helper()
	p := bin("dnsupstream")
	if _, err := os.Stat(p); err == nil {
		return p
	}
	cmd := exec.Command("go", "build", "-o", p, "./e2e/peers/dnsupstream")
	cmd.Dir = repoRoot
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build dnsupstream: %v\n%s", err, out)
	}
	return p
}

// useApplianceResolver points mcpi-client's resolver at the appliance and takes the lab names out
// of its hosts file (lab.sh puts mcp.lab.test there), restoring both when the test ends.
func useApplianceResolver(t *testing.T) {
	t.Helper()
	dir := "/etc/netns/" + nsClient
	hosts, resolv := filepath.Join(dir, "hosts"), filepath.Join(dir, "resolv.conf")
	oldHosts, errHosts := os.ReadFile(hosts)
	oldResolv, errResolv := os.ReadFile(resolv)
	t.Cleanup(func() {
		if errHosts == nil {
			os.WriteFile(hosts, oldHosts, 0o644)
		}
		if errResolv == nil {
			os.WriteFile(resolv, oldResolv, 0o644)
		} else {
			os.Remove(resolv)
		}
	})
	var keep []string
	for _, l := range strings.Split(string(oldHosts), "\n") {
		if !strings.Contains(l, "lab.test") {
			keep = append(keep, l)
		}
	}
	if err := os.WriteFile(hosts, []byte(strings.Join(keep, "\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(resolv, []byte("nameserver 10.200.1.1\noptions timeout:2 attempts:2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

type dnsAnswer struct {
	Rcode     string   `json:"rcode"`
	Truncated bool     `json:"truncated"`
	Answers   []string `json:"answers"`
	Authority []string `json:"authority"`
	Error     string   `json:"error"`
}

func dnsQuery(t *testing.T, ns, server, name, typ string, extra ...string) dnsAnswer {
	t.Helper()
	out := runT(t, 20*time.Second, ns, dnsPeer(t), append([]string{"query", "-server", server, "-name", name, "-type", typ}, extra...)...)
	var a dnsAnswer
	if err := json.Unmarshal([]byte(out), &a); err != nil {
		t.Fatalf("dnsupstream query output %q: %v", out, err)
	}
	return a
}

// vipOf resolves name's A through the appliance and checks it is a VIP of the pool.
func vipOf(t *testing.T, name string) netip.Addr {
	t.Helper()
	a := dnsQuery(t, nsClient, "10.200.1.1:53", name, "A")
	if a.Rcode != "NOERROR" || len(a.Answers) != 1 || !strings.HasPrefix(a.Answers[0], "A ") {
		t.Fatalf("%s A through the appliance: %+v, want one VIP", name, a)
	}
	vip := netip.MustParseAddr(strings.TrimPrefix(a.Answers[0], "A "))
	if !netip.MustParsePrefix(dnsPool).Contains(vip) {
		t.Fatalf("%s A = %s, outside the VIP pool %s", name, vip, dnsPool)
	}
	return vip
}

// withoutDeniedTools drops the lines naming a denied_* tool from a client's summary.
func withoutDeniedTools(s string) string {
	var keep []string
	for _, l := range strings.Split(s, "\n") {
		if !strings.Contains(l, `"denied_`) {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "\n")
}

// labDNSLog returns what the lab DNS server logged from now on ("query[TYPE] NAME from ADDR"
// lines, dnsmasq log-queries=extra).
func labDNSLog(t *testing.T) func() string {
	t.Helper()
	path := filepath.Join(repoRoot, ".lab", "dns", "dnsmasq.log")
	st, err := os.Stat(path)
	if err != nil {
		t.Fatalf("the lab DNS server (scripts/lab.sh up) has no query log: %v", err)
	}
	from := st.Size()
	return func() string {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if int64(len(b)) < from {
			return ""
		}
		return string(b[from:])
	}
}

func TestDNS(t *testing.T) {
	needLab(t)
	// The lab's DNS server answers the lab names directly (what the appliance forwards to).
	for _, c := range []struct{ server, name, typ, want string }{
		{"10.200.2.2:53", "mcp.lab.test", "A", "A 10.200.2.2"},
		{"[fd00:200:2::2]:53", "mcp.lab.test", "AAAA", "AAAA fd00:200:2::2"},
		{"10.200.2.2:53", "plain.lab.test", "A", "A 10.200.2.2"},
		{"10.200.2.2:53", "rebind.lab.test", "A", "A 127.0.0.1"},
		{"10.200.2.2:53", "meta.lab.test", "A", "A 169.254.169.254"},
	} {
		for _, tcp := range []bool{false, true} {
			var extra []string
			if tcp {
				extra = []string{"-tcp"}
			}
			if r := dnsQuery(t, nsServer, c.server, c.name, c.typ, extra...); r.Rcode != "NOERROR" || len(r.Answers) != 1 || r.Answers[0] != c.want {
				t.Fatalf("lab DNS server %s %s %s (tcp %v): %+v, want %s", c.server, c.name, c.typ, tcp, r, c.want)
			}
		}
	}
	upstreamLog := labDNSLog(t)
	tlsServer(t)
	goServer(t)

	// Direct runs, by name, before the client's resolver changes (the hosts file names the server).
	urls := []string{"https://mcp.lab.test:8443/mcp", "https://mcp.lab.test:8444/mcp"}
	goDirect, nodeDirect := map[string]string{}, map[string]string{}
	for _, u := range urls {
		goDirect[u] = runT(t, 60*time.Second, nsClient, bin("mcpclient"), "-url", u, "-ca", labPKI("server-ca.pem"))
		nodeDirect[u] = runNode(t, labPKI("server-ca.pem"), u)
	}
	plainDirect := runT(t, 60*time.Second, nsClient, bin("mcpclient"), "-url", "http://10.200.2.2:8080/mcp")

	useApplianceResolver(t)
	caDir, stateDir := filepath.Join(t.TempDir(), "ca"), filepath.Join(t.TempDir(), "dns-state")
	cfg := dnsLabConfig(t, caDir, stateDir)
	a := startAppliance(t, "dns", cfg)
	applianceCA := exportCA(t, cfg)

	// Answers. An intercepted name gets a VIP, stable; AAAA without a v6 pool and HTTPS are
	// NODATA (NOERROR, no answer, a SOA), never NXDOMAIN; other names are forwarded unchanged.
	vip := vipOf(t, "mcp.lab.test")
	if again := vipOf(t, "MCP.Lab.Test"); again != vip {
		t.Errorf("mcp.lab.test got %s then %s: a VIP must be stable", vip, again)
	}
	wild := vipOf(t, "tools.mcp.lab.test")
	if wild == vip {
		t.Errorf("tools.mcp.lab.test shares mcp.lab.test's VIP %s", vip)
	}
	for _, typ := range []string{"AAAA", "HTTPS", "SVCB"} {
		if r := dnsQuery(t, nsClient, "10.200.1.1:53", "mcp.lab.test", typ); r.Rcode != "NOERROR" || len(r.Answers) != 0 || len(r.Authority) != 1 || r.Authority[0] != "SOA" {
			t.Errorf("mcp.lab.test %s: %+v, want NODATA (NOERROR, no answer, SOA)", typ, r)
		}
	}
	if r := dnsQuery(t, nsClient, "10.200.1.1:53", "plain.lab.test", "A"); r.Rcode != "NOERROR" || len(r.Answers) != 1 || r.Answers[0] != "A 10.200.2.2" {
		t.Errorf("plain.lab.test (not intercepted): %+v, want its real address", r)
	}
	if r := dnsQuery(t, nsClient, "10.200.1.1:53", "nope.lab.test", "A"); r.Rcode != "NXDOMAIN" {
		t.Errorf("nope.lab.test: %+v, want the upstream's NXDOMAIN", r)
	}
	// Truncation: the upstream truncates big.lab.test over UDP; the appliance fetches it over
	// TCP, answers a 512-byte UDP client truncated, and a TCP client whole.
	if r := dnsQuery(t, nsClient, "10.200.1.1:53", "big.lab.test", "TXT"); !r.Truncated {
		t.Errorf("big.lab.test over UDP: %+v, want TC", r)
	}
	if r := dnsQuery(t, nsClient, "10.200.1.1:53", "big.lab.test", "TXT", "-tcp"); r.Truncated || len(r.Answers) != 40 {
		t.Errorf("big.lab.test over TCP: truncated %v, %d answers, want 40", r.Truncated, len(r.Answers))
	}
	// 40 answers (8 KB) can only have come over TCP upstream: the lab server answers at most
	// 1232 bytes over UDP (edns-packet-max) and truncates the rest.
	if log := upstreamLog(); !strings.Contains(log, "query[TXT] big.lab.test from 10.200.2.1") {
		t.Errorf("big.lab.test did not reach the upstream from the appliance:\n%s", log)
	}
	// Nothing intercepted reached the upstream (before any flow: the dialer resolves
	// mcp.lab.test upstream when it dials, which is what it should do).
	for _, q := range []string{"query[A] mcp.lab.test ", "query[AAAA] mcp.lab.test ", "query[HTTPS]", "query[SVCB]", "tools.mcp.lab.test"} {
		if log := upstreamLog(); strings.Contains(log, q) {
			t.Errorf("an intercepted query (%s) reached the upstream:\n%s", q, log)
		}
	}
	// Never an open resolver: mcpi-server is outside dns.clients.
	if r := dnsQuery(t, nsServer, "10.200.1.1:53", "mcp.lab.test", "A"); r.Rcode != "REFUSED" || len(r.Answers) != 0 {
		t.Errorf("query from outside dns.clients: %+v, want REFUSED", r)
	}

	// Real SDK clients by name, through terminate + Level 1 (8443) and Level 2 (8444): results
	// equal the direct runs (at Level 2, less the tools the lab rules deny, which Level 2 does
	// not advertise).
	for _, u := range urls {
		same := func(got, want string) bool { return got == want }
		if strings.Contains(u, ":8444") {
			same = func(got, want string) bool { return withoutDeniedTools(got) == withoutDeniedTools(want) }
		}
		if got := runT(t, 60*time.Second, nsClient, bin("mcpclient"), "-url", u, "-ca", applianceCA); !same(got, goDirect[u]) {
			t.Errorf("go %s through DNS interception differs from direct:\n%s\nwant\n%s", u, got, goDirect[u])
		}
		if got := runNode(t, applianceCA, u); !same(got, nodeDirect[u]) {
			t.Errorf("node %s through DNS interception differs from direct:\n%s\nwant\n%s", u, got, nodeDirect[u])
		}
	}
	// A ClientHello split into one-byte segments still gets its SNI checked and served.
	if r, err := probe(t, "-addr", "mcp.lab.test:8443", "-ca", applianceCA, "-one-byte-writes"); err != nil || r.PeerSHA256 == certSHA256(t, labPKI("server.pem")) {
		t.Errorf("one-byte ClientHello to the VIP: %+v, %v; want the appliance's leaf", r, err)
	}
	// A name outside the patterns resolves to its real address and never meets the appliance.
	if got := runT(t, 60*time.Second, nsClient, bin("mcpclient"), "-url", "http://plain.lab.test:8080/mcp"); got != plainDirect {
		t.Errorf("plain.lab.test:8080: %s, want %s", got, plainDirect)
	}

	// SNI != the name behind the VIP: refused (a client cannot reach one host under another's
	// name), and logged.
	if r, err := probe(t, "-addr", vip.String()+":8443", "-sni", "plain.lab.test", "-ca", applianceCA); err == nil {
		t.Errorf("SNI plain.lab.test to mcp.lab.test's VIP was served: %+v", r)
	}
	if err := a.waitFor("differs from the name mcp.lab.test behind VIP", 5*time.Second); err != nil {
		t.Error(err)
	}
	// DNS rebinding: names whose upstream answer is loopback or the metadata service are
	// refused at dial time, whatever the client does.
	for _, n := range []string{"rebind.lab.test", "meta.lab.test"} {
		vipOf(t, n)
		if r, err := probe(t, "-addr", n+":8443", "-ca", applianceCA); err == nil {
			t.Errorf("%s:8443 was served: %+v", n, r)
		}
	}

	// Metrics: queries by type and outcome, VIPs, cache hits, rebinding refusals.
	metrics := runT(t, 10*time.Second, nsAppliance, "curl", "-s", "http://127.0.0.1:9464/metrics")
	for _, want := range []string{
		`mcpintercept_dns_queries_total{outcome="vip",type="A"}`,
		`mcpintercept_dns_queries_total{outcome="nodata",type="HTTPS"}`,
		`mcpintercept_dns_queries_total{outcome="nodata",type="AAAA"}`,
		`mcpintercept_dns_queries_total{outcome="refused",type="A"} 1`,
		`mcpintercept_upstream_denied_total{source="dns"} 2`,
		`mcpintercept_dns_queries_total{outcome="forwarded",type="A"}`,
		`mcpintercept_dns_vips 4`,
		`mcpintercept_dns_vips_allocated_total 4`,
		`mcpintercept_dns_cache_hits_total `,
		`mcpintercept_dns_cache_misses_total `,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if strings.Contains(metrics, "mcpintercept_dns_cache_hits_total 0\n") {
		t.Errorf("no cache hit counted (the dialer resolves mcp.lab.test for every flow, TTL 60s)")
	}

	recs := a.stopGracefully(t)
	var viaDNS, rebind, meta int
	for _, r := range recs {
		if strings.HasSuffix(r.OrigDst, ":8080") {
			t.Errorf("plain.lab.test traffic went through the appliance: %+v", r)
		}
		if r.Mechanism != "dns" {
			t.Errorf("record mechanism %q, want dns: %+v", r.Mechanism, r)
		}
		if r.SNI == "mcp.lab.test" && r.TLS == "terminate" && r.Decision == "allow" && r.Status == 200 {
			if viaDNS == 0 {
				t.Logf("through DNS interception: mechanism %s orig_dst %s sni %s level %d", r.Mechanism, r.OrigDst, r.SNI, *r.Level)
			}
			viaDNS++
		}
		if strings.Contains(r.Reason, "sni_mismatch") || strings.Contains(r.Reason, "no_original_destination") {
			t.Logf("SNI mismatch record: %+v", r)
		}
		if strings.Contains(r.Reason, "upstream address 127.0.0.1 is in the deny list") && strings.Contains(r.Reason, "rebind.lab.test") {
			rebind++
			t.Logf("rebinding refused: orig_dst %s sni %s reason %q", r.OrigDst, r.SNI, r.Reason)
		}
		if strings.Contains(r.Reason, "upstream address 169.254.169.254 is in the deny list") {
			meta++
		}
	}
	if viaDNS == 0 || rebind != 1 || meta != 1 {
		t.Errorf("flow log: %d terminated requests to mcp.lab.test, %d rebind refusals, %d metadata refusals (want >0, 1, 1)\n%s", viaDNS, rebind, meta, a.stdout)
	}

	// A restart keeps every name's VIP (the table is in the state directory).
	a2 := startAppliance(t, "dns", cfg)
	if got := vipOf(t, "mcp.lab.test"); got != vip {
		t.Errorf("after a restart mcp.lab.test = %s, want %s", got, vip)
	}
	if got := vipOf(t, "tools.mcp.lab.test"); got != wild {
		t.Errorf("after a restart tools.mcp.lab.test = %s, want %s", got, wild)
	}
	if got := runT(t, 60*time.Second, nsClient, bin("mcpclient"), "-url", urls[0], "-ca", applianceCA); got != goDirect[urls[0]] {
		t.Errorf("go after a restart differs from direct:\n%s", got)
	}
	a2.stopGracefully(t)
	if _, err := os.Stat(filepath.Join(stateDir, "vips.jsonl")); errors.Is(err, os.ErrNotExist) {
		t.Errorf("no VIP table in %s", stateDir)
	}
}

// TestDNSQuotaFlood: one client asking for every name under a wildcard (issue 16 case 12: 254
// names used to fill the /24 pool, and every new name then got SERVFAIL for a day) is stopped
// at its VIP quota with REFUSED for those queries only, counted and logged with the client and
// the pattern; another client in the same network still gets VIPs for new names, under the
// wildcard and exact, and its real SDK client works through them.
func TestDNSQuotaFlood(t *testing.T) {
	needLab(t)
	tlsServer(t)
	goServer(t)
	u := "https://mcp.lab.test:8443/mcp"
	direct := runT(t, 60*time.Second, nsClient, bin("mcpclient"), "-url", u, "-ca", labPKI("server-ca.pem"))

	// The flooder is a second address of mcpi-client (its own quota: quotas are per address).
	const flooder = "10.200.1.3"
	runT(t, 10*time.Second, nsClient, "ip", "addr", "add", flooder+"/32", "dev", "lo")
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		run(ctx, nsClient, "ip", "addr", "del", flooder+"/32", "dev", "lo")
	})
	useApplianceResolver(t)
	caDir, stateDir := filepath.Join(t.TempDir(), "ca"), filepath.Join(t.TempDir(), "dns-state")
	cfg := dnsLabConfig(t, caDir, stateDir)
	a := startAppliance(t, "dns", cfg)
	applianceCA := exportCA(t, cfg)

	conn := udpInNS(t, nsClient, flooder+":0", "10.200.1.1:53")
	defer conn.Close()
	c := &dns.Client{Net: "udp", Timeout: 5 * time.Second}
	rcodes := map[string]int{}
	for i := range 300 {
		q := new(dns.Msg)
		q.SetQuestion(fmt.Sprintf("flood%d.mcp.lab.test.", i), dns.TypeA)
		r, _, err := c.ExchangeWithConn(q, &dns.Conn{Conn: conn})
		if err != nil {
			t.Fatalf("flood query %d: %v", i, err)
		}
		rcodes[dns.RcodeToString[r.Rcode]]++
	}
	// 254 usable addresses, 4 patterns: a client may hold an eighth (31).
	if rcodes["NOERROR"] != 31 || rcodes["REFUSED"] != 300-31 {
		t.Fatalf("flood answered %v, want 31 NOERROR (the client quota) and the rest REFUSED", rcodes)
	}
	if err := a.waitFor("VIP quota exceeded", 10*time.Second); err != nil {
		t.Error(err)
	}
	if logs := a.stderr.String() + a.stdout.String(); !strings.Contains(logs, "client="+flooder) || !strings.Contains(logs, "pattern=*.mcp.lab.test") {
		t.Errorf("the quota log line does not name the client and the pattern:\n%s", logs)
	}

	// The other client: new names get VIPs, and its SDK client works through them.
	vipOf(t, "victim.mcp.lab.test")
	vipOf(t, "mcp.lab.test")
	if got := runT(t, 60*time.Second, nsClient, bin("mcpclient"), "-url", u, "-ca", applianceCA); got != direct {
		t.Errorf("go through DNS interception after the flood differs from direct:\n%s\nwant\n%s", got, direct)
	}
	metrics := runT(t, 10*time.Second, nsAppliance, "curl", "-s", "http://127.0.0.1:9464/metrics")
	for _, want := range []string{
		fmt.Sprintf(`mcpintercept_dns_quota_refused_total{scope="client"} %d`, 300-31),
		fmt.Sprintf(`mcpintercept_dns_queries_total{outcome="quota",type="A"} %d`, 300-31),
		`mcpintercept_dns_pool_used_ratio{family="v4"} `,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if strings.Contains(metrics, `outcome="exhausted"`) || strings.Contains(metrics, `outcome="servfail"`) {
		t.Errorf("a query failed for want of a VIP:\n%s", metrics)
	}
	a.stopGracefully(t)
}

// udpInNS opens a UDP socket from local to remote inside a lab namespace (the socket stays there).
func udpInNS(t *testing.T, ns, local, remote string) net.Conn {
	t.Helper()
	return inNS(t, ns, func() (net.Conn, error) {
		d := net.Dialer{LocalAddr: net.UDPAddrFromAddrPort(netip.MustParseAddrPort(local))}
		return d.Dial("udp", remote)
	})
}
