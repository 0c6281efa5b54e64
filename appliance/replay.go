package appliance

import (
	"fmt"
	"net"
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"mcpintercept/config"
	"mcpintercept/engine"
	"mcpintercept/mcp"
	"mcpintercept/policy"
	"mcpintercept/telemetry"
)

// This file is `mcpintercept policy test`: recorded flows (flow log records) replayed through
// the configuration's routes and rule sets, as the appliance would judge them. The appliance owns
// it because it owns the configuration's compilation (RoutingFromConfig) and is the package that
// knows both the records (telemetry) and the rule input (policy); those two stay leaves.

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

// Replayer evaluates flow log records against a configuration's compiled routes and rule sets.
type Replayer struct {
	rt    *engine.Routing
	sets  CompiledRuleSets
	clock *replayClock
	fixed string // --rule-set
}

// NewReplayer compiles cfg's routes and rule sets with the replay clock: sets compiled empty
// WithClock are handed to RoutingFromConfig as the previous sets, whose clock the new ones keep
// (policy.CompileWithState). fixed, when not empty, is the rule set every record is judged by
// (--rule-set) instead of its route's.
func NewReplayer(cfg *config.Config, fixed string) (*Replayer, error) {
	clk := &replayClock{}
	prev := CompiledRuleSets{}
	for _, n := range cfg.RuleSetOrder {
		s, err := policy.Compile(nil, policy.WithClock(clk.now))
		if err != nil {
			return nil, err
		}
		prev[n] = s
	}
	rt, sets, err := RoutingFromConfig(cfg, prev)
	if err != nil {
		return nil, err
	}
	if fixed != "" && sets[fixed] == nil {
		return nil, fmt.Errorf("--rule-set %s: no such rule set (have %s)", fixed, strings.Join(cfg.RuleSetOrder, ", "))
	}
	return &Replayer{rt: rt, sets: sets, clock: clk, fixed: fixed}, nil
}

// Verdicts of a replayed record.
const (
	VerdictAgree    = "agree"
	VerdictDisagree = "disagree"
	// VerdictUnknown: the replayed decision is the recorded one only if a rule reached before the
	// decision, whose outcome depends on a field the record does not carry, went as the record
	// says (see Replay); with VerdictDisagree no value of those fields gives the recorded one.
	VerdictUnknown = "unknown"
	VerdictSkipped = "skipped" // not a decision of the rules (see ReplayResult.Note)
)

// ReplayResult is one record's line of the report.
type ReplayResult struct {
	Line     int                  `json:"line"`
	Time     string               `json:"time,omitempty"`
	Client   string               `json:"client,omitempty"`
	OrigDst  string               `json:"orig_dst,omitempty"`
	Level    int                  `json:"level"`
	Method   string               `json:"mcp_method,omitempty"`
	Name     string               `json:"mcp_name,omitempty"`
	Route    string               `json:"route,omitempty"`
	RuleSet  string               `json:"rule_set,omitempty"`
	Recorded ReplayDecision       `json:"recorded"`
	Replayed *ReplayDecision      `json:"replayed,omitempty"`
	Verdict  string               `json:"verdict"`
	Note     string               `json:"note,omitempty"`
	Rules    []policy.RuleOutcome `json:"rules,omitempty"`
}

