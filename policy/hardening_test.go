package policy

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// Issue 8, case 10: with one LRU of buckets shared by all rules, requests metered by one rule
// with fresh keys evicted the bucket of a client another rule was limiting, and that client
// started over with a full bucket. Each rule now has a store of its own.
func TestPerRuleBucketStores(t *testing.T) {
	// More keys than the old shared store held (100,000), so that the old code fails
	// whatever its hash seed; the brief asks for at least 100,000.
	flood := 200_000
	if raceEnabled {
		flood = 110_000
	}
	tests := []struct {
		name  string
		rules []RuleSpec
	}{
		{
			name: "limiting rule first",
			rules: []RuleSpec{
				{Name: "A", When: `mcp.session == "victim"`, Action: RuleRateLimit,
					RateLimit: &RateLimit{Key: "mcp.session", Rate: 1e-9, Burst: 1}},
				{Name: "B", Action: RuleRateLimit, RateLimit: &RateLimit{Key: "client.address", Rate: 1e-9, Burst: 1}},
			},
		},
		{
			name: "flooded rule first",
			rules: []RuleSpec{
				{Name: "B", When: `mcp.session != "victim"`, Action: RuleRateLimit,
					RateLimit: &RateLimit{Key: "client.address", Rate: 1e-9, Burst: 1}},
				{Name: "A", Action: RuleRateLimit, RateLimit: &RateLimit{Key: "mcp.session", Rate: 1e-9, Burst: 1}},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := mustCompile(t, tt.rules, WithClock(newFakeClock().now))
			victim := &Input{Client: map[string]any{"address": "10.0.0.1"}, MCP: map[string]any{"session": "victim"}}
			if d := s.Evaluate(victim); d.Action != ActionAllow {
				t.Fatalf("victim's first request: %+v", d)
			}
			in := &Input{Client: map[string]any{}, MCP: map[string]any{"session": "other"}}
			for i := range flood {
				in.Client["address"] = "c" + strconv.Itoa(i)
				s.Evaluate(in)
			}
			d := s.Evaluate(victim)
			if d.Action != ActionRateLimited || d.Rule != "A" {
				t.Fatalf("victim after %d keys on rule B: %+v, want rate_limited by A", flood, d)
			}
			for _, r := range s.rules {
				if n := r.rl.store.len(); n > DefaultMaxKeys {
					t.Errorf("rule %s keeps %d buckets, bound %d", r.name, n, DefaultMaxKeys)
				}
			}
		})
	}
}

func TestMaxKeys(t *testing.T) {
	tests := []struct {
		name    string
		maxKeys int
		want    int // store bound
	}{
		{name: "default", maxKeys: 0, want: DefaultMaxKeys},
		{name: "small is exact", maxKeys: 3, want: 3},
		{name: "large", maxKeys: 20_000, want: 20_000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := mustCompile(t, []RuleSpec{{Name: "rl", Action: RuleRateLimit,
				RateLimit: &RateLimit{Key: "client.address", Rate: 1e-9, Burst: 1, MaxKeys: tt.maxKeys}}},
				WithClock(newFakeClock().now))
			in := &Input{Client: map[string]any{}}
			for i := range 2*tt.want + 100 {
				in.Client["address"] = "c" + strconv.Itoa(i)
				s.Evaluate(in)
			}
			n := s.rules[0].rl.store.len()
			if n > tt.want || n < tt.want*9/10 {
				t.Errorf("store holds %d buckets, want about %d and never more", n, tt.want)
			}
		})
	}

	// With an exact (small) store, the least recently used key is the one forgotten.
	s := mustCompile(t, []RuleSpec{{Name: "rl", Action: RuleRateLimit,
		RateLimit: &RateLimit{Key: "client.address", Rate: 1e-9, Burst: 1, MaxKeys: 2}}}, WithClock(newFakeClock().now))
	req := func(addr string) Action {
		return s.Evaluate(&Input{Client: map[string]any{"address": addr}}).Action
	}
	steps := []struct {
		addr string
		want Action
	}{
		{"a", ActionAllow}, {"b", ActionAllow}, {"a", ActionRateLimited}, // a is now the most recent
		{"c", ActionAllow},       // evicts b
		{"a", ActionRateLimited}, // a kept
		{"b", ActionAllow},       // b started over
	}
	for i, st := range steps {
		if got := req(st.addr); got != st.want {
			t.Errorf("step %d (%s): %s, want %s", i, st.addr, got, st.want)
		}
	}

	for _, bad := range []int{-1, MaxMaxKeys + 1} {
		_, err := Compile([]RuleSpec{{Name: "rl", Action: RuleRateLimit,
			RateLimit: &RateLimit{Key: "client.address", Rate: 1, Burst: 1, MaxKeys: bad}}})
		if err == nil || !strings.Contains(err.Error(), "max_keys must be between 1 and") {
			t.Errorf("MaxKeys %d: err %v", bad, err)
		}
	}
}

