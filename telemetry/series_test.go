package telemetry

import (
	"net/netip"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// seriesOf is the number of series of the named metric in the registry, as /metrics shows them.
func seriesOf(t *testing.T, m *Metrics, name string) int {
	t.Helper()
	mfs, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return len(mf.GetMetric())
		}
	}
	return 0
}

func heapInUse() uint64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// Issue 8 case 7: one client made 100,000 series (+104 MiB heap) by varying client addresses
// and tool names, because each label was capped on its own.
func TestRequestSeriesFlood(t *testing.T) {
	const (
		clients    = 1000
		names      = 100
		total      = clients * names
		flooded    = "192.0.2.1:443" // not configured
		configured = "10.9.0.1:443"
	)
	m := NewMetricsWith(MetricsOptions{Keep: KeepPrefixes([]netip.Prefix{netip.MustParsePrefix("10.9.0.0/16")})})
	rs := m.Requests
	general := DefaultRequestSeries - DefaultRequestSeries/KeepShare

	before := heapInUse()
	for c := 0; c < clients; c++ {
		client := "198.51." + strconv.Itoa(c/256) + "." + strconv.Itoa(c%256)
		for n := 0; n < names; n++ {
			rs.Inc(flooded, "tools/call", "tool-"+strconv.Itoa(n)+"-"+client, client, "allow")
		}
	}
	after := heapInUse()

	// (a) the series stay under the bound.
	got := seriesOf(t, m, "mcpintercept_requests_total")
	if got > DefaultRequestSeries+ReservedFallbackSeries {
		t.Fatalf("%d series after %d distinct combinations; bound %d (+%d reserved)", got, total,
			DefaultRequestSeries, ReservedFallbackSeries)
	}
	if got != general+2 { // the general pool, the all-"other" allow series, the all-"other" series
		t.Errorf("%d series, want %d", got, general+2)
	}
	// (b) the heap does not grow with the combinations: the bound's series cost what they cost,
	// the other 92,000 combinations nothing.
	growth := int64(after) - int64(before)
	t.Logf("heap growth %d KiB for %d series (%d B/series)", growth>>10, got, growth/int64(got))
	if growth > 4<<20 {
		t.Errorf("heap grew by %d KiB for %d combinations", growth>>10, total)
	}
	// More combinations once the bound is reached cost no heap at all.
	before = heapInUse()
	for i := 0; i < total; i++ {
		rs.Inc(flooded, "tools/call", "again-"+strconv.Itoa(i), "203.0.113."+strconv.Itoa(i%256), "allow")
	}
	after = heapInUse()
	if growth := int64(after) - int64(before); growth > 1<<20 {
		t.Errorf("heap grew by %d KiB for %d more combinations past the bound", growth>>10, total)
	}
	if n := seriesOf(t, m, "mcpintercept_requests_total"); n != got {
		t.Errorf("series %d after more combinations past the bound, was %d", n, got)
	}

	// (c) a configured destination still gets a series of its own.
	rs.Inc(configured, "tools/call", "echo", "198.51.0.1", "allow")
	own := m.Requests.Value(configured, "other", "other", "other", "allow")
	if own != 1 {
		t.Errorf("configured destination's series = %v, want 1", own)
	}
	// but an unconfigured one that comes late does not.
	rs.Inc("192.0.2.2:443", "tools/call", "echo", "198.51.0.1", "allow")

	// (d) everything past the general pool is counted under the all-"other" series of its
	// decision, and counted as folded.
	other := m.Requests.Value("other", "other", "other", "other", "allow")
	if want := float64(2*total - general + 1); other != want {
		t.Errorf("all-other series = %v, want %v", other, want)
	}
	folded := testutil.ToFloat64(m.SeriesFolded.WithLabelValues("mcpintercept_requests_total"))
	if want := float64(2*total - general + 2); folded != want {
		t.Errorf("folded = %v, want %v", folded, want)
	}
	// No request is lost: the series add up to what was sent.
	var sum float64
	mfs, _ := m.Registry.Gather()
	for _, mf := range mfs {
		if mf.GetName() == "mcpintercept_requests_total" {
			for _, s := range mf.GetMetric() {
				sum += s.GetCounter().GetValue()
			}
		}
	}
	if sum != 2*total+2 {
		t.Errorf("series sum to %v, want %v", sum, 2*total+2)
	}
}

