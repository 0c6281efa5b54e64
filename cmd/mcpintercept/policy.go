package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"mcpintercept/appliance"
	"mcpintercept/engine"
	"mcpintercept/origin"
	"mcpintercept/policy"
	"mcpintercept/telemetry"
)

// cmdPolicy is `mcpintercept policy test --config F --input RECORDS.jsonl [--rule-set NAME]
// [-o json]`: a dry run of the configuration's rule sets over recorded requests (flow log lines).
// Exit 0 when every recorded decision is reproduced, 1 when one is not (or could not be
// evaluated), 2 on a usage or input error.
func cmdPolicy(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "test" {
		args = args[1:]
	} else if len(args) == 0 || !strings.HasPrefix(args[0], "-") {
		fmt.Fprintln(stderr, "usage: mcpintercept policy test --config FILE --input RECORDS.jsonl [--rule-set NAME] [-o json]")
		return exitUsage
	}
	fs := flag.NewFlagSet("policy test", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfgPath := fs.String("config", "", "configuration file (YAML) whose rule sets are tried")
	input := fs.String("input", "", "flow log (JSON lines) of the requests to replay; - reads stdin")
	ruleSet := fs.String("rule-set", "", "evaluate every record with this rule set (default: the set of the route each record matches)")
	output := fs.String("o", "text", "output: text or json (one object per record, then a summary)")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "mcpintercept policy test: unexpected argument %q\n", fs.Arg(0))
		return exitUsage
	}
	if *cfgPath == "" || *input == "" {
		fmt.Fprintln(stderr, "mcpintercept policy test: --config FILE and --input FILE are required")
		return exitUsage
	}
	if *output != "text" && *output != "json" {
		fmt.Fprintf(stderr, "mcpintercept policy test: -o %q: want text or json\n", *output)
		return exitUsage
	}
	cfg, ok := loadConfig(&commonFlags{config: *cfgPath}, stderr)
	if !ok {
		return exitUsage
	}
	rp, err := newReplayer(func(prev appliance.CompiledRuleSets) (*engine.Routing, appliance.CompiledRuleSets, error) {
		return appliance.RoutingFromConfig(cfg, prev)
	}, cfg.RuleSetOrder, *ruleSet)
	if err != nil {
		reportRuleErrors(stderr, err)
		return exitUsage
	}
	var in io.Reader = os.Stdin
	if *input != "-" {
		f, err := os.Open(*input)
		if err != nil {
			fmt.Fprintf(stderr, "mcpintercept policy test: %v\n", err)
			return exitUsage
		}
		defer f.Close()
		in = f
	}
	out := bufio.NewWriter(stdout)
	defer out.Flush()
	var sum replaySummary
	err = readRecords(in, func(line int, rec *telemetry.FlowRecord) error {
		res := rp.replay(line, rec)
		sum.add(&res)
		if *output == "json" {
			b, _ := json.Marshal(res)
			out.Write(append(b, '\n'))
		} else {
			res.writeText(out)
		}
		return nil
	})
	if err != nil {
		out.Flush()
		fmt.Fprintf(stderr, "mcpintercept policy test: %s: %v\n", *input, err)
		return exitUsage
	}
	if *output == "json" {
		b, _ := json.Marshal(struct {
			Summary *replaySummary `json:"summary"`
		}{&sum})
		out.Write(append(b, '\n'))
	} else {
		sum.writeText(out)
	}
	if sum.Disagree > 0 || sum.Unknown > 0 {
		return exitRuntime
	}
	return exitOK
}

// maxRecordLine bounds one line of the input: a flow log record is a few hundred bytes, its
// longest fields (reason, path) bounded by the appliance.
const maxRecordLine = 1 << 20

