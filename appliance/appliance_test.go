package appliance

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"mcpintercept/config"
	"mcpintercept/engine"
	"mcpintercept/origin"
	"mcpintercept/telemetry"
)

// fakeMech plays the steering mechanism: it installs nothing, records what the appliance asked of
// it, and says every flow was going to dst.
type fakeMech struct {
	dst    netip.AddrPort
	active func() int64 // open flows, read when the steering is removed

	mu     sync.Mutex
	events []string
}

func (m *fakeMech) Name() origin.Mechanism { return origin.External }

func (m *fakeMech) Install(context.Context) error { m.event("install"); return nil }

func (m *fakeMech) Remove(context.Context) error {
	n := int64(-1)
	if m.active != nil {
		n = m.active()
	}
	m.event(fmt.Sprintf("remove (open flows %d)", n))
	return nil
}

func (m *fakeMech) Origin(*net.TCPConn) (origin.Origin, error) { return origin.Origin{Dst: m.dst}, nil }

func (m *fakeMech) event(e string) { m.mu.Lock(); m.events = append(m.events, e); m.mu.Unlock() }

func (m *fakeMech) Events() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.events)
}

// syncBuffer is a bytes.Buffer the flow log writes from its own goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// labLike is a configuration shaped like examples/lab.yaml, with external steering and no admin
// endpoint (tests that want one put it on an ephemeral port, which the file cannot say).
const labLike = `mechanism: external
external: {original_dst: local-address}
listen: {addresses: [127.0.0.1], port: 15001}
intercept:
  destinations: [10.200.2.0/24, "fd00:200:2::/64"]
  ports: [80, 443, "3000-3010", 8080, 8443, 9443]
limits: {drain_timeout: 5s}
admin: {listen: "off"}
# The fake upstreams of these tests listen on loopback, which the default upstream_deny refuses.
upstream_deny: [169.254.169.254/32]
routes:
  - name: lab-passthrough
    match: {ports: [9443]}
    tls: passthrough
  - name: lab-plaintext
    match: {ports: [8080, "3000-3004"], destinations: [10.9.0.0/16]}
    tls: plaintext
    level: 1
    development: true
    rule_set: lab
rule_sets:
  lab:
    - name: deny-denied-tools
      when: 'mcp.method == "tools/call" && mcp.name.startsWith("denied_")'
      action: deny
`

func writeConfig(t *testing.T, path, src string) *config.Config {
	t.Helper()
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path, config.Overrides{})
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	return cfg
}

// echoServer answers every connection with what it reads.
func echoServer(t *testing.T) netip.AddrPort {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(c, c); c.Close() }()
		}
	}()
	return netip.MustParseAddrPort(ln.Addr().String())
}

