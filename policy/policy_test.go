package policy

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeClock is a settable clock so that bucket refill is tested without sleeping.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{t: time.Unix(1_700_000_000, 0)} }

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func mustCompile(t testing.TB, rules []RuleSpec, opts ...Option) *Set {
	t.Helper()
	s, err := Compile(rules, opts...)
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	return s
}

func toolCall(name string) *Input {
	return &Input{
		Client: map[string]any{"address": "10.200.1.2", "port": 40000},
		Conn:   map[string]any{"orig_dst": "10.200.2.2:8080", "orig_ip": "10.200.2.2", "orig_port": 8080, "tls": false},
		HTTP:   map[string]any{"method": "POST", "path": "/mcp", "headers": map[string]string{"content-type": "application/json"}},
		MCP:    map[string]any{"version": "2026-07-28", "method": "tools/call", "name": name},
	}
}

// Level 1 of the draft "MAY inspect transport-layer headers for policy decisions (rate limiting,
// logging, access control)"; these rules read exactly those headers (Mcp-Method, Mcp-Name).
func TestEvaluateFirstMatch(t *testing.T) {
	rules := []RuleSpec{
		{Name: "allow-admin", When: `client.address == "10.200.1.9"`, Action: RuleAllow},
		{Name: "deny-denied", When: `mcp.method == "tools/call" && mcp.name.startsWith("denied_")`, Action: RuleDeny},
		{Name: "deny-delete", When: `mcp.name == "delete_all"`, Action: RuleDeny, Reason: "destructive tool"},
		{Name: "allow-list", When: `mcp.method == "tools/list"`, Action: RuleAllow},
		{Name: "deny-internal", When: `cidr_contains("10.200.2.0/24", conn.orig_ip) && http.path.startsWith("/internal")`, Action: RuleDeny},
	}
	s := mustCompile(t, rules)
	if got := s.Len(); got != len(rules) {
		t.Fatalf("Len = %d, want %d", got, len(rules))
	}
	admin := toolCall("denied_x")
	admin.Client["address"] = "10.200.1.9"
	internal := toolCall("search")
	internal.HTTP["path"] = "/internal/x"
	list := toolCall("")
	list.MCP["method"] = "tools/list"
	delete(list.MCP, "name")

	tests := []struct {
		name       string
		in         *Input
		wantAction Action
		wantRule   string
		wantReason string
	}{
		{name: "no rule matches: default allow", in: toolCall("search"), wantAction: ActionAllow, wantReason: ReasonNoMatch},
		{name: "deny on tool name prefix", in: toolCall("denied_rm"), wantAction: ActionDeny, wantRule: "deny-denied", wantReason: "denied by rule deny-denied"},
		{name: "prefix must be a prefix", in: toolCall("not_denied_rm"), wantAction: ActionAllow, wantReason: ReasonNoMatch},
		{name: "explicit reason", in: toolCall("delete_all"), wantAction: ActionDeny, wantRule: "deny-delete", wantReason: "destructive tool"},
		{name: "earlier allow wins over later deny", in: admin, wantAction: ActionAllow, wantRule: "allow-admin", wantReason: "allowed by rule allow-admin"},
		{name: "allow rule", in: list, wantAction: ActionAllow, wantRule: "allow-list", wantReason: "allowed by rule allow-list"},
		{name: "cidr helper", in: internal, wantAction: ActionDeny, wantRule: "deny-internal", wantReason: "denied by rule deny-internal"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := s.Evaluate(tt.in)
			if d.Action != tt.wantAction || d.Rule != tt.wantRule || d.Reason != tt.wantReason {
				t.Errorf("got (%q, %q, %q), want (%q, %q, %q)", d.Action, d.Rule, d.Reason, tt.wantAction, tt.wantRule, tt.wantReason)
			}
			if len(d.Errors) > 0 {
				t.Errorf("unexpected errors: %v", d.Errors)
			}
		})
	}
}

