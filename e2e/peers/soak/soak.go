//go:build linux

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

const (
	nsClient    = "mcpi-client"
	nsAppliance = "mcpi-appliance"
	nsServer    = "mcpi-server"

	port      = 3030             // the soak route's port on 10.200.2.2 (the soakorigin front)
	backend   = "127.0.0.1:3100" // mcpserver, beside the front in mcpi-server
	adminAddr = "127.0.0.1:9464"
	otlpAddr  = "127.0.0.1:4318"
)

var url = fmt.Sprintf("https://10.200.2.2:%d/mcp", port)

// window is one fault, from start to end (wall clock, as the clients' own timestamps).
type window struct {
	name       string
	start, end time.Time
	note       string
}

// event is one failed (or fabricated) call of a client.
type event struct {
	client     string // loadgen, go, node
	start, end time.Time
	nonce      string
	kind       string // error, fabricated
	err        string
}

// sdkCounts are one SDK loop's results.
type sdkCounts struct{ ok, errors, fabricated int }

type soak struct {
	o    options
	bin  map[string]string
	work string
	pki  string

	auditFS  string // the tmpfs mount point
	auditDir string
	cfgPath  string
	caPEM    string
	callLog  string
	node     bool
	sighupN  int // configuration variant written last

	mu        sync.Mutex
	app       *proc   // the running appliance
	apps      []*proc // every appliance started, in order
	sink      *proc
	origin    *proc
	server    *proc
	loadgen   *proc
	windows   []window
	phase     string
	events    []event
	sdk       map[string]*sdkCounts
	samples   []sample
	progress  []loadProgress // loadgen's running totals, with the time read
	sinkLines []string       // otlpsink's report lines, one per run
	sighups   int

	hostRulesBefore string // `ip rule` of the host's own namespace, before
	nsRulesBefore   string // `ip rule` of mcpi-appliance, before the first start
	cleanups        []func()
	start, end      time.Time
	unit            time.Duration
	failures        []string // set-up failures
}

type loadProgress struct {
	at                   time.Time
	ok, errs, fabricated int64
}

func newSoak(o options) (*soak, error) {
	s := &soak{o: o, bin: map[string]string{}, sdk: map[string]*sdkCounts{"go": {}, "node": {}}}
	for _, n := range []string{"mcpintercept", "mcpserver", "mcpclient", "loadgen", "otlpsink", "soakorigin"} {
		p, err := findBin(o.bins, n)
		if err != nil {
			return nil, err
		}
		s.bin[n] = p
	}
	switch o.node {
	case "on", "auto":
		_, err := os.Stat(filepath.Join(o.repo, "e2e", "node", "node_modules", "@modelcontextprotocol", "sdk"))
		s.node = err == nil
		if !s.node && o.node == "on" {
			return nil, fmt.Errorf("the Node SDK is not installed in e2e/node (run `make deps`): %v", err)
		}
	case "off":
	default:
		return nil, fmt.Errorf("-node %q: want on, off or auto", o.node)
	}
	s.work = o.work
	if s.work == "" {
		d, err := os.MkdirTemp("", "mcpi-soak.")
		if err != nil {
			return nil, err
		}
		s.work = d
		if !o.keep {
			s.cleanups = append(s.cleanups, func() { os.RemoveAll(d) })
		}
	} else if err := os.MkdirAll(s.work, 0o755); err != nil {
		return nil, err
	}
	s.pki = filepath.Join(o.repo, ".lab", "pki")
	// A window is a thirtieth of the run: a minute at 30m, two seconds at 60s.
	s.unit = max(o.duration/30, 2*time.Second).Round(100 * time.Millisecond)
	return s, nil
}

func (s *soak) logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "soak: "+format+"\n", args...)
}

// teardown runs the clean-ups, last first.
func (s *soak) teardown() {
	for i := len(s.cleanups) - 1; i >= 0; i-- {
		s.cleanups[i]()
	}
	s.cleanups = nil
}

// run sets up, runs the faults, checks and prints the table; false when a check failed.
func (s *soak) run(ctx context.Context) bool {
	if err := s.setUp(ctx); err != nil {
		s.logf("set-up failed: %v", err)
		return false
	}
	s.logf("load and faults for %v (window %v, grace %v); work dir %s", s.o.duration, s.unit, s.o.grace, s.work)
	err := s.runFaults(ctx)
	if ctx.Err() != nil {
		s.logf("interrupted: stopping without checks")
		return false
	}
	if err != nil {
		s.failures = append(s.failures, err.Error())
		s.logf("%v", err)
	}
	return s.finish(ctx)
}