func loopbackListener(t *testing.T) *net.TCPListener {
	t.Helper()
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

func readyz(t *testing.T, a *Appliance) int {
	t.Helper()
	resp, err := http.Get("http://" + a.AdminAddr().String() + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestLifecycle: New binds and serves health but is not ready; Start installs the steering, says
// ready and forwards; Stop stops accepting, drains the open flow, and only then removes the
// steering (removing TPROXY rules first would strand the packets of open flows).
func TestLifecycle(t *testing.T) {
	cfg := writeConfig(t, filepath.Join(t.TempDir(), "lab.yaml"), labLike)
	cfg.Admin.Listen = "127.0.0.1:0"
	mech := &fakeMech{dst: echoServer(t)}
	ln := loopbackListener(t)
	var flows syncBuffer
	var logs syncBuffer
	a, err := New(context.Background(), cfg, Options{Stdout: &flows, Log: NewLogger("info", &logs), Mechanism: mech,
		Listeners: []*net.TCPListener{ln}})
	if err != nil {
		t.Fatal(err)
	}
	mech.active = a.Engine().Active
	if code := readyz(t, a); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz before Start: %d, want 503", code)
	}
	select {
	case <-a.Ready():
		t.Fatal("ready before Start")
	default:
	}
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	<-a.Ready()
	if code := readyz(t, a); code != http.StatusOK {
		t.Errorf("/readyz after Start: %d, want 200", code)
	}
	if !strings.Contains(logs.String(), "msg=ready") {
		t.Errorf("no ready line:\n%s", logs.String())
	}
	if err := a.Start(context.Background()); err == nil {
		t.Error("a second Start succeeded")
	}

	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c.Write([]byte("ping"))
	buf := make([]byte, 4)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("echo through the appliance: %q, %v", buf, err)
	}

	stopped := make(chan error, 1)
	go func() { stopped <- a.Stop(context.Background()) }()
	// Stopping: no new flows, the open one keeps going, the steering stays.
	deadline := time.Now().Add(5 * time.Second)
	for {
		if nc, err := net.DialTimeout("tcp", ln.Addr().String(), time.Second); err != nil {
			break
		} else {
			nc.Close()
		}
		if time.Now().After(deadline) {
			t.Fatal("the listener still accepts after Stop")
		}
		time.Sleep(10 * time.Millisecond)
	}
	c.Write([]byte("pong"))
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "pong" {
		t.Fatalf("the open flow during the drain: %q, %v", buf, err)
	}
	if ev := mech.Events(); !slices.Equal(ev, []string{"install"}) {
		t.Fatalf("events during the drain: %q", ev)
	}
	c.Close()
	select {
	case err := <-stopped:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Stop did not return once the flow ended")
	}
	if ev := mech.Events(); !slices.Equal(ev, []string{"install", "remove (open flows 0)"}) {
		t.Errorf("events: %q, want install, then remove after the drain", ev)
	}
	if !strings.Contains(logs.String(), "steering removed") {
		t.Errorf("no removal line:\n%s", logs.String())
	}
	// The echoed flow's record (probes made while Stop closed the listener may have their own).
	var rec telemetry.FlowRecord
	for line := range strings.Lines(flows.String()) {
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("flow log %q: %v", flows.String(), err)
		}
		if rec.BytesUp == 8 {
			break
		}
	}
	if rec.OrigDst != mech.dst.String() || rec.Mechanism != "external" || rec.BytesUp != 8 || rec.BytesDown != 8 || rec.Level != 0 {
		t.Errorf("record %+v", rec)
	}
	if err := a.Stop(context.Background()); err != nil {
		t.Errorf("second Stop: %v", err)
	}
	if err := a.Start(context.Background()); err == nil {
		t.Error("Start after Stop succeeded")
	}
	if ev := mech.Events(); len(ev) != 2 {
		t.Errorf("events after a second Stop and a refused Start: %q", ev)
	}
}

// TestNewRefusesBeforeInstalling: what can fail fails in New, before any steering exists, and
// releases what New had opened.
func TestNewRefusesBeforeInstalling(t *testing.T) {
	dir := t.TempDir()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	busyPort := netip.MustParseAddrPort(busy.Addr().String()).Port()
	tests := []struct {
		name       string
		src        string
		configErr  bool
		want       string
		ownListens bool // the test hands New a listener, which New must close
	}{
		{name: "rule that does not compile", src: strings.Replace(labLike, `mcp.method == "tools/call" &&`, `mcp.nope( &&`, 1),
			configErr: true, want: "c0.yaml:24:24: rule deny-denied-tools", ownListens: true},
		{name: "listen port in use", src: strings.Replace(labLike, "port: 15001", fmt.Sprintf("port: %d", busyPort), 1),
			want: "in use"},
		{name: "extra CA missing", src: strings.Replace(labLike, "tls: passthrough", "tls: terminate", 1) +
			"ca: {dir: " + filepath.Join(dir, "ca") + "}\nupstream_tls: {extra_cas: [" + filepath.Join(dir, "missing.pem") + "]}\n",
			want: "upstream_tls.extra_cas", ownListens: true},
		{name: "flow log in a missing directory", src: labLike + "log: {flows: " + filepath.Join(dir, "none", "flows.jsonl") + "}\n",
			want: "flow log", ownListens: true},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := writeConfig(t, filepath.Join(dir, fmt.Sprintf("c%d.yaml", i)), tc.src)
			mech := &fakeMech{}
			opt := Options{Mechanism: mech}
			var ln *net.TCPListener
			if tc.ownListens {
				ln = loopbackListener(t)
				opt.Listeners = []*net.TCPListener{ln}
			}
			a, err := New(context.Background(), cfg, opt)
			if err == nil {
				a.Stop(context.Background())
				t.Fatal("New succeeded")
			}
			var ce *ConfigError
			if errors.As(err, &ce) != tc.configErr || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v (config error %v), want %q (config error %v)", err, errors.As(err, &ce), tc.want, tc.configErr)
			}
			if ev := mech.Events(); len(ev) != 0 {
				t.Errorf("mechanism touched: %q", ev)
			}
			if ln != nil {
				if _, err := ln.Accept(); !errors.Is(err, net.ErrClosed) {
					t.Errorf("the listener handed to New is still open: %v", err)
				}
			}
		})
	}
}

