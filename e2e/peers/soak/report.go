//go:build linux

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// check is one row of the table.
type check struct {
	name   string
	ok     bool
	info   bool // printed, not counted
	detail string
}

// finish stops everything, checks, prints the table; false when a check failed.
func (s *soak) finish(ctx context.Context) bool {
	ctx = context.WithoutCancel(ctx)
	var checks []check
	add := func(name string, ok bool, format string, args ...any) {
		checks = append(checks, check{name: name, ok: ok, detail: fmt.Sprintf(format, args...)})
	}
	info := func(name, format string, args ...any) {
		checks = append(checks, check{name: name, ok: true, info: true, detail: fmt.Sprintf(format, args...)})
	}
	if s.end.IsZero() {
		s.end = time.Now()
	}
	for _, f := range s.failures {
		add("the run itself", false, "%s", firstLine(f))
	}

	// One more call once the load is over: the service is back after every fault.
	s.mu.Lock()
	a := s.app
	s.mu.Unlock()
	final := callResult{"error", "the appliance is not running"}
	if a != nil && !a.exited() {
		final = s.goCall(ctx, "soak-final")
	}

	// The appliance stops as an operator stops it; the upstream after it.
	if a != nil {
		err := a.stop(syscall.SIGTERM, 30*time.Second)
		add("appliance stopped cleanly (SIGTERM)", err == nil, "exit: %v", errOrOK(err))
	}
	s.stopSink()
	if s.server != nil {
		s.server.stop(syscall.SIGTERM, 10*time.Second)
	}

	// Every call the upstream executed has a durable authorization record.
	executed := readLines(s.callLog)
	auth, outcomes, err := s.auditRecords(ctx)
	if err != nil {
		add("executed calls have an authorization record", false, "audit show: %v", err)
	} else {
		var missing []string
		for n := range executed {
			if !auth[n] {
				missing = append(missing, n)
			}
		}
		slices.Sort(missing)
		d := fmt.Sprintf("upstream executed %d, authorization records %d (%d never executed: refused, hung or cut before the upstream), missing %d",
			len(executed), len(auth), len(auth)-(len(executed)-len(missing)), len(missing))
		if len(missing) > 0 {
			d += ": " + strings.Join(missing[:min(5, len(missing))], ", ")
		}
		add("executed calls have an authorization record", len(missing) == 0 && len(executed) > 0, "%s", d)
		info("outcome records", "%s", outcomes)
	}
	out, errOut, err := runIn(ctx, 10*time.Minute, "", nil, "", s.bin["mcpintercept"], "audit", "verify", s.auditDir)
	add("audit verify across the restart", err == nil, "%s", firstLine(strings.TrimSpace(out+errOut)))

	// What the clients saw.
	rep, lgEvents := s.loadgenResults()
	s.mu.Lock()
	events := append(lgEvents, s.events...)
	sdk := s.sdk
	windows := slices.Clone(s.windows)
	s.mu.Unlock()
	fab := rep.Fabricated + sdk["go"].fabricated + sdk["node"].fabricated
	add("no fabricated result", fab == 0, "success results without their own nonce: loadgen %d, go %d, node %d (successes: loadgen %d, go %d, node %d)",
		rep.Fabricated, sdk["go"].fabricated, sdk["node"].fabricated, rep.Requests, sdk["go"].ok, sdk["node"].ok)

	perWindow, outside, outsideEvents := attribute(events, windows, s.o.grace)
	var outsideSamples []string
	for _, e := range outsideEvents[:min(3, len(outsideEvents))] {
		outsideSamples = append(outsideSamples, fmt.Sprintf("%s %s at +%v: %.160s", e.client, e.nonce, e.start.Sub(s.start).Round(time.Millisecond), e.err))
	}
	nOut := outside["loadgen"] + outside["go"] + outside["node"]
	d := fmt.Sprintf("outside: loadgen %d, go %d, node %d", outside["loadgen"], outside["go"], outside["node"])
	if len(outsideSamples) > 0 {
		d += "; e.g. " + strings.Join(outsideSamples, "; ")
	}
	name := fmt.Sprintf("errors only inside fault windows (+%v grace)", s.o.grace)
	if s.o.strictWindows {
		add(name, nOut == 0, "%s", d)
	} else {
		info(name+", not checked", "%s", d)
	}

	// The service answers again after the last fault: a Go SDK call once the load is over, and
	// (-strict-windows) loadgen's successes after the last window + grace.
	if len(windows) > 0 {
		after := windows[len(windows)-1].end.Add(s.o.grace)
		var okThen int64 = -1
		for _, p := range s.progress {
			if !p.at.Before(after) {
				okThen = p.ok
				break
			}
		}
		lgAfter := int64(rep.Requests) - okThen
		if okThen < 0 {
			lgAfter = 0
		}
		ok := final.kind == "" && (!s.o.strictWindows || lgAfter > 0)
		d := fmt.Sprintf("loadgen successes after the last window + grace: %d; a Go SDK call after the load: ", lgAfter)
		if final.kind == "" {
			d += "ok"
		} else {
			d += final.kind + ": " + final.err
		}
		add("service back after the last fault", ok, "%s", d)
	}

	// Reloads.
	var reloaded, refused int
	s.mu.Lock()
	for _, p := range s.apps {
		reloaded += p.count("reloaded routes and rules")
		refused += p.count("reload refused")
	}
	sighups := s.sighups
	s.mu.Unlock()
	add("SIGHUP reloads accepted", sighups > 0 && reloaded > 0 && refused == 0, "%d SIGHUPs, %d reloads, %d refused", sighups, reloaded, refused)
	if len(s.sinkLines) > 0 {
		info("OTLP collector", "%s", strings.Join(s.sinkLines, "; "))
	}

	// Resources, per appliance process, after its warm-up (3 windows).
	for seg := 1; seg <= len(s.apps); seg++ {
		from := s.start
		if seg > 1 {
			for _, w := range windows {
				if w.name == "kill-9" {
					from = w.end
				}
			}
		}
		info(fmt.Sprintf("appliance %d: RSS and fds after warm-up", seg), "%s", growth(s.samples, seg, from.Add(3*s.unit)))
	}

	// The host: everything stopped, the audit file system unmounted, the lab down (-own-lab).
	s.teardown()
	add("host clean", true, "")
	hc := &checks[len(checks)-1]
	var dirty []string
	if s.o.ownLab {
		out, _, _ := runIn(ctx, 30*time.Second, "", nil, "", "ip", "netns", "list")
		for l := range strings.Lines(out) {
			if strings.HasPrefix(l, "mcpi-") {
				dirty = append(dirty, "namespace "+strings.Fields(l)[0]+" left")
			}
		}
	} else {
		if _, _, err := runIn(ctx, 30*time.Second, nsAppliance, nil, "", "nft", "list", "table", "inet", "mcpintercept"); err == nil {
			dirty = append(dirty, "table inet mcpintercept left in "+nsAppliance)
		}
		if r, err := ipRules(ctx, nsAppliance); err != nil || r != s.nsRulesBefore {
			dirty = append(dirty, fmt.Sprintf("ip rules of %s changed:\n%s", nsAppliance, r))
		}
	}
	if _, _, err := runIn(ctx, 30*time.Second, "", nil, "", "nft", "list", "table", "inet", "mcpintercept"); err == nil {
		dirty = append(dirty, "table inet mcpintercept in the host's namespace")
	}
	if r, err := ipRules(ctx, ""); err != nil || r != s.hostRulesBefore {
		dirty = append(dirty, fmt.Sprintf("host ip rules changed:\n%s", r))
	}
	if out, _ := runCmd(ctx, "findmnt", "-n", s.auditFS); out != "" {
		dirty = append(dirty, "audit tmpfs still mounted: "+out)
	}
	hc.ok = len(dirty) == 0
	if hc.ok {
		where := "no table inet mcpintercept in " + nsAppliance + " or the host, ip rules as before (both), audit tmpfs unmounted"
		if s.o.ownLab {
			where = "lab down (no mcpi-* namespace), no table inet mcpintercept, host ip rules as before, audit tmpfs unmounted"
		}
		hc.detail = where
	} else {
		hc.detail = strings.Join(dirty, "; ")
	}

	s.printTable(os.Stdout, checks, windows, perWindow, rep, sdk)
	ok := true
	for _, c := range checks {
		ok = ok && (c.ok || c.info)
	}
	return ok
}