// A client that floods a configured destination cannot take the reserve from the others.
func TestRequestSeriesReserve(t *testing.T) {
	m := NewMetricsWith(MetricsOptions{RequestSeries: 100, Keep: func(dst string) bool { return strings.HasPrefix(dst, "10.") }})
	rs := m.Requests
	for i := 0; i < 1000; i++ {
		rs.Inc("10.0.0.1:443", "m-"+strconv.Itoa(i), "n-"+strconv.Itoa(i), "c-"+strconv.Itoa(i), "allow")
	}
	// Unconfigured destinations cannot take the reserve either.
	for i := 0; i < 1000; i++ {
		rs.Inc("192.0.2."+strconv.Itoa(i%250)+":443", "tools/call", "echo", "c", "deny")
	}
	for i := 0; i < 10; i++ {
		rs.Inc("10.0.1."+strconv.Itoa(i)+":443", "tools/call", "echo", "c", "deny")
	}
	for i := 0; i < 10; i++ {
		if v := m.Requests.Value("10.0.1."+strconv.Itoa(i)+":443", "other", "other", "other", "deny"); v != 1 {
			t.Errorf("configured destination %d: %v, want 1", i, v)
		}
	}
	if n := seriesOf(t, m, "mcpintercept_requests_total"); n > 100+ReservedFallbackSeries {
		t.Errorf("%d series, bound 100", n)
	}
	// The flooded configured destination's own summary exists too.
	if v := m.Requests.Value("10.0.0.1:443", "other", "other", "other", "allow"); v == 0 {
		t.Error("flooded configured destination has no series of its own")
	}
	// The reserve holds at most 20 series; once full, configured destinations fold to "other".
	for i := 0; i < 100; i++ {
		rs.Inc("10.1.0."+strconv.Itoa(i)+":443", "tools/call", "echo", "c", "allow")
	}
	if n := rs.Len(); n > 100+ReservedFallbackSeries {
		t.Errorf("Len %d, bound 100", n)
	}
	if n := seriesOf(t, m, "mcpintercept_requests_total"); n != rs.Len() {
		t.Errorf("registry has %d series, RequestSeries counts %d", n, rs.Len())
	}
}

// Folding goes name, client, method: the most specific series that exists or fits is used.
func TestRequestSeriesFoldOrder(t *testing.T) {
	m := NewMetricsWith(MetricsOptions{RequestSeries: 5}) // general pool of 4, reserve of 1
	rs := m.Requests
	rs.Inc("d:1", "tools/call", "a", "c1", "allow")
	rs.Inc("d:1", "tools/call", "other", "c1", "allow")
	rs.Inc("d:1", "tools/call", "other", "other", "allow")
	rs.Inc("d:1", "other", "other", "other", "allow") // pool full
	tests := []struct {
		name                          string
		method, tool, client          string
		wantMethod, wantTool, wantCli string
	}{
		{"known", "tools/call", "a", "c1", "tools/call", "a", "c1"},
		{"new name, known client", "tools/call", "b", "c1", "tools/call", "other", "c1"},
		{"new name and client", "tools/call", "b", "c2", "tools/call", "other", "other"},
		{"new method", "x", "b", "c2", "other", "other", "other"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := rs.Value("d:1", tt.wantMethod, tt.wantTool, tt.wantCli, "allow")
			rs.Inc("d:1", tt.method, tt.tool, tt.client, "allow")
			if got := rs.Value("d:1", tt.wantMethod, tt.wantTool, tt.wantCli, "allow"); got != before+1 {
				t.Fatalf("series (%s, %s, %s) went %v -> %v", tt.wantMethod, tt.wantTool, tt.wantCli, before, got)
			}
		})
	}
	// A new destination with nothing left folds to the all-"other" series of its decision; past
	// 8 decisions, to the all-"other" series.
	for i := 0; i < 20; i++ {
		rs.Inc("e:1", "tools/call", "a", "c1", "d"+strconv.Itoa(i))
	}
	if v := m.Requests.Value("other", "other", "other", "other", "d0"); v != 1 {
		t.Errorf("fallback for d0 = %v", v)
	}
	if v := m.Requests.Value("other", "other", "other", "other", "other"); v != 12 {
		t.Errorf("all-other = %v, want 12", v)
	}
	if n := seriesOf(t, m, "mcpintercept_requests_total"); n != 4+ReservedFallbackSeries {
		t.Errorf("%d series, want %d", n, 4+ReservedFallbackSeries)
	}
}