// ReplayDecision is a decision as recorded or as replayed.
type ReplayDecision struct {
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

// Replay judges the record at line line: the route the engine would choose for it
// (engine.Routing.Select), that route's rule set (or the fixed one) over the input the record
// stands for (InputFromRecord), compared with the recorded decision.
func (rp *Replayer) Replay(line int, rec *telemetry.FlowRecord) ReplayResult {
	res := ReplayResult{Line: line, Client: rec.Client, OrigDst: rec.OrigDst, Level: rec.Level,
		Method: rec.MCPMethod, Name: rec.MCPName,
		Recorded: ReplayDecision{Decision: rec.Decision, Rule: rec.Rule, Reason: rec.Reason, Shadow: recordedShadow(rec.Reason)}}
	if !rec.Time.IsZero() {
		res.Time = rec.Time.UTC().Format("2006-01-02T15:04:05.000Z07:00")
		rp.clock.set(rec.Time.Time)
	}
	client, _ := netip.ParseAddrPort(rec.Client)
	dst, dstErr := netip.ParseAddrPort(rec.OrigDst)
	name := rp.fixed
	if name == "" {
		if dstErr != nil {
			res.Verdict, res.Note = VerdictSkipped, "orig_dst is not IP:port, so no route can be chosen (give --rule-set)"
			return res
		}
		route := rp.rt.Select(client, dst, func() string { return rec.SNI })
		if route == nil {
			res.Verdict, res.Note = VerdictSkipped, "no route matches and default_route closes: not a rule decision"
			return res
		}
		res.Route, name = route.Name, route.RuleSet
		if name == "" {
			res.Verdict, res.Note = VerdictSkipped, "the route applies no rule set"
			return res
		}
	}
	res.RuleSet = name
	set := rp.sets[name]
	if note := NotJudged(rec, set); note != "" {
		res.Verdict, res.Note = VerdictSkipped, note
		return res
	}
	in, known := InputFromRecord(rec, client, dst)
	// A rule whose outcome depends on a field the record lacks is taken as the record says it
	// went (matched when the record names it): the replay then reproduces the recorded
	// decision whenever some value of the missing fields would, and a decision that still
	// differs differs whatever they held.
	named := func(rule string) bool {
		if rule == res.Recorded.Rule {
			return true
		}
		return slices.Contains(res.Recorded.Shadow, "would_deny:"+rule) || slices.Contains(res.Recorded.Shadow, "would_rate_limit:"+rule)
	}
	ex := set.ExplainAssuming(in, known, named)
	d := ex.Decision
	got := ReplayDecision{Decision: string(d.Action), Rule: d.Rule, Reason: d.Reason}
	for _, h := range d.Shadow {
		w := "would_deny:"
		if h.Would == policy.ActionRateLimited {
			w = "would_rate_limit:"
		}
		got.Shadow = append(got.Shadow, w+h.Rule)
	}
	res.Replayed, res.Rules = &got, ex.Rules
	switch {
	case got.Decision != res.Recorded.Decision || got.Rule != res.Recorded.Rule || !slices.Equal(got.Shadow, res.Recorded.Shadow):
		res.Verdict = VerdictDisagree
		if ex.Unknown {
			res.Note = "it differs whatever the fields the record does not carry held"
		}
	case ex.Unknown:
		res.Verdict = VerdictUnknown
		res.Note = unknownNote(ex.Rules)
	default:
		res.Verdict = VerdictAgree
	}
	return res
}

// unknownNote says what a record that agrees only under assumptions depends on: the rules
// reached before the decision whose outcome reads a field the record does not carry.
func unknownNote(rules []policy.RuleOutcome) string {
	var parts []string
	for _, o := range rules {
		if o.Outcome != policy.OutcomeUnknown || o.Assumed == "" {
			continue
		}
		how := "did not match"
		switch o.Assumed {
		case policy.OutcomeMatch:
			how = "matched"
		case policy.OutcomeLimited:
			how = "ran out of tokens"
		}
		parts = append(parts, o.Rule+" "+how+" (it reads "+strings.Join(o.Unknown, ", ")+")")
	}
	return "the decision is the recorded one if " + strings.Join(parts, " and ") + "; the record cannot tell"
}

// NotJudged says why a record is not a decision of its rule set ("" when it is).
func NotJudged(rec *telemetry.FlowRecord, set *policy.Set) string {
	if rec.Rule != "" && rec.Direction == telemetry.ClientToServer && strings.HasPrefix(rec.Reason, "redacted by rule "+rec.Rule) {
		// Level 2 writes the redaction of a server's answer on its request's record: the rule
		// judged the response, which the record does not carry.
		return "the redaction of the server's answer by " + rec.Rule + " (recorded on its request): the record does not carry the response the rule judged"
	}
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

// InputFromRecord builds the policy input a record stands for, at the record's level (0: client
// and conn only, as connection rules see them), and what of it the record knows. client and dst
// are the record's client and orig_dst parsed (invalid when they are not IP:port).
func InputFromRecord(rec *telemetry.FlowRecord, client, dst netip.AddrPort) (*policy.Input, func(string) bool) {
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
	switch rec.Credential {
	case "injected":
		conn.Credential = "inject"
	case "exchanged":
		conn.Credential = "exchange"
	}
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
			m.Kind, kindKnown = recordKind(rec)
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

// recordKind is mcp.kind of a Level 2 record, when the record tells it. A response carries the
// method and name of the request it answers (and its id), so a record with an id is a request
// only when its direction sends that method as a request and not as an answer: a server sends
// sampling, elicitation and roots requests and answers the rest; a client sends the rest and
// answers those; ping goes both ways. A response or an error: which one, no record says.
func recordKind(rec *telemetry.FlowRecord) (string, bool) {
	switch {
	case rec.MCPMethod == "":
		return "", false
	case rec.JSONRPCID == "":
		return "notification", true
	case rec.MCPMethod == mcp.MethodPing:
		return "", false
	}
	serverRequest := mcp.Methods[rec.MCPMethod].Capability != ""
	if serverRequest == (rec.Direction == "server_to_client") {
		return "request", true
	}
	return "", false
}

// ReplaySummary counts the verdicts and lists the records that were not reproduced.
type ReplaySummary struct {
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

// Add counts r.
func (s *ReplaySummary) Add(r *ReplayResult) {
	s.Records++
	switch r.Verdict {
	case VerdictAgree:
		s.Agree++
	case VerdictDisagree:
		s.Disagree++
		if len(s.Disagreements) < maxListed {
			s.Disagreements = append(s.Disagreements, r.Line)
		}
	case VerdictUnknown:
		s.Unknown++
		if len(s.Unknowns) < maxListed {
			s.Unknowns = append(s.Unknowns, r.Line)
		}
	default:
		s.Skipped++
	}
}