// attribute counts each failed call against the first fault window its span [start, end]
// overlaps, the window extended by grace; what overlaps none is outside, by client and in order.
func attribute(events []event, windows []window, grace time.Duration) (perWindow []map[string]int, outside map[string]int, outsideEvents []event) {
	perWindow = make([]map[string]int, len(windows))
	for i := range perWindow {
		perWindow[i] = map[string]int{}
	}
	outside = map[string]int{}
	for _, e := range events {
		hit := -1
		for i, w := range windows {
			if !e.end.Before(w.start) && !e.start.After(w.end.Add(grace)) {
				hit = i
				break
			}
		}
		if hit >= 0 {
			perWindow[hit][e.client]++
			continue
		}
		outside[e.client]++
		outsideEvents = append(outsideEvents, e)
	}
	return perWindow, outside, outsideEvents
}

func errOrOK(err error) string {
	if err == nil {
		return "0"
	}
	return err.Error()
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}

func readLines(path string) map[string]bool {
	set := map[string]bool{}
	f, err := os.Open(path)
	if err != nil {
		return set
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" {
			set[l] = true
		}
	}
	return set
}

// auditRecords reads the log through `mcpintercept audit show --json`: the nonces (echo's text)
// of the authorization records, and a summary of the outcome records.
func (s *soak) auditRecords(ctx context.Context) (map[string]bool, string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, s.bin["mcpintercept"], "audit", "show", "--json", s.auditDir)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		return nil, "", err
	}
	if err := cmd.Start(); err != nil {
		return nil, "", err
	}
	auth := map[string]bool{}
	outcomes := map[string]int{}
	dec := json.NewDecoder(bufio.NewReaderSize(pipe, 1<<20))
	var decErr error
	for {
		var r struct {
			Kind      string `json:"kind"`
			Tool      string `json:"tool"`
			Outcome   string `json:"outcome"`
			Reason    string `json:"reason"`
			Arguments struct {
				Text string `json:"text"`
			} `json:"arguments"`
		}
		if err := dec.Decode(&r); err != nil {
			if err != io.EOF {
				decErr = err
			}
			break
		}
		switch r.Kind {
		case "authorization":
			if r.Tool == "echo" && r.Arguments.Text != "" {
				auth[r.Arguments.Text] = true
			}
		case "outcome":
			k := r.Outcome
			if r.Reason != "" && r.Outcome != "result" && r.Outcome != "error" {
				k += "/" + firstWord(r.Reason)
			}
			outcomes[k]++
		}
	}
	io.Copy(io.Discard, pipe)
	if err := cmd.Wait(); err != nil {
		return nil, "", fmt.Errorf("%v: %s", err, firstLine(stderr.String()))
	}
	if decErr != nil {
		return nil, "", decErr
	}
	var parts []string
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range outcomes {
			if !yield(k) {
				return
			}
		}
	}) {
		parts = append(parts, fmt.Sprintf("%s %d", k, outcomes[k]))
	}
	return auth, strings.Join(parts, ", "), nil
}