func TestReloadPerRuleStores(t *testing.T) {
	clk := newFakeClock()
	rl := func(name, key string, maxKeys int) RuleSpec {
		return RuleSpec{Name: name, Action: RuleRateLimit,
			RateLimit: &RateLimit{Key: key, Rate: 1e-9, Burst: 1, MaxKeys: maxKeys}}
	}
	old := mustCompile(t, []RuleSpec{rl("A", "client.address", 100), rl("B", "mcp.session", 0)}, WithClock(clk.now))
	for i := range 50 {
		old.Evaluate(&Input{Client: map[string]any{"address": "c" + strconv.Itoa(i)}, MCP: map[string]any{"session": "s"}})
	}
	// A kept its name and key, its bound shrinks to 10; B changed its key.
	s, err := CompileWithState([]RuleSpec{rl("B", "client.address", 0), rl("A", "client.address", 10)}, old)
	if err != nil {
		t.Fatal(err)
	}
	byName := func(set *Set, name string) *rateRule {
		for _, r := range set.rules {
			if r.name == name {
				return r.rl
			}
		}
		t.Fatalf("no rule %s", name)
		return nil
	}
	if byName(s, "A").store != byName(old, "A").store {
		t.Error("A lost its store across the reload")
	}
	if n := byName(s, "A").store.len(); n != 10 {
		t.Errorf("A holds %d buckets after shrinking to 10", n)
	}
	if byName(s, "B").store == byName(old, "B").store {
		t.Error("B kept its store although its key changed")
	}
	// B meters c49 afresh (its first request on the new key) and passes it on; A, carried, finds
	// c49 spent.
	d := s.Evaluate(&Input{Client: map[string]any{"address": "c49"}, MCP: map[string]any{"session": "s"}})
	if d.Action != ActionRateLimited || d.Rule != "A" {
		t.Fatalf("c49 after the reload: %+v, want rate_limited by A", d)
	}
	if n := byName(s, "B").store.len(); n != 1 {
		t.Errorf("B's new store holds %d buckets, want 1", n)
	}
}

func TestReloadCarriedBucketStillLimits(t *testing.T) {
	clk := newFakeClock()
	spec := []RuleSpec{{Name: "A", Action: RuleRateLimit, RateLimit: &RateLimit{Key: "client.address", Rate: 1e-9, Burst: 1, MaxKeys: 100}}}
	old := mustCompile(t, spec, WithClock(clk.now))
	for i := range 50 {
		old.Evaluate(&Input{Client: map[string]any{"address": "c" + strconv.Itoa(i)}})
	}
	spec[0].RateLimit = &RateLimit{Key: "client.address", Rate: 1e-9, Burst: 1, MaxKeys: 10}
	s, err := CompileWithState(spec, old)
	if err != nil {
		t.Fatal(err)
	}
	// Most recent first, so that the clients that start over do not evict the ones kept.
	for i := 49; i >= 0; i-- {
		d := s.Evaluate(&Input{Client: map[string]any{"address": "c" + strconv.Itoa(i)}})
		want := ActionAllow // evicted by the shrink: starts over
		if i >= 40 {
			want = ActionRateLimited
		}
		if d.Action != want {
			t.Errorf("c%d: %s, want %s", i, d.Action, want)
		}
	}
}