func TestEmptyWhenAlwaysMatches(t *testing.T) {
	s := mustCompile(t, []RuleSpec{{Name: "deny-all", Action: RuleDeny}})
	for _, in := range []*Input{nil, {}, toolCall("x")} {
		if d := s.Evaluate(in); d.Action != ActionDeny || d.Rule != "deny-all" {
			t.Errorf("Evaluate(%v) = %+v, want deny by deny-all", in, d)
		}
	}
	var nilSet *Set
	if d := nilSet.Evaluate(nil); d.Action != ActionAllow || nilSet.Len() != 0 {
		t.Errorf("nil Set: %+v", d)
	}
}

func TestRateLimit(t *testing.T) {
	type step struct {
		advance   time.Duration
		client    string
		want      Action // decision action
		wantRetry time.Duration
	}
	tests := []struct {
		name  string
		rate  float64
		burst int
		steps []step
	}{
		{
			name: "429 after the burst is spent", rate: 1, burst: 3,
			steps: []step{
				{client: "a", want: ActionDeny}, {client: "a", want: ActionDeny}, {client: "a", want: ActionDeny},
				{client: "a", want: ActionRateLimited, wantRetry: time.Second},
			},
		},
		{
			name: "refill with the clock", rate: 2, burst: 1,
			steps: []step{
				{client: "a", want: ActionDeny},
				{client: "a", want: ActionRateLimited, wantRetry: 500 * time.Millisecond},
				{advance: 200 * time.Millisecond, client: "a", want: ActionRateLimited, wantRetry: 300 * time.Millisecond},
				{advance: 300 * time.Millisecond, client: "a", want: ActionDeny},
				{client: "a", want: ActionRateLimited, wantRetry: 500 * time.Millisecond},
				// A long idle period refills to the burst, never beyond it.
				{advance: time.Hour, client: "a", want: ActionDeny},
				{client: "a", want: ActionRateLimited, wantRetry: 500 * time.Millisecond},
			},
		},
		{
			name: "keys are independent", rate: 1, burst: 1,
			steps: []step{
				{client: "a", want: ActionDeny},
				{client: "a", want: ActionRateLimited, wantRetry: time.Second},
				{client: "b", want: ActionDeny},
				{client: "b", want: ActionRateLimited, wantRetry: time.Second},
				{client: "c", want: ActionDeny},
			},
		},
		{
			name: "fractional refill at 10/s", rate: 10, burst: 1,
			steps: []step{
				{client: "a", want: ActionDeny},
				{advance: 100 * time.Millisecond, client: "a", want: ActionDeny},
				{advance: 99 * time.Millisecond, client: "a", want: ActionRateLimited, wantRetry: time.Millisecond},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newFakeClock()
			// The deny after the limit shows that a limit with budget left does not end
			// evaluation: the request goes on to the next rule.
			s := mustCompile(t, []RuleSpec{
				{Name: "per-client", When: `mcp.method == "tools/call"`, Action: RuleRateLimit,
					RateLimit: &RateLimit{Key: "client.address", Rate: tt.rate, Burst: tt.burst}},
				{Name: "then-deny", Action: RuleDeny},
			}, WithClock(clk.now))
			for i, st := range tt.steps {
				clk.advance(st.advance)
				in := toolCall("x")
				in.Client["address"] = st.client
				d := s.Evaluate(in)
				if d.Action != st.want {
					t.Fatalf("step %d: action %q, want %q (%+v)", i, d.Action, st.want, d)
				}
				if st.want == ActionRateLimited {
					if d.Rule != "per-client" || d.Reason != "rate limit per-client exceeded" {
						t.Errorf("step %d: rule %q reason %q", i, d.Rule, d.Reason)
					}
					if diff := d.RetryAfter - st.wantRetry; diff < 0 || diff > time.Microsecond {
						t.Errorf("step %d: RetryAfter %v, want %v", i, d.RetryAfter, st.wantRetry)
					}
				}
			}
		})
	}
}