// TestReload: a file that does not load or compile keeps the running routing and the metric
// reservation; a valid one swaps both, without a restart. Steps run in order on one appliance.
func TestReload(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lab.yaml")
	cfg := writeConfig(t, path, labLike)
	var logs syncBuffer
	a, err := New(context.Background(), cfg, Options{Log: NewLogger("info", &logs), Mechanism: &fakeMech{},
		Listeners: []*net.TCPListener{loopbackListener(t)}})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Stop(context.Background())
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	renamed := strings.NewReplacer("lab-plaintext", "lab-plaintext-2", "10.9.0.0/16", "10.7.0.0/16").Replace(labLike)
	steps := []struct {
		name     string
		src      string // written to the file before Reload
		err      string // "" for success
		log      string
		routes   []string
		keeps    string // a destination the request series keep a share for
		notKeeps string
	}{
		{name: "start-up", routes: []string{"lab-passthrough", "lab-plaintext"}, keeps: "10.9.1.1", notKeeps: "10.7.1.1"},
		{name: "broken YAML", src: "routes: [\n", err: "invalid configuration", log: "reload refused: invalid configuration",
			routes: []string{"lab-passthrough", "lab-plaintext"}, keeps: "10.9.1.1", notKeeps: "10.7.1.1"},
		{name: "unknown key", src: labLike + "limits2: {}\n", err: "invalid configuration",
			routes: []string{"lab-passthrough", "lab-plaintext"}, keeps: "10.9.1.1"},
		{name: "rule that does not compile", src: strings.Replace(renamed, "mcp.method ==", "mcp.method ===", 1), err: "invalid policy",
			log: "reload refused: invalid policy", routes: []string{"lab-passthrough", "lab-plaintext"}, keeps: "10.9.1.1", notKeeps: "10.7.1.1"},
		{name: "valid file swaps routes and reservation", src: renamed, log: "reloaded routes and rules",
			routes: []string{"lab-passthrough", "lab-plaintext-2"}, keeps: "10.7.1.1", notKeeps: "10.9.1.1"},
		{name: "terminate added: warned, swapped", src: strings.Replace(renamed, "tls: passthrough", "tls: terminate", 1),
			log: "restart to serve them", routes: []string{"lab-passthrough", "lab-plaintext-2"}, keeps: "10.7.1.1"},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			before := a.Engine().Routing()
			if st.src != "" {
				if err := os.WriteFile(path, []byte(st.src), 0o644); err != nil {
					t.Fatal(err)
				}
				err := a.Reload("")
				if st.err == "" && err != nil {
					t.Fatalf("Reload: %v", err)
				}
				if st.err != "" {
					if err == nil || !strings.Contains(err.Error(), st.err) {
						t.Fatalf("Reload: %v, want %q", err, st.err)
					}
					if a.Engine().Routing() != before {
						t.Error("a refused reload replaced the routing")
					}
				}
			}
			var names []string
			for _, r := range a.Engine().Routing().Routes {
				names = append(names, r.Name)
			}
			if !slices.Equal(names, st.routes) {
				t.Errorf("routes %q, want %q", names, st.routes)
			}
			if keep := telemetry.KeepPrefixes(a.keep); !keep(st.keeps+":8080") || (st.notKeeps != "" && keep(st.notKeeps+":8080")) {
				t.Errorf("reserved destinations %v: want %s kept, %q not", a.keep, st.keeps, st.notKeeps)
			}
			if st.log != "" && !strings.Contains(logs.String(), st.log) {
				t.Errorf("log lacks %q:\n%s", st.log, logs.String())
			}
		})
	}
}