func TestRequestSeriesForFlow(t *testing.T) {
	m := NewMetricsWith(MetricsOptions{RequestSeries: 10})
	rs := m.Requests
	f := rs.ForFlow("d:1", "c")
	for i := 0; i < 3; i++ {
		f.Inc("tools/call", "a", "allow")
		rs.Inc("d:1", "tools/call", "a", "c", "allow") // the same series either way
		f.Inc("tools/call", "caf\xe9", "deny")
	}
	if v := m.Requests.Value("d:1", "tools/call", "a", "c", "allow"); v != 6 {
		t.Errorf("got %v, want 6", v)
	}
	if v := m.Requests.Value("d:1", "tools/call", "caf\uFFFD", "c", "deny"); v != 3 {
		t.Errorf("cleaned name: got %v, want 3", v)
	}
	// Folded results are cached per flow, and still counted as folded.
	for i := 0; i < 20; i++ {
		rs.Inc("d:1", "tools/call", "n"+strconv.Itoa(i), "c", "allow")
	}
	folded := testutil.ToFloat64(m.SeriesFolded.WithLabelValues("mcpintercept_requests_total"))
	g := rs.ForFlow("d:1", "c2")
	g.Inc("tools/call", "zzz", "allow")
	g.Inc("tools/call", "zzz", "allow")
	if v := testutil.ToFloat64(m.SeriesFolded.WithLabelValues("mcpintercept_requests_total")); v != folded+2 {
		t.Errorf("folded %v -> %v, want +2", folded, v)
	}
	if n := seriesOf(t, m, "mcpintercept_requests_total"); n > 10+ReservedFallbackSeries {
		t.Errorf("%d series, bound 10", n)
	}
}

func TestSeriesNoAllocs(t *testing.T) {
	m := NewMetrics()
	rs, ds := m.Requests, m.RequestDuration
	dst, client := "10.0.0.1:443", "10.1.0.1"
	rs.Inc(dst, "tools/call", "echo", client, "allow")
	ds.Observe("tools/call", 200, 0.1)
	f := rs.ForFlow(dst, client)
	f.Inc("tools/call", "echo", "allow")
	for name, fn := range map[string]func(){
		"Inc":     func() { rs.Inc(dst, "tools/call", "echo", client, "allow") },
		"flow":    func() { f.Inc("tools/call", "echo", "allow") },
		"Observe": func() { ds.Observe("tools/call", 200, 0.1) },
	} {
		if n := testing.AllocsPerRun(100, fn); n != 0 {
			t.Errorf("%s: %v allocations per existing series, want 0", name, n)
		}
	}
}

func TestDurationSeriesBound(t *testing.T) {
	m := NewMetricsWith(MetricsOptions{DurationSeries: 50})
	ds := m.RequestDuration
	for i := 0; i < 10000; i++ {
		ds.Observe("m-"+strconv.Itoa(i), 200+i%100, 0.01)
	}
	ds.Observe("x", -1, 0.01)
	ds.Observe("x", 1000, 0.01)
	if n := seriesOf(t, m, "mcpintercept_request_duration_seconds"); n > 50+ReservedDurationSeries {
		t.Errorf("%d series, bound 50 (+%d)", n, ReservedDurationSeries)
	}
	if v := testutil.ToFloat64(m.SeriesFolded.WithLabelValues("mcpintercept_request_duration_seconds")); v != 10002-50 {
		t.Errorf("folded = %v, want %v", v, 10002-50)
	}
}