func TestRateLimitKeyKinds(t *testing.T) {
	tests := []struct {
		name string
		key  string
	}{
		{name: "no key: one bucket for the rule", key: ""},
		{name: "int key converted to string", key: "client.port"},
		{name: "composite key", key: `client.address + "/" + mcp.name`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := mustCompile(t, []RuleSpec{{Name: "rl", Action: RuleRateLimit,
				RateLimit: &RateLimit{Key: tt.key, Rate: 1, Burst: 1}}}, WithClock(newFakeClock().now))
			if d := s.Evaluate(toolCall("x")); d.Action != ActionAllow || len(d.Errors) > 0 {
				t.Fatalf("first: %+v", d)
			}
			if d := s.Evaluate(toolCall("x")); d.Action != ActionRateLimited {
				t.Fatalf("second: %+v", d)
			}
		})
	}
}

// Layer 5: "MUST log policy decisions for audit purposes" — a rule that could not apply because
// the request lacked a field must say so, or the log cannot explain why a deny did not fire.
func TestAbsentFields(t *testing.T) {
	legacy := &Input{ // a 2025-06-18 client: no Mcp-Method, no Mcp-Name
		Client: map[string]any{"address": "10.200.1.2", "port": 40000},
		HTTP:   map[string]any{"method": "POST", "path": "/mcp", "headers": map[string]string{}},
		MCP:    map[string]any{"version": "2025-06-18", "session": "s1"},
	}
	tests := []struct {
		name       string
		rules      []RuleSpec
		in         *Input
		wantAction Action
		wantRule   string
		wantAbsent []string
	}{
		{
			name:       "rule on mcp.method does not match without the header",
			rules:      []RuleSpec{{Name: "deny-calls", When: `mcp.method == "tools/call"`, Action: RuleDeny}},
			in:         legacy,
			wantAction: ActionAllow,
			wantAbsent: []string{"mcp.method"},
		},
		{
			name:       "negated rule does not match either",
			rules:      []RuleSpec{{Name: "deny-non-list", When: `!(mcp.method == "tools/list")`, Action: RuleDeny}},
			in:         legacy,
			wantAction: ActionAllow,
			wantAbsent: []string{"mcp.method"},
		},
		{
			name:       "has() guards are not absences",
			rules:      []RuleSpec{{Name: "deny", When: `has(mcp.method) && mcp.method == "tools/call"`, Action: RuleDeny}},
			in:         legacy,
			wantAction: ActionAllow,
		},
		{
			name: "later rule still decides and the absence is kept",
			rules: []RuleSpec{
				{Name: "deny-name", When: `mcp.name.startsWith("denied_")`, Action: RuleDeny},
				{Name: "deny-legacy", When: `mcp.version < "2026-07-28"`, Action: RuleDeny},
			},
			in:         legacy,
			wantAction: ActionDeny,
			wantRule:   "deny-legacy",
			wantAbsent: []string{"mcp.name"},
		},
		{
			name:       "missing header under http.headers",
			rules:      []RuleSpec{{Name: "tenant", When: `http.headers["x-tenant"] == "a"`, Action: RuleDeny}},
			in:         legacy,
			wantAction: ActionAllow,
			wantAbsent: []string{`http.headers["x-tenant"]`},
		},
		{
			name:       "whole variable empty",
			rules:      []RuleSpec{{Name: "r", When: `conn.sni.endsWith(".example")`, Action: RuleDeny}},
			in:         &Input{},
			wantAction: ActionAllow,
			wantAbsent: []string{"conn.sni"},
		},
		{
			name:       "computed header name that is missing is absent, not an error",
			rules:      []RuleSpec{{Name: "r", When: `http.headers["x-" + mcp.version] == "a"`, Action: RuleDeny}},
			in:         legacy,
			wantAction: ActionAllow,
			wantAbsent: []string{`http.headers["x-2025-06-18"]`},
		},
		{
			name:       "computed key into a variable",
			rules:      []RuleSpec{{Name: "r", When: `mcp[http.method] == "a"`, Action: RuleDeny}},
			in:         legacy,
			wantAction: ActionAllow,
			wantAbsent: []string{`mcp["POST"]`},
		},
		{
			name: "absent rate limit key: metered, not skipped",
			rules: []RuleSpec{{Name: "per-session", Action: RuleRateLimit,
				RateLimit: &RateLimit{Key: "mcp.session", Rate: 1, Burst: 1}}},
			in:         &Input{MCP: map[string]any{}},
			wantAction: ActionAllow,
			wantAbsent: []string{"mcp.session"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := mustCompile(t, tt.rules)
			d := s.Evaluate(tt.in)
			if d.Action != tt.wantAction || d.Rule != tt.wantRule {
				t.Errorf("got (%q, %q), want (%q, %q)", d.Action, d.Rule, tt.wantAction, tt.wantRule)
			}
			if !slices.Equal(d.Absent, tt.wantAbsent) {
				t.Errorf("Absent = %q, want %q", d.Absent, tt.wantAbsent)
			}
			if len(d.Errors) != 0 {
				t.Errorf("Errors = %q, want none", d.Errors)
			}
		})
	}
}