// Issue 8, case 10: a rate limit whose key is absent used to be skipped, so leaving out the
// header a limit was keyed by escaped the limit. All such requests now share one bucket.
func TestAbsentKeySharesOneBucket(t *testing.T) {
	tests := []struct {
		name string
		key  string
		in   func(i int) *Input
	}{
		{
			name: "plain path",
			key:  "mcp.session",
			in: func(i int) *Input {
				return &Input{Client: map[string]any{"address": "10.0.0." + strconv.Itoa(i)}, MCP: map[string]any{}}
			},
		},
		{
			name: "header",
			key:  `http.headers["x-api-key"]`,
			in: func(i int) *Input {
				return &Input{HTTP: map[string]any{"headers": map[string]string{"x-other": strconv.Itoa(i)}}}
			},
		},
		{
			name: "composite key with one absent part",
			key:  `client.address + "/" + mcp.session`,
			in: func(i int) *Input {
				return &Input{Client: map[string]any{"address": "10.0.0." + strconv.Itoa(i)}}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := mustCompile(t, []RuleSpec{{Name: "rl", Action: RuleRateLimit,
				RateLimit: &RateLimit{Key: tt.key, Rate: 1e-9, Burst: 2}}}, WithClock(newFakeClock().now))
			for i := range 4 {
				d := s.Evaluate(tt.in(i))
				want := ActionAllow
				if i >= 2 {
					want = ActionRateLimited
				}
				if d.Action != want || len(d.Absent) != 1 || len(d.Errors) != 0 {
					t.Fatalf("request %d: %+v, want %s with one absent field", i, d, want)
				}
			}
			// The absent bucket is not the bucket of the string "absent".
			in := &Input{Client: map[string]any{"address": "absent"}, MCP: map[string]any{"session": "absent"},
				HTTP: map[string]any{"headers": map[string]string{"x-api-key": "absent"}}}
			if tt.key == `client.address + "/" + mcp.session` {
				in.Client["address"], in.MCP["session"] = "", "absent"
			}
			if d := s.Evaluate(in); d.Action != ActionAllow {
				t.Errorf("key value \"absent\" shares the absent bucket: %+v", d)
			}
		})
	}
}

