package engine

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"mcpintercept/chain"
	"mcpintercept/telemetry"
	"mcpintercept/tlsmitm"
)

// BenchmarkIdleFlows holds many idle keep-alive Level 1 flows open through an Engine on loopback
// (each client made one request and now waits) and reports what one idle flow costs the
// appliance: heap+stack bytes (runtime.MemStats HeapInuse+StackInuse after GC) and goroutines.
// The client and the upstream HTTP server run in this process too, so the same number of
// connections made directly to the upstream is measured first and subtracted: "B/flow" and
// "goroutines/flow" are the engine's share, "total-B/flow" is everything.
//
// The measurement does not depend on b.N; run it with -benchtime=1x. The number of flows is
// MCPI_IDLE_FLOWS, else 10,000 (2,000 with -short), bounded by the descriptors the process may
// open (four per flow here). Issue 8 targets: <= 32 KiB per idle plaintext Level 1 flow, <= 64 KiB
// per idle terminate flow.
func BenchmarkIdleFlows(b *testing.B) {
	n := idleFlowCount(b)
	pki := newTestPKI(b)
	for _, terminate := range []bool{false, true} {
		name := "plaintext-level1"
		if terminate {
			name = "terminate-level1"
		}
		b.Run(name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				r := measureIdleFlows(b, n, terminate, pki)
				b.ReportMetric(r.perFlow, "B/flow")
				b.ReportMetric(r.goroutinesPerFlow, "goroutines/flow")
				b.ReportMetric(r.totalPerFlow, "total-B/flow")
				b.ReportMetric(r.directPerFlow, "direct-B/flow")
			}
		})
	}
}

// TestIdleFlowMemory asserts issue 8's targets with BenchmarkIdleFlows's measurement. It holds
// thousands of connections, so it runs only when MCPI_IDLE_FLOWS is set (to the number of flows).
func TestIdleFlowMemory(t *testing.T) {
	if os.Getenv("MCPI_IDLE_FLOWS") == "" {
		t.Skip("set MCPI_IDLE_FLOWS (e.g. 2000) to measure the memory of idle flows")
	}
	n := idleFlowCount(t)
	pki := newTestPKI(t)
	for _, tt := range []struct {
		name      string
		terminate bool
		max       float64
	}{{"plaintext-level1", false, 32 << 10}, {"terminate-level1", true, 64 << 10}} {
		t.Run(tt.name, func(t *testing.T) {
			r := measureIdleFlows(t, n, tt.terminate, pki)
			if r.perFlow > tt.max {
				t.Errorf("%.1f KiB per idle flow, want at most %.0f KiB", r.perFlow/1024, tt.max/1024)
			}
			if r.goroutinesPerFlow > 2.05 {
				t.Errorf("%.2f goroutines per idle flow, want at most 2", r.goroutinesPerFlow)
			}
		})
	}
}

type idleResult struct{ perFlow, goroutinesPerFlow, totalPerFlow, directPerFlow float64 }

func idleFlowCount(tb testing.TB) int {
	n := 10000
	if testing.Short() {
		n = 2000
	}
	if s := os.Getenv("MCPI_IDLE_FLOWS"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v <= 0 {
			tb.Fatalf("MCPI_IDLE_FLOWS=%q: want a positive number", s)
		}
		n = v
	}
	need := uint64(4*n + 1000)
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		tb.Fatal(err)
	}
	if rl.Cur < need {
		nl := syscall.Rlimit{Cur: need, Max: max(rl.Max, need)}
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &nl); err != nil {
			nl = syscall.Rlimit{Cur: rl.Max, Max: rl.Max}
			syscall.Setrlimit(syscall.RLIMIT_NOFILE, &nl)
			if m := int(rl.Max/4) - 250; m < n {
				tb.Logf("RLIMIT_NOFILE %d (raising it: %v): holding %d flows instead of %d", rl.Max, err, m, n)
				n = m
			}
		}
	}
	return n
}

// measureIdleFlows opens n flows directly to the upstream, then n through an Engine, and reports
// the difference per flow.
func measureIdleFlows(b testing.TB, n int, terminate bool, pki *testPKI) idleResult {
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", "2")
			io.WriteString(w, "ok")
		}),
		ErrorLog: nil,
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	if terminate {
		srv.TLSConfig = &tls.Config{Certificates: []tls.Certificate{*pki.leaf(b, "mcp.test")}}
		go srv.ServeTLS(ln, "", "")
	} else {
		go srv.Serve(ln)
	}
	defer srv.Close()
	up := ln.Addr().String()

	direct := holdIdle(b, n, up, terminate, pki)

	route := &Route{Name: "l1", TLS: Plaintext, Level: 1, Development: true}
	if terminate {
		route.TLS = Terminate
	}
	eln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		b.Fatal(err)
	}
	eng := New(Options{
		Mechanism: "external", Steering: fixedDst{netip.MustParseAddrPort(up)}, Dialer: &net.Dialer{},
		Limits: Limits{IdleTimeout: 10 * time.Minute, ConnectTimeout: 5 * time.Second},
		Flows:  discardSink{}, Metrics: telemetry.NewMetrics(), Log: slog.New(slog.DiscardHandler),
		Routing: &Routing{Routes: []*Route{route}}, Stages: chain.Stages(chain.Deps{}),
		TLS: TLSOptions{PeekTimeout: 5 * time.Second, Leaves: pki,
			Upstream: tlsmitm.OriginateConfig{Roots: pki.pool, HandshakeTimeout: 10 * time.Second}},
	})
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan struct{})
	go func() { eng.Serve(ctx, eln); close(served) }()
	defer func() {
		cancel()
		<-served
		dctx, dcancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer dcancel()
		eng.Drain(dctx)
	}()
	// One flow first, so that what every flow shares (leaf cache, metric series, pools) is not
	// counted per flow.
	holdIdle(b, 1, eln.Addr().String(), terminate, pki)
	through := holdIdle(b, n, eln.Addr().String(), terminate, pki)

	perFlow := (through.bytes - direct.bytes) / float64(n)
	gPerFlow := (through.goroutines - direct.goroutines) / float64(n)
	b.Logf("%d idle flows: engine %.1f KiB (of which stacks %.1f KiB) and %.2f goroutines per flow (total with client and upstream %.1f KiB, direct %.1f KiB)",
		n, perFlow/1024, (through.stack-direct.stack)/float64(n)/1024, gPerFlow, through.bytes/float64(n)/1024, direct.bytes/float64(n)/1024)
	return idleResult{perFlow: perFlow, goroutinesPerFlow: gPerFlow, totalPerFlow: through.bytes / float64(n),
		directPerFlow: direct.bytes / float64(n)}
}

