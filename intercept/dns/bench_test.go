package dns

import (
	"mcpintercept/intercept/dns/dnstest"

	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	mdns "github.com/miekg/dns"
)

type benchCase struct {
	name string
	q    func(i int64) *mdns.Msg
}

var benchCases = []benchCase{
	{"intercepted", func(int64) *mdns.Msg { return query("mcp.test.", mdns.TypeA) }},
	{"forwarded-hot", func(int64) *mdns.Msg { return query("plain.test.", mdns.TypeA) }},
	{"forwarded-cold", func(i int64) *mdns.Msg { return query(fmt.Sprintf("n%d.cold.test.", i), mdns.TypeA) }},
}

// BenchmarkDNSServer measures the server on loopback UDP with 32 concurrent clients, each
// waiting for its answer before the next query: intercepted names (VIP answers), forwarded names
// with the cache hot, and forwarded names with the cache cold (every query a new name, so every
// query goes to the loopback upstream). It reports queries/s. When dnsmasq is installed the same
// load runs against it, configured alike (a static address for mcp.test, forwarding the rest to
// the same upstream with a cache), as the real-resolver reference.
func BenchmarkDNSServer(b *testing.B) {
	for _, bc := range benchCases {
		b.Run("mcpintercept/"+bc.name, func(b *testing.B) {
			s, _, _ := testServer(b, false)
			s.limiter = newClientLimiter(0, 0, time.Now) // no flood bound: one client is the load
			if err := s.Listen([]netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:0")}); err != nil {
				b.Fatal(err)
			}
			s.Serve()
			defer s.Close()
			loadDNS(b, s.Addrs()[0].String(), bc.q, true)
		})
	}
	path, err := exec.LookPath("dnsmasq")
	if err != nil {
		b.Log("dnsmasq not installed: no reference rows")
		return
	}
	for _, bc := range benchCases {
		b.Run("dnsmasq/"+bc.name, func(b *testing.B) {
			up := dnstest.StartUpstream(b)
			pc, err := net.ListenPacket("udp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			port := pc.LocalAddr().(*net.UDPAddr).Port
			pc.Close()
			cmd := exec.Command(path, "--keep-in-foreground", "--no-resolv", "--no-hosts", "--user=root",
				"--listen-address=127.0.0.1", "--bind-interfaces", "--port="+strconv.Itoa(port),
				"--server=127.0.0.1#"+strconv.Itoa(int(up.Addr.Port())), "--cache-size=10000",
				"--address=/mcp.test/198.18.0.1", "--dns-forward-max=1000", "--log-facility=-")
			var out syncWriter
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Start(); err != nil {
				b.Fatal(err)
			}
			defer func() { cmd.Process.Kill(); cmd.Wait() }()
			addr := "127.0.0.1:" + strconv.Itoa(port)
			for i := 0; ; i++ {
				_, _, err := (&mdns.Client{Timeout: 100 * time.Millisecond}).Exchange(query("mcp.test.", mdns.TypeA), addr)
				if err == nil {
					break
				}
				if i == 50 {
					b.Fatalf("dnsmasq did not start: %v\n%s", err, out.String())
				}
				time.Sleep(100 * time.Millisecond)
			}
			loadDNS(b, addr, bc.q, false)
		})
	}
}

type syncWriter struct {
	mu sync.Mutex
	b  []byte
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.b = append(w.b, p...)
	return len(p), nil
}

func (w *syncWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return string(w.b)
}

// loadDNS reports queries/s and the share of queries without an answer in 2s (lost); strict
// fails the benchmark when more than 1% were lost.
func loadDNS(b *testing.B, addr string, mk func(int64) *mdns.Msg, strict bool) {
	const clients = 32
	var next, failed atomic.Int64
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for c := 0; c < clients; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn, err := (&mdns.Client{Net: "udp", Timeout: 2 * time.Second}).Dial(addr)
			if err != nil {
				failed.Add(1)
				return
			}
			defer conn.Close()
			for {
				i := next.Add(1)
				if i > int64(b.N) {
					return
				}
				q := mk(i)
				conn.SetDeadline(time.Now().Add(2 * time.Second))
				if err := conn.WriteMsg(q); err != nil {
					failed.Add(1)
					continue
				}
				if r, err := conn.ReadMsg(); err != nil || r.Id != q.Id {
					failed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "queries/s")
	b.ReportMetric(float64(failed.Load())/float64(b.N), "lost/op")
	if f := failed.Load(); strict && f > int64(b.N)/100 {
		b.Fatalf("%d of %d queries failed", f, b.N)
	}
}