func TestPrefix(t *testing.T) {
	tests := []struct {
		expr    string
		addr    string
		want    string
		wantErr string
	}{
		{expr: "prefix(client.address, 64)", addr: "2001:db8:1:2:3:4:5:6", want: "2001:db8:1:2::/64"},
		{expr: "prefix(client.address, 24)", addr: "10.1.2.3", want: "10.1.2.0/24"},
		{expr: "prefix(client.address, 32)", addr: "10.1.2.3", want: "10.1.2.3/32"},
		{expr: "prefix(client.address, 0)", addr: "10.1.2.3", want: "0.0.0.0/0"},
		{expr: "prefix(client.address, 128)", addr: "2001:DB8::1", want: "2001:db8::1/128"},
		{expr: "prefix(client.address, 24)", addr: "::ffff:10.1.2.3", want: "10.1.2.0/24"},
		{expr: "prefix(client.address, 48)", addr: "fe80::1%eth0", want: "fe80::/48"},
		{expr: "prefix(client.address, 24)", addr: "10.1.2.3:8080", want: "10.1.2.0/24"},
		{expr: "prefix(client.address, 64)", addr: "[2001:db8::5]:443", want: "2001:db8::/64"},
		{expr: "prefix(client.address, 32, 64)", addr: "10.1.2.3", want: "10.1.2.3/32"},
		{expr: "prefix(client.address, 32, 64)", addr: "::ffff:10.1.2.3", want: "10.1.2.3/32"},
		{expr: "prefix(client.address, 32, 64)", addr: "2001:db8:1:2:3:4:5:6", want: "2001:db8:1:2::/64"},
		{expr: "prefix(client.address, 64)", addr: "::ffff:10.1.2.3", wantErr: "prefix: length 64 out of range for 10.1.2.3 (0 to 32)"},
		{expr: "prefix(client.address, -1)", addr: "10.1.2.3", wantErr: "prefix: length -1 out of range"},
		{expr: "prefix(client.address, 129)", addr: "2001:db8::1", wantErr: "prefix: length 129 out of range"},
		{expr: "prefix(client.address, 24)", addr: "@unix", wantErr: `prefix: invalid IP address "@unix"`},
		{expr: "prefix(client.address, 24)", addr: "", wantErr: `prefix: invalid IP address ""`},
		{expr: "prefix(client.address, 24)", addr: "10.1.2.0/24", wantErr: `prefix: invalid IP address "10.1.2.0/24"`},
	}
	for _, tt := range tests {
		t.Run(tt.expr+"/"+tt.addr, func(t *testing.T) {
			// As a `when`: compare with the expected text.
			s := mustCompile(t, []RuleSpec{{Name: "r", When: fmt.Sprintf("%s == %q", tt.expr, tt.want), Action: RuleDeny}})
			d := s.Evaluate(&Input{Client: map[string]any{"address": tt.addr}})
			if tt.wantErr == "" {
				if d.Action != ActionDeny || d.Rule != "r" || len(d.Errors) != 0 {
					t.Errorf("got %+v, want a match", d)
				}
				return
			}
			if len(d.Errors) != 1 || !strings.HasPrefix(d.Errors[0].Err, tt.wantErr) {
				t.Errorf("Errors = %+v, want one starting %q", d.Errors, tt.wantErr)
			}
		})
	}

	// As a rate limit key: two addresses of one /64 share a bucket.
	s := mustCompile(t, []RuleSpec{{Name: "per-64", Action: RuleRateLimit,
		RateLimit: &RateLimit{Key: "prefix(client.address, 32, 64)", Rate: 1e-9, Burst: 1}}}, WithClock(newFakeClock().now))
	for i, st := range []struct {
		addr string
		want Action
	}{
		{"2001:db8:1:2::1", ActionAllow},
		{"2001:db8:1:2:ffff::9", ActionRateLimited},
		{"2001:db8:1:3::1", ActionAllow},
		{"10.0.0.1", ActionAllow},
		{"::ffff:10.0.0.1", ActionRateLimited},
	} {
		if d := s.Evaluate(&Input{Client: map[string]any{"address": st.addr}}); d.Action != st.want {
			t.Errorf("step %d %s: %+v, want %s", i, st.addr, d, st.want)
		}
	}

	// A constant that is always out of range is still a run-time error (the checker cannot
	// know the address family); it compiles.
	mustCompile(t, []RuleSpec{{Name: "r", When: `prefix(client.address, 200) == ""`, Action: RuleDeny}})
	if _, err := Compile([]RuleSpec{{Name: "r", When: `prefix(client.address, "64") == ""`, Action: RuleDeny}}); err == nil {
		t.Error("prefix with a string length compiled")
	}
}