func TestCompileErrors(t *testing.T) {
	pos := Pos{File: "mcpintercept.yaml", Line: 12, Column: 11}
	rl := &RateLimit{Key: "client.address", Rate: 1, Burst: 1}
	tests := []struct {
		name  string
		rules []RuleSpec
		want  []string // CompileError.Error() of each error, in order
	}{
		{
			name:  "syntax error points into the expression",
			rules: []RuleSpec{{Name: "r1", When: `mcp.method ==`, Action: RuleDeny, Pos: pos}},
			// CEL reports the unexpected end at expression column 13: 11 + 13.
			want: []string{`mcpintercept.yaml:12:24: rule r1: when: Syntax error: mismatched input '<EOF>' expecting {'[', '{', '(', '.', '-', '!', 'true', 'false', 'null', NUM_FLOAT, NUM_INT, NUM_UINT, STRING, BYTES, IDENTIFIER}`},
		},
		{
			name:  "unknown variable",
			rules: []RuleSpec{{Name: "r2", When: `mcp.method == "x" && tool.name == "y"`, Action: RuleDeny, Pos: pos}},
			want:  []string{`mcpintercept.yaml:12:32: rule r2: when: undeclared reference to 'tool' (did you mean 'bool'?)`},
		},
		{
			name:  "second line of a block scalar",
			rules: []RuleSpec{{Name: "r3", When: "mcp.method == \"x\" &&\n  tool.name == \"y\"", Action: RuleDeny, Pos: pos}},
			want:  []string{`mcpintercept.yaml:13:13: rule r3: when: undeclared reference to 'tool' (did you mean 'bool'?)`},
		},
		{
			name:  "non-bool when",
			rules: []RuleSpec{{Name: "r4", When: `size(mcp)`, Action: RuleDeny, Pos: pos}},
			want:  []string{`mcpintercept.yaml:12:11: rule r4: when: expression has type int, want bool`},
		},
		{
			name:  "missing rate_limit block",
			rules: []RuleSpec{{Name: "r5", When: `true`, Action: RuleRateLimit, Pos: pos}},
			want:  []string{`mcpintercept.yaml:12:11: rule r5: action "rate_limit" needs a rate_limit block (key, rate, burst)`},
		},
		{
			name:  "unknown action",
			rules: []RuleSpec{{Name: "r6", When: `true`, Action: "block", Pos: pos}},
			want:  []string{`mcpintercept.yaml:12:11: rule r6: unknown action "block" (want allow, deny, rate_limit or redact)`},
		},
		{
			name: "bad key expression points at the key",
			rules: []RuleSpec{{Name: "r7", Action: RuleRateLimit, Pos: pos, KeyPos: Pos{File: "mcpintercept.yaml", Line: 14, Column: 14},
				RateLimit: &RateLimit{Key: "client.cgroup + nope", Rate: 1, Burst: 1}}},
			want: []string{`mcpintercept.yaml:14:30: rule r7: rate_limit key: undeclared reference to 'nope'`},
		},
		{
			name: "list-typed key",
			rules: []RuleSpec{{Name: "r8", Action: RuleRateLimit, Pos: pos, KeyPos: Pos{File: "k.yaml", Line: 3, Column: 5},
				RateLimit: &RateLimit{Key: "[mcp.result]", Rate: 1, Burst: 1}}},
			want: []string{`k.yaml:3:5: rule r8: rate_limit key: expression has type list(dyn), want a value convertible to string`},
		},
		{
			name: "bad rate and burst",
			rules: []RuleSpec{{Name: "r9", Action: RuleRateLimit, Pos: pos,
				RateLimit: &RateLimit{Key: "client.address", Rate: 0, Burst: 0}}},
			want: []string{
				`mcpintercept.yaml:12:11: rule r9: rate_limit rate must be a positive number of tokens per second, got 0`,
				`mcpintercept.yaml:12:11: rule r9: rate_limit burst must be at least 1, got 0`,
			},
		},
		{
			name:  "rate_limit block on a deny",
			rules: []RuleSpec{{Name: "r10", Action: RuleDeny, Pos: pos, RateLimit: rl}},
			want:  []string{`mcpintercept.yaml:12:11: rule r10: rate_limit block given but action is "deny", not "rate_limit"`},
		},
		{
			name:  "bad constant regex fails at load, not per request",
			rules: []RuleSpec{{Name: "r11", When: `mcp.name.matches("[")`, Action: RuleDeny, Pos: pos}},
			want:  []string{"mcpintercept.yaml:12:11: rule r11: when: error parsing regexp: missing closing ]: `[`"},
		},
		{
			name: "every error is reported, with names",
			rules: []RuleSpec{
				{Name: "ok", When: `true`, Action: RuleAllow, Pos: Pos{File: "f", Line: 1, Column: 1}},
				{Name: "", When: `true`, Action: RuleAllow, Pos: Pos{File: "f", Line: 2, Column: 1}},
				{Name: "ok", When: `1`, Action: RuleDeny, Pos: Pos{File: "f", Line: 3, Column: 9}},
			},
			want: []string{
				`f:2:1: rule #2: rule has no name`,
				`f:3:9: rule ok: duplicate rule name`,
				`f:3:9: rule ok: when: expression has type int, want bool`,
			},
		},
		{
			name:  "no position supplied: positions within the expression",
			rules: []RuleSpec{{Name: "r12", When: `"abc" == y`, Action: RuleDeny}},
			want:  []string{`1:10: rule r12: when: undeclared reference to 'y'`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := Compile(tt.rules)
			if err == nil {
				t.Fatalf("Compile succeeded (%d rules), want errors", s.Len())
			}
			var ces CompileErrors
			if !errors.As(err, &ces) {
				t.Fatalf("error %T is not CompileErrors: %v", err, err)
			}
			var got []string
			for _, e := range ces {
				got = append(got, e.Error())
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("errors:\n got  %q\n want %q", got, tt.want)
			}
			var one *CompileError
			if !errors.As(err, &one) || one != ces[0] {
				t.Errorf("errors.As(*CompileError) did not find the first error")
			}
		})
	}
}