// readRecords calls fn with each JSON object line of r (blank lines skipped), numbered from 1.
// A line that is not a flow log record (not a JSON object, a key of the wrong type, longer than
// maxRecordLine) is an error naming the line.
func readRecords(r io.Reader, fn func(line int, rec *telemetry.FlowRecord) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxRecordLine)
	for line := 1; sc.Scan(); line++ {
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		if b[0] != '{' {
			return fmt.Errorf("line %d: not a flow log record (a JSON object)", line)
		}
		var rec telemetry.FlowRecord
		dec := json.NewDecoder(bytes.NewReader(b))
		if err := dec.Decode(&rec); err != nil {
			return fmt.Errorf("line %d: %v", line, err)
		}
		if dec.More() {
			return fmt.Errorf("line %d: more than one JSON value", line)
		}
		if err := fn(line, &rec); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return fmt.Errorf("a line longer than %d bytes", maxRecordLine)
		}
		return err
	}
	return nil
}

// replayClock is the rule sets' clock during a replay: the time of the record being evaluated,
// so that rate limits refill between records as they did between the requests.
type replayClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *replayClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *replayClock) set(t time.Time) {
	c.mu.Lock()
	// Records are written as requests end, so times can step back a little; a bucket never
	// refills backwards anyway.
	if t.After(c.t) {
		c.t = t
	}
	c.mu.Unlock()
}

// replayer evaluates records against compiled rule sets.
type replayer struct {
	rt    *engine.Routing
	sets  appliance.CompiledRuleSets
	clock *replayClock
	fixed string // --rule-set
}

// newReplayer compiles the rule sets with the replay clock: sets compiled empty WithClock are
// handed to compile as the previous sets, whose clock the new ones keep (policy.CompileWithState).
func newReplayer(compile func(appliance.CompiledRuleSets) (*engine.Routing, appliance.CompiledRuleSets, error), names []string, fixed string) (*replayer, error) {
	clk := &replayClock{}
	prev := appliance.CompiledRuleSets{}
	for _, n := range names {
		s, err := policy.Compile(nil, policy.WithClock(clk.now))
		if err != nil {
			return nil, err
		}
		prev[n] = s
	}
	rt, sets, err := compile(prev)
	if err != nil {
		return nil, err
	}
	if fixed != "" && sets[fixed] == nil {
		return nil, fmt.Errorf("--rule-set %s: no such rule set (have %s)", fixed, strings.Join(names, ", "))
	}
	return &replayer{rt: rt, sets: sets, clock: clk, fixed: fixed}, nil
}

// Verdicts of a replayed record.
const (
	verdictAgree    = "agree"
	verdictDisagree = "disagree"
	verdictUnknown  = "unknown" // a rule reached before the decision reads what the record lacks
	verdictSkipped  = "skipped" // not a decision of the rules (see replayResult.Note)
)

// replayResult is one record's line of the report.
type replayResult struct {
	Line     int                  `json:"line"`
	Time     string               `json:"time,omitempty"`
	Client   string               `json:"client,omitempty"`
	OrigDst  string               `json:"orig_dst,omitempty"`
	Level    int                  `json:"level"`
	Method   string               `json:"mcp_method,omitempty"`
	Name     string               `json:"mcp_name,omitempty"`
	Route    string               `json:"route,omitempty"`
	RuleSet  string               `json:"rule_set,omitempty"`
	Recorded replayDecision       `json:"recorded"`
	Replayed *replayDecision      `json:"replayed,omitempty"`
	Verdict  string               `json:"verdict"`
	Note     string               `json:"note,omitempty"`
	Rules    []policy.RuleOutcome `json:"rules,omitempty"`
}

type replayDecision struct {
	Decision string   `json:"decision"`
	Rule     string   `json:"rule,omitempty"`
	Reason   string   `json:"reason,omitempty"`
	Shadow   []string `json:"shadow,omitempty"` // would_deny:RULE, would_rate_limit:RULE
}

// shadowMark finds the would-be decisions of shadow rules in a recorded reason.
var shadowMark = regexp.MustCompile(`\b(would_deny|would_rate_limit) by (.+?) \(shadow\)`)