type idleCost struct{ bytes, stack, goroutines float64 }

// holdIdle opens n keep-alive connections to addr, makes one request on each, measures the heap,
// stack and goroutines they hold while idle, then closes them and waits for their goroutines to
// end.
func holdIdle(b testing.TB, n int, addr string, useTLS bool, pki *testPKI) idleCost {
	b.Helper()
	bytes0, stack0, g0 := heapStack()
	conns := make([]net.Conn, n)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	next := make(chan int)
	for w := 0; w < 32; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				c, err := idleClient(addr, useTLS, pki)
				if err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					continue
				}
				conns[i] = c
			}
		}()
	}
	for i := range conns {
		next <- i
	}
	close(next)
	wg.Wait()
	if firstErr != nil {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
		b.Fatalf("opening idle flows: %v", firstErr)
	}
	time.Sleep(200 * time.Millisecond) // let the last responses' goroutines settle into idle
	bytes1, stack1, g1 := heapStack()
	if f := os.Getenv("MCPI_IDLE_HEAPPROFILE"); f != "" && n > 1 {
		// A heap profile of the idle flows, for finding what they hold.
		if w, err := os.Create(f + "." + strconv.FormatBool(useTLS) + "." + addr[len(addr)-5:]); err == nil {
			pprof.WriteHeapProfile(w)
			w.Close()
		}
	}
	for _, c := range conns {
		c.Close()
	}
	for deadline := time.Now().Add(30 * time.Second); runtime.NumGoroutine() > g0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			b.Logf("%d goroutines still running after closing the flows (%d before)", runtime.NumGoroutine(), g0)
			break
		}
	}
	return idleCost{bytes: float64(int64(bytes1) - int64(bytes0)), stack: float64(int64(stack1) - int64(stack0)),
		goroutines: float64(g1 - g0)}
}

// heapStack returns HeapInuse+StackInuse, StackInuse alone, and the number of goroutines.
func heapStack() (uint64, uint64, int) {
	// Several cycles: the second also frees what the first one's finalizers released, and each
	// one halves at most once the stacks that use under a quarter of their size (a handshake
	// grows one to 32 KiB; an appliance's periodic collections shrink it as these do).
	for range 5 {
		runtime.GC()
	}
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse + m.StackInuse, m.StackInuse, runtime.NumGoroutine()
}

func idleClient(addr string, useTLS bool, pki *testPKI) (net.Conn, error) {
	var c net.Conn
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return nil, err
	}
	c.SetDeadline(time.Now().Add(30 * time.Second))
	if useTLS {
		tc := tls.Client(c, &tls.Config{ServerName: "mcp.test", RootCAs: pki.pool})
		if err := tc.Handshake(); err != nil {
			c.Close()
			return nil, err
		}
		c = tc
	}
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: mcp.test\r\n\r\n"); err != nil {
		c.Close()
		return nil, err
	}
	resp, err := http.ReadResponse(bufio.NewReaderSize(c, 256), nil)
	if err != nil {
		c.Close()
		return nil, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	c.SetDeadline(time.Time{})
	return c, nil
}

type discardSink struct{}

func (discardSink) Write(telemetry.FlowRecord) {}

// testPKI is a CA for tests, with a LeafSource minting (and caching) leaves for names and IPs.
type testPKI struct {
	ca    *x509.Certificate
	key   *ecdsa.PrivateKey
	pool  *x509.CertPool
	mu    sync.Mutex
	cache map[string]*tls.Certificate
}

func newTestPKI(tb testing.TB) *testPKI {
	tb.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "engine test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		tb.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return &testPKI{ca: ca, key: key, pool: pool, cache: map[string]*tls.Certificate{}}
}

func (p *testPKI) Leaf(name string) (*tls.Certificate, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c := p.cache[name]; c != nil {
		return c, nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(int64(len(p.cache) + 2)), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if ip := net.ParseIP(name); ip != nil {
		tmpl.IPAddresses = []net.IP{ip}
	} else {
		tmpl.DNSNames = []string{name}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca, &key.PublicKey, p.key)
	if err != nil {
		return nil, err
	}
	c := &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	c.Leaf, _ = x509.ParseCertificate(der)
	p.cache[name] = c
	return c, nil
}

func (p *testPKI) leaf(tb testing.TB, name string) *tls.Certificate {
	tb.Helper()
	c, err := p.Leaf(name)
	if err != nil {
		tb.Fatal(err)
	}
	return c
}