// A flood of distinct keys (spoofed addresses, random session ids) must not grow memory past the
// bucket bound.
func TestBucketMapBounded(t *testing.T) {
	total := 1_000_000
	if testing.Short() || raceEnabled {
		total = 200_000
	}
	const bound = 50_000
	s := mustCompile(t, []RuleSpec{{Name: "per-session", Action: RuleRateLimit,
		RateLimit: &RateLimit{Key: "mcp.session", Rate: 1, Burst: 5, MaxKeys: bound}}})
	in := &Input{MCP: map[string]any{}}
	heapAt := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	var atBound uint64
	for i := range total {
		in.MCP["session"] = "session-" + strconv.Itoa(i)
		if d := s.Evaluate(in); d.Action != ActionAllow {
			t.Fatalf("key %d: %+v", i, d)
		}
		if i == 2*bound {
			atBound = heapAt()
		}
	}
	if n := s.rules[0].rl.store.len(); n > bound {
		t.Fatalf("store holds %d buckets, bound %d", n, bound)
	}
	final := heapAt()
	t.Logf("heap after %d keys: %d KiB; after %d keys: %d KiB", 2*bound, atBound/1024, total, final/1024)
	if final > atBound+atBound/4 {
		t.Errorf("heap grew from %d to %d bytes after the bound was reached", atBound, final)
	}
	// The most recent keys survived eviction and kept their state.
	in.MCP["session"] = "session-" + strconv.Itoa(total-1)
	for range 4 {
		s.Evaluate(in)
	}
	if d := s.Evaluate(in); d.Action != ActionRateLimited {
		t.Errorf("recent key lost its bucket: %+v", d)
	}
}