func recordedShadow(reason string) []string {
	var out []string
	for _, m := range shadowMark.FindAllStringSubmatch(reason, -1) {
		out = append(out, m[1]+":"+m[2])
	}
	return out
}

func (rp *replayer) replay(line int, rec *telemetry.FlowRecord) replayResult {
	res := replayResult{Line: line, Client: rec.Client, OrigDst: rec.OrigDst, Level: rec.Level,
		Method: rec.MCPMethod, Name: rec.MCPName,
		Recorded: replayDecision{Decision: rec.Decision, Rule: rec.Rule, Reason: rec.Reason, Shadow: recordedShadow(rec.Reason)}}
	if !rec.Time.IsZero() {
		res.Time = rec.Time.UTC().Format("2006-01-02T15:04:05.000Z07:00")
		rp.clock.set(rec.Time.Time)
	}
	client, _ := netip.ParseAddrPort(rec.Client)
	dst, dstErr := netip.ParseAddrPort(rec.OrigDst)
	name := rp.fixed
	if name == "" {
		if dstErr != nil {
			res.Verdict, res.Note = verdictSkipped, "orig_dst is not IP:port, so no route can be chosen (give --rule-set)"
			return res
		}
		route := rp.route(client, dst, rec.SNI)
		if route == nil {
			res.Verdict, res.Note = verdictSkipped, "no route matches and default_route closes: not a rule decision"
			return res
		}
		res.Route, name = route.Name, route.RuleSet
		if name == "" {
			res.Verdict, res.Note = verdictSkipped, "the route applies no rule set"
			return res
		}
	}
	res.RuleSet = name
	set := rp.sets[name]
	if note := notJudged(rec, set); note != "" {
		res.Verdict, res.Note = verdictSkipped, note
		return res
	}
	in, known := inputOf(rec, client, dst)
	ex := set.Explain(in, known)
	d := ex.Decision
	got := replayDecision{Decision: string(d.Action), Rule: d.Rule, Reason: d.Reason}
	for _, h := range d.Shadow {
		w := "would_deny:"
		if h.Would == policy.ActionRateLimited {
			w = "would_rate_limit:"
		}
		got.Shadow = append(got.Shadow, w+h.Rule)
	}
	res.Replayed, res.Rules = &got, ex.Rules
	switch {
	case got.Decision == res.Recorded.Decision && got.Rule == res.Recorded.Rule && slices.Equal(got.Shadow, res.Recorded.Shadow):
		res.Verdict = verdictAgree
		if ex.Unknown {
			res.Note = "agrees, though a rule reached before the decision could not be evaluated"
		}
	case ex.Unknown:
		res.Verdict = verdictUnknown
		res.Note = "a rule reached before the decision reads a field the record does not carry"
	default:
		res.Verdict = verdictDisagree
	}
	return res
}

// route is the route a flow to dst from client with server name sni takes, as the engine
// chooses it (first match; SNI only for routes that name one); nil when default_route closes.
func (rp *replayer) route(client, dst netip.AddrPort, sni string) *engine.Route {
	for _, r := range rp.rt.Routes {
		if len(r.Destinations) > 0 && !origin.InPrefixes(r.Destinations, dst.Addr()) {
			continue
		}
		if len(r.Clients) > 0 && (!client.IsValid() || !origin.InPrefixes(r.Clients, client.Addr())) {
			continue
		}
		if len(r.Ports) > 0 && !slices.ContainsFunc(r.Ports, func(p engine.PortRange) bool { return p.Contains(dst.Port()) }) {
			continue
		}
		if len(r.SNI) > 0 && !engine.MatchSNI(r.SNI, sni) {
			continue
		}
		return r
	}
	if rp.rt.DefaultClose {
		return nil
	}
	if rp.rt.Default != nil {
		return rp.rt.Default
	}
	return engine.DefaultRoute
}