func TestSeriesConcurrent(t *testing.T) {
	m := NewMetricsWith(MetricsOptions{RequestSeries: 200, DurationSeries: 20})
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f := m.Requests.ForFlow("d:1", "c"+strconv.Itoa(g))
			for i := 0; i < 2000; i++ {
				m.Requests.Inc("d:"+strconv.Itoa(i%50), "tools/call", "n"+strconv.Itoa(i%70), "c"+strconv.Itoa(g), "allow")
				f.Inc("tools/call", "n"+strconv.Itoa(i%7), "allow")
				m.RequestDuration.Observe("m"+strconv.Itoa(i%30), 200, 0.01)
			}
		}()
	}
	wg.Wait()
	if n := seriesOf(t, m, "mcpintercept_requests_total"); n > 200+ReservedFallbackSeries || n != m.Requests.Len() {
		t.Errorf("%d series (Len %d), bound 200", n, m.Requests.Len())
	}
	var sum float64
	mfs, _ := m.Registry.Gather()
	for _, mf := range mfs {
		if mf.GetName() == "mcpintercept_requests_total" {
			for _, s := range mf.GetMetric() {
				sum += s.GetCounter().GetValue()
			}
		}
	}
	if sum != 8*2000*2 {
		t.Errorf("sum %v, want %v", sum, 8*2000*2)
	}
}

func TestCleanLabel(t *testing.T) {
	long := strings.Repeat("a", 127) + "é" + "tail" // é straddles byte 128
	tests := []struct{ name, in, want string }{
		{"clean", "echo", "echo"},
		{"not UTF-8", "caf\xe9", "caf\uFFFD"},
		{"long, cut at a rune boundary", long, strings.Repeat("a", 127)},
		{"long ASCII", strings.Repeat("b", 500), strings.Repeat("b", 128)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := cleanLabel(tt.in)
			if got != tt.want || !utf8.ValidString(got) || len(got) > 128 {
				t.Fatalf("cleanLabel(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
	m := NewMetrics()
	m.Requests.Inc("\xff", "\xfe", long, "\xc3", "allow") // must not panic
	m.RequestDuration.Observe("\xff", 200, 1)
}

func TestKeepPrefixes(t *testing.T) {
	keep := KeepPrefixes([]netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8")})
	for in, want := range map[string]bool{
		"10.1.2.3:443": true, "10.1.2.3": true, "[fd00::1]:443": true, "[::ffff:10.0.0.1]:80": true,
		"192.0.2.1:443": false, "other": false, "": false,
	} {
		if got := keep(in); got != want {
			t.Errorf("keep(%q) = %v, want %v", in, got, want)
		}
	}
}

func TestRuleErrorsMetric(t *testing.T) {
	m := NewMetrics()
	m.RuleErrors.WithLabelValues("default", "deny-delete").Inc()
	if n := seriesOf(t, m, "mcpintercept_rule_errors_total"); n != 1 {
		t.Fatalf("%d series", n)
	}
}

func BenchmarkRequestSeriesInc(b *testing.B) {
	rs := NewMetrics().Requests
	rs.Inc("10.0.0.1:443", "tools/call", "echo", "10.1.0.1", "allow")
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			rs.Inc("10.0.0.1:443", "tools/call", "echo", "10.1.0.1", "allow")
		}
	})
}

func BenchmarkFlowRequestsInc(b *testing.B) {
	f := NewMetrics().Requests.ForFlow("10.0.0.1:443", "10.1.0.1")
	b.ReportAllocs()
	for b.Loop() {
		f.Inc("tools/call", "echo", "allow")
	}
}