func TestLongKeysAreHashed(t *testing.T) {
	s := mustCompile(t, []RuleSpec{{Name: "rl", Action: RuleRateLimit,
		RateLimit: &RateLimit{Key: `http.headers["x-k"]`, Rate: 1, Burst: 1}}}, WithClock(newFakeClock().now))
	long := func(c byte) *Input {
		b := make([]byte, 4096)
		for i := range b {
			b[i] = c
		}
		return &Input{HTTP: map[string]any{"headers": map[string]string{"x-k": string(b)}}}
	}
	if d := s.Evaluate(long('a')); d.Action != ActionAllow {
		t.Fatalf("first a: %+v", d)
	}
	if d := s.Evaluate(long('b')); d.Action != ActionAllow {
		t.Fatalf("first b (distinct long key shares a bucket?): %+v", d)
	}
	if d := s.Evaluate(long('a')); d.Action != ActionRateLimited {
		t.Fatalf("second a: %+v", d)
	}
}

func TestReloadCarriesBuckets(t *testing.T) {
	clk := newFakeClock()
	spec := func(name, key, when string, burst int) RuleSpec {
		return RuleSpec{Name: name, When: when, Action: RuleRateLimit, RateLimit: &RateLimit{Key: key, Rate: 0.001, Burst: burst}}
	}
	old := mustCompile(t, []RuleSpec{spec("per-client", "client.address", "true", 2)}, WithClock(clk.now))
	for i := range 2 {
		if d := old.Evaluate(toolCall("x")); d.Action != ActionAllow {
			t.Fatalf("old set request %d: %+v", i, d)
		}
	}
	tests := []struct {
		name string
		rule RuleSpec
		want Action
	}{
		{name: "same name and key: budget carried", rule: spec("per-client", "client.address", `mcp.method != ""`, 2), want: ActionRateLimited},
		{name: "burst raised: carried tokens stay spent", rule: spec("per-client", " client.address ", "", 3), want: ActionRateLimited},
		{name: "key expression changed: fresh buckets", rule: spec("per-client", "client.address + mcp.name", "", 2), want: ActionAllow},
		{name: "renamed: fresh buckets", rule: spec("per-client-v2", "client.address", "", 2), want: ActionAllow},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := CompileWithState([]RuleSpec{tt.rule}, old)
			if err != nil {
				t.Fatal(err)
			}
			if d := s.Evaluate(toolCall("x")); d.Action != tt.want {
				t.Errorf("got %+v, want %s", d, tt.want)
			}
		})
	}
	// The clock of the previous Set is kept: a carried bucket refills on the same time line.
	s, err := CompileWithState([]RuleSpec{spec("per-client", "client.address", "", 2)}, old)
	if err != nil {
		t.Fatal(err)
	}
	clk.advance(1000 * time.Second) // one token at 0.001/s
	if d := s.Evaluate(toolCall("x")); d.Action != ActionAllow {
		t.Errorf("after refill: %+v", d)
	}
	// A failed reload leaves the previous Set usable.
	if _, err := CompileWithState([]RuleSpec{{Name: "bad", When: "(", Action: RuleDeny}}, old); err == nil {
		t.Fatal("bad reload compiled")
	}
	if d := old.Evaluate(toolCall("x")); d.Action != ActionRateLimited {
		t.Errorf("old set after failed reload: %+v", d)
	}
}