// notJudged says why a record is not a decision of its rule set ("" when it is).
func notJudged(rec *telemetry.FlowRecord, set *policy.Set) string {
	if rec.Rule != "" && !set.HasRule(rec.Rule) {
		// The route's own guards (upgrade, strict MCP headers, Host), on_mismatch, schema
		// validation, tool integrity, the upstream deny list: refusals in another name.
		return "decided by " + rec.Rule + ", which is not a rule of this set (a guard of the route or the appliance)"
	}
	if rec.Level == 2 && rec.Direction == "" && rec.JSONRPCID == "" && rec.MCPMethod == "" {
		return "a Level 2 exchange without a JSON-RPC message: no rule judged it"
	}
	return ""
}

// recordFields are the rule fields a flow log record can fill; every other field a rule reads
// (http.headers, mcp.arguments, mcp.result, mcp.error, mcp.client_info, mcp.session, mcp.tool,
// mcp.mode, mcp.retry, the tool integrity fields, auth.*) is unknown offline.
var recordFields = map[string]bool{
	"client": true, "client.address": true, "client.port": true, "client.pid": true, "client.uid": true,
	"client.gid": true, "client.comm": true, "client.exe": true, "client.cgroup": true,
	"conn": true, "conn.orig_dst": true, "conn.orig_ip": true, "conn.orig_port": true, "conn.mechanism": true,
	"conn.tls": true, "conn.sni": true,
	"http.method": true, "http.path": true,
	"mcp.version": true, "mcp.method": true, "mcp.name": true, "mcp.id": true, "mcp.direction": true,
	"mcp.kind": true,
}

// inputOf builds the policy input a record stands for, at the record's level (0: client and
// conn only, as connection rules see them), and what of it the record knows.
func inputOf(rec *telemetry.FlowRecord, client, dst netip.AddrPort) (*policy.Input, func(string) bool) {
	c := &policy.Client{}
	if client.IsValid() {
		c.Address, c.Port = client.Addr().String(), client.Port()
	} else if h, _, err := net.SplitHostPort(rec.Client); err == nil {
		c.Address = h
	}
	if p := rec.Process; p != nil {
		c.Process = &policy.Process{PID: p.PID, UID: p.UID, GID: p.GID, Comm: p.Comm, Exe: p.Exe, Cgroup: p.Cgroup}
	}
	conn := &policy.Conn{OrigDst: rec.OrigDst, Mechanism: rec.Mechanism, TLS: rec.TLS,
		Hello: rec.TLS == "terminate" || rec.TLS == "passthrough", SNI: rec.SNI}
	if dst.IsValid() {
		conn.OrigIP, conn.OrigPort = dst.Addr().String(), dst.Port()
	}
	in := &policy.Input{Vars: policy.Vars{Client: c, Conn: conn}}
	kindKnown := true
	if rec.Level >= 1 {
		in.Vars.HTTP = &policy.Request{Method: rec.HTTPMethod, Path: rec.Path}
		m := &policy.Message{Version: rec.MCPVersion, Method: rec.MCPMethod, Name: rec.MCPName}
		if rec.Level >= 2 {
			m.ID, m.Direction = rec.JSONRPCID, rec.Direction
			switch {
			case rec.MCPMethod != "" && rec.JSONRPCID != "":
				m.Kind = "request"
			case rec.MCPMethod != "":
				m.Kind = "notification"
			default:
				// A response or an error: which one, the record does not say.
				kindKnown = false
			}
			in.ServerMessage = rec.Direction == "server_to_client"
		}
		in.Vars.MCP = m
	}
	known := func(f string) bool {
		if f == "mcp.kind" {
			return kindKnown
		}
		// At level 0 the http and mcp variables are absent live too: nothing is unknown.
		return recordFields[f] || rec.Level == 0 && (strings.HasPrefix(f, "http") || strings.HasPrefix(f, "mcp"))
	}
	return in, known
}