// Issue 8, case 11: a run-time error made the rule silently not match and the log said "no rule
// matched". A deny or rate_limit rule that errors now decides deny unless the route fails open.
func TestRuleErrors(t *testing.T) {
	numHeader := &Input{
		Client: map[string]any{"address": "10.0.0.1"},
		HTTP:   map[string]any{"method": "POST", "headers": map[string]string{"x": "lots"}},
		MCP:    map[string]any{"method": "tools/call", "name": "search", "session": "s1"},
	}
	const intErr = `rule too-many failed to evaluate: type conversion error from 'string' to 'int'`
	tests := []struct {
		name       string
		rules      []RuleSpec
		in         *Input
		failOpen   bool
		wantAction Action
		wantRule   string
		wantReason string
		wantErrs   []string // rule names
	}{
		{
			name:       "deny rule errors: fail closed",
			rules:      []RuleSpec{{Name: "too-many", When: `int(http.headers["x"]) > 3`, Action: RuleDeny}},
			in:         numHeader,
			wantAction: ActionDeny, wantRule: "too-many",
			wantReason: intErr,
			wantErrs:   []string{"too-many"},
		},
		{
			name:       "deny rule errors: fail open",
			rules:      []RuleSpec{{Name: "too-many", When: `int(http.headers["x"]) > 3`, Action: RuleDeny}},
			in:         numHeader,
			failOpen:   true,
			wantAction: ActionAllow,
			wantReason: "no rule matched; " + intErr,
			wantErrs:   []string{"too-many"},
		},
		{
			name: "fail open: later rules still decide",
			rules: []RuleSpec{
				{Name: "too-many", When: `int(http.headers["x"]) > 3`, Action: RuleDeny},
				{Name: "deny-calls", When: `mcp.method == "tools/call"`, Action: RuleDeny},
			},
			in:         numHeader,
			failOpen:   true,
			wantAction: ActionDeny, wantRule: "deny-calls", wantReason: "denied by rule deny-calls",
			wantErrs: []string{"too-many"},
		},
		{
			name: "allow rule errors: skipped, never grants, fail closed",
			rules: []RuleSpec{
				{Name: "trusted", When: `int(http.headers["x"]) > 3`, Action: RuleAllow},
				{Name: "deny-calls", When: `mcp.method == "tools/call"`, Action: RuleDeny},
			},
			in:         numHeader,
			wantAction: ActionDeny, wantRule: "deny-calls", wantReason: "denied by rule deny-calls",
			wantErrs: []string{"trusted"},
		},
		{
			name:       "allow rule errors alone: default allow names it",
			rules:      []RuleSpec{{Name: "trusted", When: `int(http.headers["x"]) > 3`, Action: RuleAllow}},
			in:         numHeader,
			wantAction: ActionAllow,
			wantReason: "no rule matched; rule trusted failed to evaluate: type conversion error from 'string' to 'int'",
			wantErrs:   []string{"trusted"},
		},
		{
			name: "several errors: all listed, first named",
			rules: []RuleSpec{
				{Name: "a", When: `int(http.headers["x"]) > 3`, Action: RuleAllow},
				{Name: "b", When: `dyn(mcp.name)`, Action: RuleDeny},
				{Name: "c", When: `{"k": 1}[mcp.name] == 1`, Action: RuleDeny},
			},
			in:         numHeader,
			failOpen:   true,
			wantAction: ActionAllow,
			wantReason: "no rule matched; rule a failed to evaluate: type conversion error from 'string' to 'int'; 2 more rules failed to evaluate",
			wantErrs:   []string{"a", "b", "c"},
		},
		{
			name:       "non-bool when: fail closed",
			rules:      []RuleSpec{{Name: "r", When: `dyn(mcp.name)`, Action: RuleDeny}},
			in:         numHeader,
			wantAction: ActionDeny, wantRule: "r",
			wantReason: "rule r failed to evaluate: when evaluated to string, not bool",
			wantErrs:   []string{"r"},
		},
		{
			name:       "bad CIDR from a dynamic value",
			rules:      []RuleSpec{{Name: "r", When: `cidr_contains(mcp.session, client.address)`, Action: RuleDeny}},
			in:         numHeader,
			wantAction: ActionDeny, wantRule: "r",
			wantReason: `rule r failed to evaluate: cidr_contains: invalid CIDR "s1"`,
			wantErrs:   []string{"r"},
		},
		{
			name:       "missing key of a map literal is an error, not an absent field",
			rules:      []RuleSpec{{Name: "r", When: `{"a": 1}[mcp.method] == 1`, Action: RuleDeny}},
			in:         numHeader,
			wantAction: ActionDeny, wantRule: "r",
			wantReason: "rule r failed to evaluate: no such key: tools/call",
			wantErrs:   []string{"r"},
		},
		{
			name: "rate_limit when errors: fail closed denies",
			rules: []RuleSpec{{Name: "rl", When: `int(http.headers["x"]) > 0`, Action: RuleRateLimit,
				RateLimit: &RateLimit{Key: "client.address", Rate: 1, Burst: 10}}},
			in:         numHeader,
			wantAction: ActionDeny, wantRule: "rl",
			wantReason: "rule rl failed to evaluate: type conversion error from 'string' to 'int'",
			wantErrs:   []string{"rl"},
		},
		{
			name: "rate_limit key errors: fail closed denies",
			rules: []RuleSpec{{Name: "rl", Action: RuleRateLimit,
				RateLimit: &RateLimit{Key: "prefix(client.address, 64)", Rate: 1, Burst: 10}}},
			in:         numHeader,
			wantAction: ActionDeny, wantRule: "rl",
			wantReason: "rule rl failed to evaluate: rate_limit key: prefix: length 64 out of range for 10.0.0.1 (0 to 32)",
			wantErrs:   []string{"rl"},
		},
		{
			name: "rate_limit key errors: fail open skips",
			rules: []RuleSpec{{Name: "rl", Action: RuleRateLimit,
				RateLimit: &RateLimit{Key: `int(http.headers["x"])`, Rate: 1, Burst: 10}}},
			in:         numHeader,
			failOpen:   true,
			wantAction: ActionAllow,
			wantReason: "no rule matched; rule rl failed to evaluate: rate_limit key: type conversion error from 'string' to 'int'",
			wantErrs:   []string{"rl"},
		},
		{
			name: "absent fields are still not errors",
			rules: []RuleSpec{
				{Name: "r", When: `int(http.headers["y"]) > 3`, Action: RuleDeny},
				{Name: "rl", Action: RuleRateLimit, RateLimit: &RateLimit{Key: `int(http.headers["y"])`, Rate: 1, Burst: 10}},
			},
			in:         numHeader,
			wantAction: ActionAllow,
			wantReason: ReasonNoMatch,
		},
		{
			name: "a numeric header converts (the checker's int(int) guess is undone)",
			rules: []RuleSpec{{Name: "big", When: `int(http.headers["n"]) > 3 && int(mcp.arguments["n"]) > 3 && string(mcp.arguments["i"]) == "7"`,
				Action: RuleDeny}},
			in: &Input{HTTP: map[string]any{"headers": map[string]string{"n": "5"}},
				MCP: map[string]any{"arguments": map[string]any{"n": "5", "i": 7}}},
			wantAction: ActionDeny, wantRule: "big", wantReason: "denied by rule big",
		},
		{
			name:       "an error on the other side of a true || is no error",
			rules:      []RuleSpec{{Name: "r", When: `int(http.headers["x"]) > 3 || mcp.name == "search"`, Action: RuleDeny}},
			in:         numHeader,
			wantAction: ActionDeny, wantRule: "r", wantReason: "denied by rule r",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := mustCompile(t, tt.rules, WithClock(newFakeClock().now))
			in := *tt.in
			in.FailOpen = tt.failOpen
			d := s.Evaluate(&in)
			if d.Action != tt.wantAction || d.Rule != tt.wantRule || d.Reason != tt.wantReason {
				t.Errorf("got (%q, %q, %q)\nwant (%q, %q, %q)", d.Action, d.Rule, d.Reason, tt.wantAction, tt.wantRule, tt.wantReason)
			}
			var names []string
			for _, e := range d.Errors {
				names = append(names, e.Rule)
				if e.Err == "" {
					t.Errorf("empty message for %s", e.Rule)
				}
			}
			if !slices.Equal(names, tt.wantErrs) {
				t.Errorf("Errors = %+v, want rules %q", d.Errors, tt.wantErrs)
			}
		})
	}
}