func firstWord(s string) string {
	f := strings.FieldsFunc(s, func(r rune) bool { return r == ' ' || r == ':' || r == ',' })
	if len(f) == 0 {
		return s
	}
	return f[0]
}

// loadReport is loadgen's final JSON line.
type loadReport struct {
	Requests   int `json:"requests"`
	Errors     int `json:"errors"`
	Fabricated int `json:"fabricated"`
}

// loadgenResults: loadgen's report and its failed requests.
func (s *soak) loadgenResults() (loadReport, []event) {
	var rep loadReport
	if s.loadgen != nil {
		for l := range strings.Lines(s.loadgen.output()) {
			if strings.HasPrefix(l, `{"label":`) {
				json.Unmarshal([]byte(l), &rep)
			}
		}
	}
	var evs []event
	f, err := os.Open(filepath.Join(s.work, "loadgen-errors.jsonl"))
	if err != nil {
		return rep, nil
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var e struct {
			Start int64  `json:"start_ms"`
			End   int64  `json:"end_ms"`
			Nonce string `json:"nonce"`
			Kind  string `json:"kind"`
			Err   string `json:"err"`
		}
		if json.Unmarshal(sc.Bytes(), &e) == nil {
			evs = append(evs, event{client: "loadgen", start: time.UnixMilli(e.Start), end: time.UnixMilli(e.End), nonce: e.Nonce, kind: e.Kind, err: e.Err})
		}
	}
	return rep, evs
}

func (s *soak) printTable(w io.Writer, checks []check, windows []window, perWindow []map[string]int, rep loadReport, sdk map[string]*sdkCounts) {
	ver, _, _ := runIn(context.Background(), 30*time.Second, "", nil, "", s.bin["mcpintercept"], "version")
	fmt.Fprintf(w, "\n== fault soak: %v of load, %d loadgen connections, window %v, grace %v; %s\n",
		s.end.Sub(s.start).Round(time.Second), s.o.conns, s.unit, s.o.grace, strings.TrimSpace(firstLine(ver)))
	nodeNote := ""
	if !s.node {
		nodeNote = " (Node SDK loop off: e2e/node/node_modules missing or -node off)"
	}
	fmt.Fprintf(w, "calls: loadgen ok %d, errors %d | Go SDK ok %d, errors %d | Node SDK ok %d, errors %d%s\n",
		rep.Requests, rep.Errors, sdk["go"].ok, sdk["go"].errors, sdk["node"].ok, sdk["node"].errors, nodeNote)
	fmt.Fprintf(w, "\n%-11s %9s %9s  %-22s  %s\n", "fault", "at", "length", "errors loadgen/go/node", "note")
	for i, win := range windows {
		pw := perWindow[i]
		fmt.Fprintf(w, "%-11s %9v %9v  %-22s  %s\n", win.name, win.start.Sub(s.start).Round(100*time.Millisecond),
			win.end.Sub(win.start).Round(100*time.Millisecond), fmt.Sprintf("%d/%d/%d", pw["loadgen"], pw["go"], pw["node"]), win.note)
	}
	fmt.Fprintf(w, "\n%-58s %-6s %s\n", "check", "result", "detail")
	for _, c := range checks {
		r := "PASS"
		switch {
		case c.info:
			r = "info"
		case !c.ok:
			r = "FAIL"
		}
		fmt.Fprintf(w, "%-58s %-6s %s\n", c.name, r, c.detail)
	}
}