func (r *replayResult) writeText(w io.Writer) {
	// What the record holds came from the network: printed through safe, never raw.
	what := strings.TrimSpace(safe(r.Method) + " " + safe(r.Name))
	if what == "" {
		what = "(no MCP method)"
	}
	fmt.Fprintf(w, "line %d  %s  %s -> %s  level %d  %s\n", r.Line, r.Time, safe(r.Client), safe(r.OrigDst), r.Level, what)
	if r.Route != "" || r.RuleSet != "" {
		fmt.Fprintf(w, "  route %s, rule set %s\n", orDash(r.Route), orDash(r.RuleSet))
	}
	for _, o := range r.Rules {
		mode := ""
		if o.Mode == policy.ModeShadow {
			mode = " (shadow)"
		}
		detail := ""
		switch {
		case len(o.Unknown) > 0:
			detail = "  reads " + strings.Join(o.Unknown, ", ") + ": not in the record"
		case o.Err != "":
			detail = "  " + o.Err
		case len(o.Absent) > 0:
			detail = "  absent: " + strings.Join(o.Absent, ", ")
		}
		mark := " "
		if o.Decided {
			mark = "*"
		}
		fmt.Fprintf(w, "  %s %-24s %-10s %-12s%s\n", mark, o.Rule, o.Action+mode, o.Outcome, detail)
	}
	fmt.Fprintf(w, "  recorded %s", decisionText(r.Recorded))
	if r.Replayed != nil {
		fmt.Fprintf(w, "; replayed %s", decisionText(*r.Replayed))
	}
	fmt.Fprintf(w, "  => %s", strings.ToUpper(r.Verdict))
	if r.Note != "" {
		fmt.Fprintf(w, " (%s)", r.Note)
	}
	fmt.Fprintln(w)
}

func decisionText(d replayDecision) string {
	s := orDash(safe(d.Decision))
	if d.Rule != "" {
		s += " by " + safe(d.Rule)
	}
	if len(d.Shadow) > 0 {
		s += " [" + safe(strings.Join(d.Shadow, " ")) + "]"
	}
	return s
}

// replaySummary counts the verdicts and lists the records that were not reproduced.
type replaySummary struct {
	Records       int   `json:"records"`
	Agree         int   `json:"agree"`
	Disagree      int   `json:"disagree"`
	Unknown       int   `json:"unknown"`
	Skipped       int   `json:"skipped"`
	Disagreements []int `json:"disagreements,omitempty"` // line numbers
	Unknowns      []int `json:"unknowns,omitempty"`
}

// maxListed bounds the line numbers a summary lists.
const maxListed = 1000

func (s *replaySummary) add(r *replayResult) {
	s.Records++
	switch r.Verdict {
	case verdictAgree:
		s.Agree++
	case verdictDisagree:
		s.Disagree++
		if len(s.Disagreements) < maxListed {
			s.Disagreements = append(s.Disagreements, r.Line)
		}
	case verdictUnknown:
		s.Unknown++
		if len(s.Unknowns) < maxListed {
			s.Unknowns = append(s.Unknowns, r.Line)
		}
	default:
		s.Skipped++
	}
}

func (s *replaySummary) writeText(w io.Writer) {
	fmt.Fprintf(w, "\n%d records: %d agree, %d disagree, %d unknown (rules read fields the flow log does not carry), %d skipped (not rule decisions)\n",
		s.Records, s.Agree, s.Disagree, s.Unknown, s.Skipped)
	if len(s.Disagreements) > 0 {
		fmt.Fprintf(w, "disagreements at lines %s\n", joinInts(s.Disagreements))
	}
	if len(s.Unknowns) > 0 {
		fmt.Fprintf(w, "unknown at lines %s\n", joinInts(s.Unknowns))
	}
}

func joinInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ", ")
}