func TestShortErr(t *testing.T) {
	long := strings.Repeat("é", 200)
	tests := []struct{ in, want string }{
		{"plain", "plain"},
		{"first\nsecond", "first"},
		{"tab\there\x1b[31m", "tab?here?[31m"},
		{"bad \xff utf8", "bad \uFFFD utf8"},
		{long, strings.Repeat("é", (maxErrLen-len("…"))/2) + "…"},
	}
	for _, tt := range tests {
		got := shortErr(tt.in)
		if got != tt.want {
			t.Errorf("shortErr(%q) = %q, want %q", tt.in, got, tt.want)
		}
		if len(got) > maxErrLen {
			t.Errorf("shortErr(%q) is %d bytes", tt.in, len(got))
		}
	}
	// Request data quoted in an error stays bounded in the reason.
	s := mustCompile(t, []RuleSpec{{Name: "r", When: `int(http.headers["x"]) > 3`, Action: RuleDeny}})
	d := s.Evaluate(&Input{HTTP: map[string]any{"headers": map[string]string{"x": strings.Repeat("9", 10_000)}}})
	if d.Action != ActionDeny || len(d.Reason) > maxErrLen+100 {
		t.Errorf("got %s with a %d-byte reason", d.Action, len(d.Reason))
	}
}

// A rate limit key that errors must not create a bucket: the error decides or is skipped.
func TestRuleErrorUsesNoBucket(t *testing.T) {
	s := mustCompile(t, []RuleSpec{{Name: "rl", Action: RuleRateLimit,
		RateLimit: &RateLimit{Key: `int(http.headers["x"])`, Rate: 1e-9, Burst: 1}}}, WithClock(newFakeClock().now))
	for range 3 {
		d := s.Evaluate(&Input{FailOpen: true, HTTP: map[string]any{"headers": map[string]string{"x": "nan"}}})
		if d.Action != ActionAllow {
			t.Fatalf("%+v", d)
		}
	}
	if n := s.rules[0].rl.store.len(); n != 0 {
		t.Errorf("%d buckets after key errors", n)
	}
}