func (s *soak) setUp(ctx context.Context) error {
	var err error
	s.hostRulesBefore, err = ipRules(ctx, "")
	if err != nil {
		return err
	}
	if s.o.ownLab {
		if out, errOut, err := runIn(ctx, 2*time.Minute, "", nil, s.o.repo, filepath.Join(s.o.repo, "scripts", "lab.sh"), "up"); err != nil {
			return fmt.Errorf("lab up: %v\n%s%s", err, out, errOut)
		}
		s.cleanups = append(s.cleanups, func() {
			runIn(context.Background(), time.Minute, nsAppliance, nil, "", s.bin["mcpintercept"], "cleanup")
			runIn(context.Background(), 2*time.Minute, "", nil, s.o.repo, filepath.Join(s.o.repo, "scripts", "lab.sh"), "down")
		})
	}
	if s.nsRulesBefore, err = ipRules(ctx, nsAppliance); err != nil {
		return fmt.Errorf("the lab is not up (%v): run scripts/lab.sh up, or -own-lab", err)
	}

	// The audit directory on a file system of its own, to fill.
	s.auditFS = filepath.Join(s.work, "auditfs")
	if err := os.MkdirAll(s.auditFS, 0o700); err != nil {
		return err
	}
	mb := s.o.auditMB
	if mb == 0 {
		mb = 256 + 64*int(s.o.duration/time.Minute)
	}
	if out, err := runCmd(ctx, "mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%dm,mode=0700", mb), "mcpi-soak-audit", s.auditFS); err != nil {
		return fmt.Errorf("mount the audit tmpfs: %v: %s", err, out)
	}
	s.cleanups = append(s.cleanups, func() {
		if out, err := runCmd(context.Background(), "umount", s.auditFS); err != nil {
			s.logf("umount %s: %v: %s", s.auditFS, err, out)
		}
	})
	s.auditDir = filepath.Join(s.auditFS, "audit")
	s.callLog = filepath.Join(s.work, "calls.log")
	s.cfgPath = filepath.Join(s.work, "mcpintercept.yaml")
	if err := s.writeConfig(); err != nil {
		return err
	}
	if out, errOut, err := runIn(ctx, time.Minute, "", nil, s.work, s.bin["mcpintercept"], "check", "--config", s.cfgPath); err != nil {
		return fmt.Errorf("mcpintercept check: %v\n%s%s", err, out, errOut)
	}

	// The upstream: mcpserver recording every call, behind the faulty TLS front.
	if s.server, err = startProc("mcpserver", filepath.Join(s.work, "mcpserver.log"), nsServer, false, nil,
		s.bin["mcpserver"], "-stateless", "-listen", backend, "-call-log", s.callLog); err != nil {
		return err
	}
	s.cleanups = append(s.cleanups, func() { s.server.stop(syscall.SIGTERM, 10*time.Second) })
	if s.origin, err = startProc("soakorigin", filepath.Join(s.work, "soakorigin.log"), nsServer, true, nil,
		s.bin["soakorigin"], "-listen", fmt.Sprintf("10.200.2.2:%d", port), "-backend", backend,
		"-tls-cert", filepath.Join(s.pki, "server.pem"), "-tls-key", filepath.Join(s.pki, "server-key.pem")); err != nil {
		return err
	}
	s.cleanups = append(s.cleanups, func() { s.origin.in.Close(); s.origin.stop(syscall.SIGTERM, 10*time.Second) })
	if err := s.startSink(ctx); err != nil {
		return err
	}
	for _, p := range []*proc{s.server, s.origin} {
		if err := p.waitCount(ctx, "READY", 1, time.Minute); err != nil {
			return err
		}
	}
	s.cleanups = append(s.cleanups, func() {
		s.mu.Lock()
		a := s.app
		s.mu.Unlock()
		if a != nil && !a.exited() {
			a.stop(syscall.SIGTERM, 30*time.Second)
		}
	})
	if err := s.startAppliance(ctx); err != nil {
		return err
	}
	s.caPEM = filepath.Join(s.work, "appliance-ca.pem")
	out, errOut, err := runIn(ctx, time.Minute, "", nil, s.work, s.bin["mcpintercept"], "ca", "export", "--config", s.cfgPath)
	if err != nil {
		return fmt.Errorf("ca export: %v: %s", err, errOut)
	}
	if err := os.WriteFile(s.caPEM, []byte(out), 0o644); err != nil {
		return err
	}
	// The first list pins echo (tool_pins: learn); every later one is judged against the pin.
	r := s.goCall(ctx, "soak-prime")
	if r.kind != "" {
		return fmt.Errorf("the first call through the appliance failed: %s", r.err)
	}
	return nil
}

