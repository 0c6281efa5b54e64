package admin

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"mcpintercept/telemetry"
)

// TestAdminReadinessChecks: /readyz is 503 with the failing check's reason while a check fails,
// and ready again once it passes; handle serves on the admin listener.
func TestAdminReadinessChecks(t *testing.T) {
	a, err := New("127.0.0.1:0", telemetry.NewMetrics(), func() any { return nil }, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	var broken atomic.Bool
	a.AddReadiness("audit", func() error {
		if broken.Load() {
			return errors.New("disk full")
		}
		return nil
	})
	a.handle("GET /extra", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "extra") }))
	a.Start()
	defer a.Shutdown(t.Context())
	get := func(p string) (int, string) {
		t.Helper()
		r, err := http.Get("http://" + a.Addr().String() + p)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Body.Close()
		b, _ := io.ReadAll(r.Body)
		return r.StatusCode, string(b)
	}
	a.SetReady(true)
	for _, step := range []struct {
		broken bool
		code   int
		body   string
	}{
		{false, 200, "ready"},
		{true, 503, "not ready: audit: disk full"},
		{false, 200, "ready"},
	} {
		broken.Store(step.broken)
		if code, body := get("/readyz"); code != step.code || !strings.Contains(body, step.body) {
			t.Errorf("broken=%v: /readyz %d %q, want %d %q", step.broken, code, body, step.code, step.body)
		}
	}
	a.SetReady(false)
	if code, body := get("/readyz"); code != 503 || !strings.Contains(body, "steering not installed") {
		t.Errorf("not ready: /readyz %d %q", code, body)
	}
	if code, body := get("/extra"); code != 200 || body != "extra" {
		t.Errorf("/extra: %d %q", code, body)
	}
}

// rawGet sends one HTTP/1.1 request with exactly this request target and Host (absolute-form
// targets and Host values a browser would send after DNS rebinding) and returns the status and
// body.
func rawGet(t *testing.T, addr, target, host string) (int, string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	proto := "HTTP/1.1"
	hostLine := "Host: " + host + "\r\n"
	if host == "-" { // no Host at all: HTTP/1.0, which does not require one
		proto, hostLine = "HTTP/1.0", ""
	}
	fmt.Fprintf(c, "GET %s %s\r\n%sConnection: close\r\n\r\n", target, proto, hostLine)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestAdminHostCheck: the admin listener answers only requests whose Host (or absolute-form
// target) names it — localhost, a loopback address, its own address, any port (a port forward
// changes it) — and 421 to a name that DNS rebinding would send (issue 29 item 16), on every
// endpoint, the token-free ones above all.
func TestAdminHostCheck(t *testing.T) {
	a, err := New("127.0.0.1:0", telemetry.NewMetrics(), func() any { return map[string]string{"mode": "transparent"} }, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	a.handle("GET /tools", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "tool list") }))
	a.SetReady(true)
	a.Start()
	defer a.Shutdown(t.Context())
	addr := a.Addr().String()
	_, port, _ := net.SplitHostPort(addr)
	for _, tt := range []struct {
		name, target, host string
		want               int
	}{
		{name: "listener address", target: "/metrics", host: addr, want: 200},
		{name: "localhost", target: "/metrics", host: "localhost:" + port, want: 200},
		{name: "localhost upper case", target: "/healthz", host: "LocalHost:" + port, want: 200},
		{name: "localhost with a trailing dot", target: "/healthz", host: "localhost.:" + port, want: 200},
		{name: "IPv6 loopback", target: "/healthz", host: "[::1]:" + port, want: 200},
		{name: "loopback without a port", target: "/healthz", host: "127.0.0.1", want: 200},
		{name: "other loopback address", target: "/healthz", host: "127.0.0.2:" + port, want: 200},
		{name: "port forward changes the port", target: "/tools", host: "localhost:19464", want: 200},
		{name: "no Host (HTTP/1.0)", target: "/healthz", host: "-", want: 200},
		{name: "rebinding name on /metrics", target: "/metrics", host: "rebind.attacker.example:" + port, want: 421},
		{name: "rebinding name on /tools", target: "/tools", host: "rebind.attacker.example:" + port, want: 421},
		{name: "rebinding name on /declaration", target: "/declaration", host: "rebind.attacker.example", want: 421},
		{name: "rebinding name on /healthz", target: "/healthz", host: "rebind.attacker.example", want: 421},
		{name: "rebinding name on /readyz", target: "/readyz", host: "rebind.attacker.example", want: 421},
		{name: "name that starts like loopback", target: "/metrics", host: "127.0.0.1.attacker.example:" + port, want: 421},
		{name: "name that starts like localhost", target: "/metrics", host: "localhost.attacker.example:" + port, want: 421},
		{name: "another address than the listener's", target: "/metrics", host: "10.1.2.3:" + port, want: 421},
		{name: "absolute-form naming the listener", target: "http://" + addr + "/metrics", host: "127.0.0.1", want: 200},
		{name: "absolute-form naming another host", target: "http://rebind.attacker.example:" + port + "/metrics", host: addr, want: 421},
		{name: "unknown path still refused first", target: "/nope", host: "rebind.attacker.example", want: 421},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, body := rawGet(t, addr, tt.target, tt.host)
			if code != tt.want {
				t.Fatalf("GET %s Host %q: %d %q, want %d", tt.target, tt.host, code, body[:min(len(body), 60)], tt.want)
			}
			if code == 421 {
				if !strings.Contains(body, "does not name this admin listener") {
					t.Errorf("421 body %q does not say why", body)
				}
				if strings.Contains(body, "tool list") || strings.Contains(body, "transparent") || strings.Contains(body, "# HELP") {
					t.Errorf("a refused request got the endpoint's content: %q", body)
				}
			}
		})
	}
}

