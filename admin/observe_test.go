package admin

import (
	"net/url"
	"strings"
	"testing"
	"time"

	"mcpintercept/telemetry"
)

func TestObserveFilter(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	rec := telemetry.FlowRecord{Time: telemetry.Time{Time: now.Add(-time.Minute)}, Client: "10.0.0.5:4000", OrigDst: "10.200.2.2:3000",
		MCPName: "echo", Decision: "deny", Process: &telemetry.Process{Comm: "node"}}
	for _, c := range []struct {
		q    string
		want bool
	}{
		{"", true},
		{"client=10.0.0.5", true},
		{"client=10.0.0.5:4000", true},
		{"client=10.0.0.0/24", true},
		{"client=10.0.1.0/24", false},
		{"client=node", true},
		{"client=python", false},
		{"tool=echo&decision=allow,deny", true},
		{"decision=allow", false},
		{"since=30s", false},
		{"since=2m", true},
		{"since=2026-03-01T11:58:00Z", true},
		{"kind=flow", false},
		{"kind=message,flow", true},
		{"route=r1", true},
		{"route=r2", false},
		{"until=30s", true},
		{"until=2m", false},
		{"decision=DENY", true},
		{"decision=would_deny", false},
	} {
		q, _ := url.ParseQuery(c.q)
		f, err := ParseObserveQuery(q, now)
		if err != nil {
			t.Fatalf("%s: %v", c.q, err)
		}
		l := telemetry.Live{Kind: telemetry.KindMessage, Record: rec}
		if got := f.matchRecord(&l, func() string { return "r1" }); got != c.want {
			t.Errorf("%s: %v, want %v", c.q, got, c.want)
		}
	}
	for _, bad := range []string{"since=-1m", "since=x", "until=x", "kind=call", "client=10.0.0.0/99", "decision=dney", "decision=allow,ratelimit"} {
		q, _ := url.ParseQuery(bad)
		if _, err := ParseObserveQuery(q, now); err == nil {
			t.Errorf("%s: accepted", bad)
		}
	}
}

// TestObserveDecisions: the rate-limit spellings all select the flow record's rate_limited, the
// shadow values select by the reason, and a wrong value names the valid ones.
func TestObserveDecisions(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	limited := telemetry.FlowRecord{Decision: "rate_limited"}
	shadow := telemetry.FlowRecord{Decision: "allow", Reason: "no rule matched; would_deny by no-delete (shadow): deletes"}
	for _, c := range []struct {
		q       string
		rec     *telemetry.FlowRecord
		want    bool
		decided []string
	}{
		{"decision=rate_limited", &limited, true, []string{"rate_limited"}},
		{"decision=rate_limit", &limited, true, []string{"rate_limited"}},
		{"decision=ratelimited", &limited, true, []string{"rate_limited"}},
		{"decision=deny", &limited, false, []string{"deny"}},
		{"decision=would_deny", &shadow, true, []string{"would_deny"}},
		{"decision=would_rate_limit", &shadow, false, []string{"would_rate_limit"}},
		{"decision=allow", &shadow, true, []string{"allow"}},
	} {
		q, _ := url.ParseQuery(c.q)
		f, err := ParseObserveQuery(q, now)
		if err != nil {
			t.Fatalf("%s: %v", c.q, err)
		}
		if len(f.Decisions) != len(c.decided) || f.Decisions[0] != c.decided[0] {
			t.Errorf("%s: decisions %v, want %v", c.q, f.Decisions, c.decided)
		}
		if got := f.Match(c.rec, telemetry.KindMessage, nil); got != c.want {
			t.Errorf("%s on %+v: %v, want %v", c.q, c.rec, got, c.want)
		}
	}
	_, err := ParseObserveQuery(url.Values{"decision": {"dney"}}, now)
	if err == nil || !strings.Contains(err.Error(), `"dney"`) || !strings.Contains(err.Error(), "allow, deny, rate_limited") {
		t.Errorf("decision=dney: %v", err)
	}
	// a filter naming a route passes nothing when no route can be computed (a flow log)
	f, _ := ParseObserveQuery(url.Values{"route": {"r1"}}, now)
	if f.Match(&limited, telemetry.KindMessage, nil) {
		t.Error("route filter without routing matched")
	}
}

// FuzzParseObserveQuery: any query either parses or is refused; a parsed filter runs on a record.
func FuzzParseObserveQuery(f *testing.F) {
	f.Add("client=10.0.0.0/24&tool=echo&decision=deny,allow&since=10m&kind=message")
	f.Add("since=2026-03-01T11:58:00Z&client=node&route=r")
	f.Fuzz(func(t *testing.T, raw string) {
		q, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		fl, err := ParseObserveQuery(q, time.Unix(1e9, 0))
		if err != nil {
			return
		}
		l := telemetry.Live{Kind: telemetry.KindMessage, Record: telemetry.FlowRecord{Client: "10.0.0.5:1", MCPName: "echo", Decision: "deny"}}
		fl.matchRecord(&l, func() string { return "r" })
	})
}