// writeConfig writes the configuration; each SIGHUP gets another variant (a rule's reason).
func (s *soak) writeConfig() error {
	cfg := fmt.Sprintf(`# Written by the fault soak (e2e/peers/soak); variant %d.
mechanism: nftables-tproxy
listen: {port: 15001}
intercept:
  destinations: [10.200.2.0/24]
  ports: [%d]
  local: true
ca: {dir: %s}
upstream_tls: {extra_cas: [%s]}
limits: {connect_timeout: 5s, drain_timeout: 5s}
admin: {listen: "%s"}
log: {flows: /dev/null}
routes:
  - name: soak
    match: {ports: [%d]}
    tls: terminate
    level: 2
    audit: true
    audit_arguments: true
    tool_pins: learn
    rule_set: soak
rule_sets:
  soak:
    - name: deny-denied-tools
      when: 'mcp.method == "tools/call" && mcp.name.startsWith("denied_")'
      action: deny
      reason: tools named denied_* are blocked (soak variant %d)
audit:
  dir: %s
  segment_bytes: 1MiB
tool_integrity: {dir: %s}
telemetry:
  otlp: {endpoint: "http://%s", sampling_ratio: 1, interval: 1s}
`, s.sighupN, port, filepath.Join(s.work, "ca"), filepath.Join(s.pki, "server-ca.pem"), adminAddr, port, s.sighupN,
		s.auditDir, filepath.Join(s.work, "tools"), otlpAddr)
	tmp := s.cfgPath + ".tmp"
	if err := os.WriteFile(tmp, []byte(cfg), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, s.cfgPath)
}

func (s *soak) startAppliance(ctx context.Context) error {
	s.mu.Lock()
	n := len(s.apps) + 1
	s.mu.Unlock()
	a, err := startProc("mcpintercept", filepath.Join(s.work, fmt.Sprintf("appliance-%d.log", n)), nsAppliance, false, nil,
		s.bin["mcpintercept"], "run", "--config", s.cfgPath, "--mechanism", "nftables-tproxy")
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.app = a
	s.apps = append(s.apps, a)
	s.mu.Unlock()
	return a.waitCount(ctx, "msg=ready", 1, time.Minute)
}

func (s *soak) startSink(ctx context.Context) error {
	n := len(s.sinkLines) + 1
	p, err := startProc("otlpsink", filepath.Join(s.work, fmt.Sprintf("otlpsink-%d.log", n)), nsAppliance, false, nil,
		s.bin["otlpsink"], "-listen", otlpAddr)
	if err != nil {
		return err
	}
	s.sink = p
	s.sinkLines = append(s.sinkLines, "")
	return p.waitCount(ctx, "READY", 1, time.Minute)
}

// stopSink stops the collector and keeps its report line.
func (s *soak) stopSink() {
	if s.sink == nil {
		return
	}
	s.sink.stop(syscall.SIGTERM, 10*time.Second)
	for l := range strings.Lines(s.sink.output()) {
		if strings.HasPrefix(l, "otlpsink:") {
			s.sinkLines[len(s.sinkLines)-1] = strings.TrimSpace(l)
		}
	}
	s.sink = nil
}

// setMode switches the upstream front and waits for its acknowledgement.
func (s *soak) setMode(ctx context.Context, m string) error {
	n := s.origin.count("MODE ") + 1
	if _, err := fmt.Fprintln(s.origin.in, m); err != nil {
		return fmt.Errorf("soakorigin: %w", err)
	}
	return s.origin.waitCount(ctx, "MODE ", n, 30*time.Second)
}