// TestAdminHostsExtra: admin.hosts adds names (Prometheus scraping by a DNS name) and
// addresses (a NAT or port-forward address); a wildcard bind answers every IP literal (all the
// host's addresses reach it, Prometheus scraping by address) and still no unknown name.
func TestAdminHostsExtra(t *testing.T) {
	for _, tt := range []struct {
		name   string
		listen string
		allow  []string
		host   string
		want   int
	}{
		{name: "configured name", listen: "127.0.0.1:0", allow: []string{"Scrape.Example."}, host: "scrape.example:9464", want: 200},
		{name: "configured name, other case and trailing dot", listen: "127.0.0.1:0", allow: []string{"scrape.example"}, host: "SCRAPE.example.", want: 200},
		{name: "configured address", listen: "127.0.0.1:0", allow: []string{"192.0.2.7"}, host: "192.0.2.7:9464", want: 200},
		{name: "configured IPv6 address in brackets", listen: "127.0.0.1:0", allow: []string{"[2001:db8::7]"}, host: "[2001:db8::7]:9464", want: 200},
		{name: "a subdomain of a configured name", listen: "127.0.0.1:0", allow: []string{"scrape.example"}, host: "x.scrape.example", want: 421},
		{name: "unconfigured name", listen: "127.0.0.1:0", allow: []string{"scrape.example"}, host: "other.example", want: 421},
		{name: "wildcard bind: a node address", listen: "0.0.0.0:0", host: "10.1.2.3:9464", want: 200},
		{name: "wildcard bind: IPv6 node address", listen: "0.0.0.0:0", host: "[2001:db8::1]:9464", want: 200},
		{name: "wildcard bind: a name", listen: "0.0.0.0:0", host: "rebind.attacker.example:9464", want: 421},
		{name: "wildcard bind: an IPv4-mapped literal", listen: "0.0.0.0:0", host: "[::ffff:10.1.2.3]:9464", want: 200},
		{name: "listen host given as localhost", listen: "localhost:0", host: "localhost", want: 200},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a, err := New(tt.listen, telemetry.NewMetrics(), func() any { return nil }, slog.New(slog.NewTextHandler(io.Discard, nil)))
			if err != nil {
				t.Fatal(err)
			}
			a.AllowHosts(tt.allow...)
			a.Start()
			defer a.Shutdown(t.Context())
			_, port, _ := net.SplitHostPort(a.Addr().String())
			if code, body := rawGet(t, net.JoinHostPort("127.0.0.1", port), "/healthz", tt.host); code != tt.want {
				t.Fatalf("Host %q: %d %q, want %d", tt.host, code, body, tt.want)
			}
		})
	}
}

// FuzzAdminHost: whatever Host a client sends, the policy of a loopback listener allows only
// what Go's URL parser (as a browser's) reads as localhost or a loopback address; a name is
// never allowed by accident.
func FuzzAdminHost(f *testing.F) {
	for _, s := range []string{"127.0.0.1:9464", "localhost", "[::1]:1", "evil.example:9464", "localhost.evil.example",
		"127.0.0.1.evil.example", "[::ffff:127.0.0.1]", "LOCALHOST.", "::1", "127.0.0.1:", "[fe80::1%25lo]:9464", ""} {
		f.Add(s)
	}
	p := newHostPolicy("127.0.0.1:9464", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 9464})
	f.Fuzz(func(t *testing.T, host string) {
		if !p.allows(host) || host == "" {
			return
		}
		u, err := url.Parse("http://" + host + "/")
		if err != nil || u.Host != host {
			t.Fatalf("Host %q allowed, but a URL does not read it as its authority (%v)", host, err)
		}
		h := normalizeHost(u.Hostname())
		if h == "localhost" {
			return
		}
		ip, err := netip.ParseAddr(h)
		if err != nil || !ip.Unmap().IsLoopback() {
			t.Fatalf("Host %q allowed; a browser reads its host as %q", host, u.Hostname())
		}
	})
}

func TestAdminReadiness(t *testing.T) {
	m := telemetry.NewMetrics()
	a, err := New("127.0.0.1:0", m, func() any { return telemetry.Declare(nil, telemetry.BuildCapabilities) }, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	a.Start()
	defer a.Shutdown(t.Context())
	base := "http://" + a.Addr().String()
	get := func(p string) (int, string) {
		r, err := http.Get(base + p)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Body.Close()
		b, _ := io.ReadAll(r.Body)
		return r.StatusCode, string(b)
	}
	if c, _ := get("/readyz"); c != http.StatusServiceUnavailable {
		t.Fatalf("/readyz before SetReady: %d", c)
	}
	a.SetReady(true)
	if c, _ := get("/readyz"); c != http.StatusOK {
		t.Fatalf("/readyz after SetReady: %d", c)
	}
	if c, _ := get("/healthz"); c != http.StatusOK {
		t.Fatalf("/healthz: %d", c)
	}
	m.FlowsRefused.WithLabelValues("loop").Inc()
	if _, body := get("/metrics"); !strings.Contains(body, `mcpintercept_flows_refused_total{reason="loop"} 1`) {
		t.Fatalf("/metrics lacks the refused counter")
	}
	if _, body := get("/declaration"); !strings.Contains(body, `"Transparent"`) {
		t.Fatalf("/declaration: %s", body)
	}
}