// TestServerMessageRules: a message from the server is judged only by rules written for it (they
// read mcp.direction, mcp.result or mcp.error); a request rule neither denies the results of the
// calls it let through nor spends rate-limit tokens on them.
func TestServerMessageRules(t *testing.T) {
	set, err := Compile([]RuleSpec{
		{Name: "limit-calls", When: `mcp.method == "tools/call"`, Action: RuleRateLimit, RateLimit: &RateLimit{Rate: 0.0001, Burst: 1}},
		{Name: "no-secret-results", When: `mcp.direction == "server_to_client" && string(mcp.result).contains("SECRET")`, Action: RuleDeny},
	})
	if err != nil {
		t.Fatal(err)
	}
	req := &Input{MCP: map[string]any{"method": "tools/call", "direction": "client_to_server"}}
	if d := set.Evaluate(req); d.Action != ActionAllow {
		t.Fatalf("first call: %+v", d)
	}
	resp := &Input{ServerMessage: true, MCP: map[string]any{"method": "tools/call", "direction": "server_to_client", "result": "ok"}}
	for i := 0; i < 3; i++ {
		if d := set.Evaluate(resp); d.Action != ActionAllow {
			t.Fatalf("response %d judged by a request rule: %+v", i, d)
		}
	}
	secret := &Input{ServerMessage: true, MCP: map[string]any{"method": "tools/call", "direction": "server_to_client", "result": "a SECRET"}}
	if d := set.Evaluate(secret); d.Action != ActionDeny || d.Rule != "no-secret-results" {
		t.Fatalf("response rule did not judge the response: %+v", d)
	}
	// The request bucket was not spent by the responses: the second call is limited by it.
	if d := set.Evaluate(req); d.Action != ActionRateLimited {
		t.Fatalf("second call: %+v, want rate_limited", d)
	}
}

// TestReads: a caller may skip building mcp fields no rule reads, and must not skip one a rule
// reads in any form.
func TestReads(t *testing.T) {
	for _, c := range []struct {
		when  string
		field string
		want  bool
	}{
		{`mcp.method == "x"`, "arguments", false},
		{`mcp.arguments.path == "/"`, "arguments", true},
		{`has(mcp.arguments.path)`, "arguments", true},
		{`"path" in mcp.arguments`, "arguments", true},
		{`mcp["arguments"]["path"] == "/"`, "arguments", true},
		{`"arguments" in mcp`, "arguments", true},
		{`mcp[http.headers["x"]] == "y"`, "arguments", true},
		{`string(mcp.result).contains("k")`, "result", true},
		{`mcp.direction == "server_to_client"`, "result", false},
	} {
		set, err := Compile([]RuleSpec{{Name: "r", When: c.when, Action: RuleDeny}})
		if err != nil {
			t.Fatalf("%s: %v", c.when, err)
		}
		if got := set.Reads(c.field); got != c.want {
			t.Errorf("%s: Reads(%q) = %v, want %v", c.when, c.field, got, c.want)
		}
	}
}