// TestReloadFixedRouting: an appliance whose routing the caller fixed (exec) refuses to reload.
func TestReloadFixedRouting(t *testing.T) {
	cfg := writeConfig(t, filepath.Join(t.TempDir(), "lab.yaml"), labLike)
	cfg.Admin.Listen = "127.0.0.1:0" // NoAdmin wins
	fixed := &engine.Routing{Routes: []*engine.Route{{Name: "exec", TLS: engine.Auto, Level: 1}}}
	a, err := New(context.Background(), cfg, Options{Mechanism: &fakeMech{}, Routing: fixed, NoAdmin: true,
		Listeners: []*net.TCPListener{loopbackListener(t)}, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Stop(context.Background())
	if a.AdminAddr() != nil {
		t.Error("NoAdmin: admin endpoint open")
	}
	if err := a.Reload(""); err == nil || a.Engine().Routing() != fixed {
		t.Errorf("Reload on a fixed routing: %v", err)
	}
}

// TestReopenFlowLog: log.flows as a file is opened with its rotation settings and reopened on
// request (SIGUSR1 after logrotate renamed it): one record in the renamed file, then the new file
// rotating by size; every flow's record is in exactly one file. Without a file it is a no-op.
func TestReopenFlowLog(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "flows.jsonl")
	cfg := writeConfig(t, filepath.Join(dir, "lab.yaml"), labLike+"log: {flows: "+path+"}\n")
	if cfg.Log.FlowsMaxSize != config.DefaultFlowsMaxSize || cfg.Log.FlowsMaxFiles != config.DefaultFlowsMaxFiles {
		t.Fatalf("rotation %d × %d, want the defaults", cfg.Log.FlowsMaxSize, cfg.Log.FlowsMaxFiles)
	}
	cfg.Log.FlowsMaxSize = 1 // below what a file accepts: every record after the first rotates
	cfg.Log.FlowsMaxFiles = 3
	mech := &fakeMech{dst: echoServer(t)}
	ln := loopbackListener(t)
	var logs syncBuffer
	a, err := New(context.Background(), cfg, Options{Log: NewLogger("info", &logs), Mechanism: mech,
		Listeners: []*net.TCPListener{ln}})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Stop(context.Background())
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	lines := func(name string) int {
		b, _ := os.ReadFile(filepath.Join(dir, name))
		return strings.Count(string(b), "\n")
	}
	// flow echoes through the appliance and waits until its record is in the file at name.
	flow := func(msg, name string) {
		t.Helper()
		before := lines(name)
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		c.Write([]byte(msg))
		buf := make([]byte, len(msg))
		if _, err := io.ReadFull(c, buf); err != nil {
			t.Fatal(err)
		}
		c.Close()
		for deadline := time.Now().Add(5 * time.Second); lines(name) == before; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("no record for %q in %s", msg, name)
			}
		}
	}
	flow("one", "flows.jsonl")
	if err := os.Rename(path, path+"-logrotate"); err != nil {
		t.Fatal(err)
	}
	if err := a.ReopenFlowLog(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "flow log reopened") {
		t.Errorf("no reopen line:\n%s", logs.String())
	}
	flow("two", "flows.jsonl")
	flow("three", "flows.jsonl.1") // the size limit moved "two" to .1
	if err := a.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	for name, bytesUp := range map[string]int64{"flows.jsonl-logrotate": 3, "flows.jsonl.1": 3, "flows.jsonl": 5} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		var rec telemetry.FlowRecord
		if strings.Count(string(b), "\n") != 1 || json.Unmarshal(b, &rec) != nil || rec.BytesUp != bytesUp {
			t.Errorf("%s: %q, want one record of %d bytes up", name, b, bytesUp)
		}
	}

	// stdout: nothing to reopen.
	cfg = writeConfig(t, filepath.Join(dir, "stdout.yaml"), labLike)
	b, err := New(context.Background(), cfg, Options{Mechanism: &fakeMech{}, Stdout: io.Discard,
		Listeners: []*net.TCPListener{loopbackListener(t)}, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Stop(context.Background())
	if err := b.ReopenFlowLog(); err != nil {
		t.Errorf("ReopenFlowLog with the flow log on stdout: %v", err)
	}
}