// runFaults runs the load and the fault schedule.
func (s *soak) runFaults(ctx context.Context) error {
	u := s.unit
	gap := 3 * u
	// The schedule: warm-up, then each fault after a quiet gap, then a quiet tail.
	faults := []struct {
		name string
		run  func(ctx context.Context) (note string, err error)
	}{
		{"reset", func(ctx context.Context) (string, error) { return "", s.upstreamFault(ctx, "reset", u) }},
		{"hang", func(ctx context.Context) (string, error) { return "", s.upstreamFault(ctx, "hang", u) }},
		{"disk-full", func(ctx context.Context) (string, error) { return s.diskFull(ctx, u) }},
		{"sighup", func(ctx context.Context) (string, error) { return s.sighupStorm(ctx, max(u, 6*time.Second)) }},
		{"kill-9", s.killNine},
		{"otlp-down", func(ctx context.Context) (string, error) { return "", s.collectorDown(ctx, u) }},
	}
	scheduled := gap + time.Duration(len(faults))*(u+gap) + max(u, 6*time.Second) - u
	total := max(s.o.duration, scheduled+gap)

	s.start = time.Now()
	var err error
	s.loadgen, err = startProc("loadgen", filepath.Join(s.work, "loadgen.log"), nsClient, false, nil,
		s.bin["loadgen"], "-url", url, "-ca", s.caPEM, "-conns", strconv.Itoa(s.o.conns), "-duration", total.String(),
		"-warmup", "0s", "-request-timeout", "5s", "-nonce", "lg", "-error-log", filepath.Join(s.work, "loadgen-errors.jsonl"),
		"-progress", "1s", "-label", "soak")
	if err != nil {
		return err
	}
	s.cleanups = append(s.cleanups, func() { s.loadgen.kill() })
	loopCtx, stopLoops := context.WithCancel(ctx)
	var loops sync.WaitGroup
	loops.Go(func() { s.sdkLoop(loopCtx, "go", s.goCall) })
	if s.node {
		loops.Go(func() { s.sdkLoop(loopCtx, "node", s.nodeCall) })
	}
	loops.Go(func() { s.monitor(loopCtx, total) })
	defer func() { stopLoops(); loops.Wait() }()

	s.setPhase("warm-up")
	if err := sleep(ctx, gap); err != nil {
		return err
	}
	for _, f := range faults {
		w := window{name: f.name, start: time.Now()}
		s.setPhase(f.name)
		note, err := f.run(ctx)
		w.end, w.note = time.Now(), note
		s.mu.Lock()
		s.windows = append(s.windows, w)
		s.mu.Unlock()
		if err != nil {
			return fmt.Errorf("fault %s: %w", f.name, err)
		}
		s.setPhase("quiet")
		if err := sleep(ctx, gap); err != nil {
			return err
		}
	}
	s.setPhase("tail")
	select {
	case <-s.loadgen.done:
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(time.Until(s.start.Add(total)) + time.Minute):
		return errors.New("loadgen did not finish")
	}
	stopLoops()
	loops.Wait()
	s.end = time.Now()
	return nil
}

func (s *soak) setPhase(p string) {
	s.mu.Lock()
	s.phase = p
	s.mu.Unlock()
}

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

func (s *soak) upstreamFault(ctx context.Context, mode string, d time.Duration) error {
	if err := s.setMode(ctx, mode); err != nil {
		return err
	}
	err := sleep(ctx, d)
	if merr := s.setMode(context.Background(), "normal"); merr != nil {
		return merr
	}
	return err
}

// diskFull fills the audit file system for d, then frees it.
func (s *soak) diskFull(ctx context.Context, d time.Duration) (string, error) {
	filler := filepath.Join(s.auditFS, "filler")
	f, err := os.OpenFile(filler, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return "", err
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(s.auditFS, &st); err != nil {
		f.Close()
		return "", err
	}
	if free := int64(st.Bavail) * st.Bsize; free > 0 {
		syscall.Fallocate(int(f.Fd()), 0, 0, free)
	}
	// Whatever fallocate left (or could not take), taken a page at a time until ENOSPC.
	page := make([]byte, 4096)
	for {
		if _, err := f.Write(page); err != nil {
			break
		}
	}
	f.Close()
	syscall.Statfs(s.auditFS, &st)
	note := fmt.Sprintf("%d KiB free while full", int64(st.Bavail)*st.Bsize>>10)
	err = sleep(ctx, d)
	if rerr := os.Remove(filler); rerr != nil {
		return note, rerr
	}
	return note, err
}

// sighupStorm rewrites the configuration and sends SIGHUP every 2 s for d.
func (s *soak) sighupStorm(ctx context.Context, d time.Duration) (string, error) {
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		s.sighupN++
		if err := s.writeConfig(); err != nil {
			return "", err
		}
		s.mu.Lock()
		a := s.app
		s.sighups++
		s.mu.Unlock()
		a.cmd.Process.Signal(syscall.SIGHUP)
		if err := sleep(ctx, min(2*time.Second, time.Until(end))); err != nil {
			return "", err
		}
	}
	return fmt.Sprintf("%d SIGHUPs", s.sighups), nil
}