// Many goroutines share one bucket: exactly burst requests get through.
func TestConcurrentEvaluate(t *testing.T) {
	const burst = 100
	s := mustCompile(t, []RuleSpec{
		{Name: "deny-denied", When: `mcp.name.startsWith("denied_")`, Action: RuleDeny},
		{Name: "rl", Action: RuleRateLimit, RateLimit: &RateLimit{Key: "client.address", Rate: 1e-6, Burst: burst}},
	}, WithClock(newFakeClock().now))
	var allowed, limited atomic.Int64
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 50 {
				in := toolCall(fmt.Sprintf("tool_%d_%d", g, i))
				switch d := s.Evaluate(in); d.Action {
				case ActionAllow:
					allowed.Add(1)
				case ActionRateLimited:
					limited.Add(1)
				default:
					t.Errorf("unexpected %+v", d)
				}
			}
		})
	}
	wg.Wait()
	if allowed.Load() != burst || limited.Load() != 400-burst {
		t.Errorf("allowed %d, limited %d; want %d, %d", allowed.Load(), limited.Load(), burst, 400-burst)
	}
}

func TestCIDRContains(t *testing.T) {
	tests := []struct {
		name, cidr, ip string
		want           bool
	}{
		{name: "v4 inside", cidr: "10.200.1.0/24", ip: "10.200.1.2", want: true},
		{name: "v4 outside", cidr: "10.200.1.0/24", ip: "10.200.2.2"},
		{name: "v4-mapped v6 client", cidr: "10.0.0.0/8", ip: "::ffff:10.1.2.3", want: true},
		{name: "ip:port", cidr: "10.200.2.0/24", ip: "10.200.2.2:8080", want: true},
		{name: "v6 ip:port", cidr: "fd00:200:2::/64", ip: "[fd00:200:2::2]:443", want: true},
		{name: "v6 outside", cidr: "fd00:200:2::/64", ip: "fd00:200:1::2"},
		{name: "not an address", cidr: "10.0.0.0/8", ip: "@unix"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := mustCompile(t, []RuleSpec{{Name: "r", When: fmt.Sprintf("cidr_contains(%q, client.address)", tt.cidr), Action: RuleDeny}})
			d := s.Evaluate(&Input{Client: map[string]any{"address": tt.ip}})
			if got := d.Action == ActionDeny; got != tt.want || len(d.Errors) > 0 {
				t.Errorf("got deny=%v errors=%v, want deny=%v", got, d.Errors, tt.want)
			}
		})
	}
}

// BenchmarkEvaluate measures the per-request cost of the two rules a typical Level 1 deployment
// starts with.
func BenchmarkEvaluate(b *testing.B) {
	s := mustCompile(b, []RuleSpec{
		{Name: "deny-denied", When: `mcp.method == "tools/call" && mcp.name.startsWith("denied_")`, Action: RuleDeny},
		{Name: "per-client", When: `mcp.method == "tools/call"`, Action: RuleRateLimit,
			RateLimit: &RateLimit{Key: "client.address", Rate: 1e9, Burst: 1e9}},
	})
	in := toolCall("search")
	b.ReportAllocs()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	cpu0, cpuOK := threadCPU()
	for b.Loop() {
		if d := s.Evaluate(in); d.Action != ActionAllow {
			b.Fatalf("%+v", d)
		}
	}
	if cpu1, ok := threadCPU(); ok && cpuOK && b.N > 0 {
		b.ReportMetric(float64(cpu1-cpu0)/float64(b.N), "cpu-ns/op")
	}
}

func BenchmarkEvaluateParallel(b *testing.B) {
	s := mustCompile(b, []RuleSpec{
		{Name: "deny-denied", When: `mcp.method == "tools/call" && mcp.name.startsWith("denied_")`, Action: RuleDeny},
		{Name: "per-client", When: `mcp.method == "tools/call"`, Action: RuleRateLimit,
			RateLimit: &RateLimit{Key: "client.address", Rate: 1e9, Burst: 1e9}},
	})
	b.ReportAllocs()
	var n atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		in := toolCall("search")
		in.Client["address"] = "10.200.1." + strconv.Itoa(int(n.Add(1)))
		for pb.Next() {
			s.Evaluate(in)
		}
	})
}