// killNine SIGKILLs the appliance and starts it again on the same directories; the window ends
// when the new one is ready.
func (s *soak) killNine(ctx context.Context) (string, error) {
	s.mu.Lock()
	a := s.app
	s.mu.Unlock()
	a.cmd.Process.Signal(syscall.SIGKILL)
	<-a.done
	t := time.Now()
	if err := s.startAppliance(ctx); err != nil {
		return "", err
	}
	return fmt.Sprintf("restarted, ready after %v", time.Since(t).Round(10*time.Millisecond)), nil
}

func (s *soak) collectorDown(ctx context.Context, d time.Duration) error {
	s.stopSink()
	err := sleep(ctx, d)
	if serr := s.startSink(context.Background()); serr != nil {
		return serr
	}
	return err
}

// callResult is one SDK call: kind "" for a success carrying its nonce.
type callResult struct {
	kind string
	err  string
}

// goCall is one session of the Go SDK client: list (the pins judged), then echo with nonce.
func (s *soak) goCall(ctx context.Context, nonce string) callResult {
	out, errOut, err := runIn(ctx, 25*time.Second, nsClient, nil, "", s.bin["mcpclient"], "-url", url, "-ca", s.caPEM,
		"-tool", "echo", "-list", "-args", `{"text":"`+nonce+`"}`, "-timeout", "20s")
	var r struct {
		IsError        bool            `json:"is_error"`
		Text           string          `json:"text"`
		Error          json.RawMessage `json:"error"`
		ListError      string          `json:"list_error"`
		TransportError string          `json:"transport_error"`
	}
	if jerr := json.Unmarshal([]byte(strings.TrimSpace(out)), &r); jerr != nil {
		return callResult{"error", fmt.Sprintf("%v %v: %.300s", err, jerr, out+errOut)}
	}
	return judge(err, r.IsError, r.Text, nonce, string(r.Error)+r.ListError+r.TransportError)
}

// nodeCall is one session of the Node SDK client, as goCall.
func (s *soak) nodeCall(ctx context.Context, nonce string) callResult {
	out, errOut, err := runIn(ctx, 25*time.Second, nsClient, []string{"NODE_EXTRA_CA_CERTS=" + s.caPEM},
		filepath.Join(s.o.repo, "e2e", "node"), "node", "client.mjs", url, "--list-call", "echo", `{"text":"`+nonce+`"}`)
	var r struct {
		Call struct {
			IsError bool            `json:"is_error"`
			Text    string          `json:"text"`
			Error   json.RawMessage `json:"error"`
		} `json:"call"`
	}
	if jerr := json.Unmarshal([]byte(strings.TrimSpace(out)), &r); jerr != nil {
		return callResult{"error", fmt.Sprintf("%v %v: %.300s", err, jerr, out+errOut)}
	}
	e := string(r.Call.Error)
	if e == "null" {
		e = ""
	}
	return judge(err, r.Call.IsError, r.Call.Text, nonce, e)
}

// judge: a success is a result, not an error, from a client that exited 0, carrying the nonce;
// such a result that does not carry it is fabricated.
func judge(runErr error, isError bool, text, nonce, errText string) callResult {
	switch {
	case errText != "" || isError:
		return callResult{"error", fmt.Sprintf("%.300s%.200s", errText, text)}
	case runErr != nil:
		return callResult{"error", fmt.Sprintf("%v: %.200q", runErr, text)}
	case text != nonce:
		return callResult{"fabricated", fmt.Sprintf("result %.200q for nonce %s", text, nonce)}
	}
	return callResult{}
}

// sdkLoop calls through one SDK client until ctx ends, one session per call.
func (s *soak) sdkLoop(ctx context.Context, client string, call func(context.Context, string) callResult) {
	for i := 1; ctx.Err() == nil; i++ {
		nonce := fmt.Sprintf("%s-%d", client, i)
		t0 := time.Now()
		r := call(ctx, nonce)
		if ctx.Err() != nil {
			return // cut short by the end of the run: neither a success nor an error
		}
		s.mu.Lock()
		c := s.sdk[client]
		switch r.kind {
		case "":
			c.ok++
		case "fabricated":
			c.fabricated++
			c.errors++
		default:
			c.errors++
		}
		if r.kind != "" {
			s.events = append(s.events, event{client: client, start: t0, end: time.Now(), nonce: nonce, kind: r.kind, err: r.err})
		}
		s.mu.Unlock()
		sleep(ctx, 200*time.Millisecond)
	}
}

// monitor samples the appliance and prints a progress line now and then.
func (s *soak) monitor(ctx context.Context, total time.Duration) {
	every := max(time.Second, min(5*time.Second, s.o.duration/360))
	printEvery := max(5*time.Second, s.o.duration/60)
	tick := time.NewTicker(every)
	defer tick.Stop()
	lastPrint := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		s.mu.Lock()
		a := s.app
		seg := len(s.apps)
		s.mu.Unlock()
		if smp, ok := sampleProc(a.pid()); ok && !a.exited() {
			smp.at, smp.segment = time.Now(), seg
			s.mu.Lock()
			s.samples = append(s.samples, smp)
			s.mu.Unlock()
		}
		if lp, ok := lastProgress(s.loadgen.log); ok {
			lp.at = time.Now()
			s.mu.Lock()
			s.progress = append(s.progress, lp)
			s.mu.Unlock()
		}
		if time.Since(lastPrint) >= printEvery {
			lastPrint = time.Now()
			s.logf("%s", s.progressLine(total))
		}
	}
}

func (s *soak) progressLine(total time.Duration) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "%v/%v [%s]", time.Since(s.start).Round(time.Second), total.Round(time.Second), s.phase)
	if n := len(s.progress); n > 0 {
		p := s.progress[n-1]
		fmt.Fprintf(&b, " loadgen ok %d err %d fab %d", p.ok, p.errs, p.fabricated)
	}
	for _, c := range []string{"go", "node"} {
		if c == "node" && !s.node {
			continue
		}
		x := s.sdk[c]
		fmt.Fprintf(&b, " | %s ok %d err %d", c, x.ok, x.errors)
	}
	if n := len(s.samples); n > 0 {
		x := s.samples[n-1]
		fmt.Fprintf(&b, " | appliance pid %d rss %.1f MiB fds %d", x.pid, float64(x.rssKiB)/1024, x.fds)
	}
	return b.String()
}

// lastProgress is loadgen's last {"progress":...} line.
func lastProgress(path string) (loadProgress, bool) {
	f, err := os.Open(path)
	if err != nil {
		return loadProgress{}, false
	}
	defer f.Close()
	var last string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), `{"progress":`) {
			last = sc.Text()
		}
	}
	var p struct {
		Progress struct{ OK, Errors, Fabricated int64 } `json:"progress"`
	}
	if last == "" || json.Unmarshal([]byte(last), &p) != nil {
		return loadProgress{}, false
	}
	return loadProgress{ok: p.Progress.OK, errs: p.Progress.Errors, fabricated: p.Progress.Fabricated}, true
}

func runCmd(ctx context.Context, argv ...string) (string, error) {
	out, errOut, err := runIn(ctx, time.Minute, "", nil, "", argv...)
	return strings.TrimSpace(out + errOut), err
}

// ipRules is `ip rule` for IPv4 and IPv6 in namespace ns ("" for the soak's own).
func ipRules(ctx context.Context, ns string) (string, error) {
	var b strings.Builder
	for _, fam := range []string{"-4", "-6"} {
		out, errOut, err := runIn(ctx, 30*time.Second, ns, nil, "", "ip", fam, "rule", "show")
		if err != nil {
			return "", fmt.Errorf("ip %s rule show: %v: %s", fam, err, errOut)
		}
		b.WriteString(out)
	}
	return b.String(), nil
}
