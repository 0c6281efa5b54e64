package telemetry

import (
	"hash/maphash"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
)

// DefaultRequestSeries is the joint bound on the series of mcpintercept_requests_total: at most
// 10,000 distinct (orig_dst, mcp_method, mcp_name, client, decision) combinations, whatever the
// clients send. It is a bound on the product of the labels, not on each label: past it, new
// combinations are folded into existing ones (mcp_name, then client, then mcp_method become
// "other"), and what still does not fit is counted under the series whose every label except
// decision is "other". A fifth of the bound (KeepShare) is held back for configured destinations,
// so that a flood of unconfigured values cannot take it; see RequestSeries. At most
// ReservedFallbackSeries series come on top of the bound.
const DefaultRequestSeries = 10000

// DefaultDurationSeries is the joint bound on the series of mcpintercept_request_duration_seconds
// (mcp_method, status); past it, mcp_method and then status become "other".
const DefaultDurationSeries = 1000

// KeepShare is the share of a RequestSeries bound (1/KeepShare, that is 20%) that only configured
// destinations may use, one series per destination and decision with the other labels "other".
const KeepShare = 5

// ReservedFallbackSeries is how many series a RequestSeries may hold beyond its bound: one
// all-"other" series per decision for the first 8 decision values, plus the all-"other" series.
const ReservedFallbackSeries = maxFallbackDecisions + 1

const (
	otherValue           = "other"
	maxLabelBytes        = 128
	maxFallbackDecisions = 8
)

// cleanLabel returns v as a label value Prometheus accepts: at most 128 bytes, cut at a rune
// boundary, and valid UTF-8 (a byte that is not becomes U+FFFD). It allocates only when v has to
// change.
func cleanLabel(v string) string {
	if len(v) > maxLabelBytes {
		n := maxLabelBytes
		for n > maxLabelBytes-utf8.UTFMax && !utf8.RuneStart(v[n]) {
			n--
		}
		v = v[:n]
	}
	return strings.ToValidUTF8(v, "\uFFFD")
}

// seriesKey is a label tuple; metrics with fewer labels leave the rest empty.
type seriesKey [5]string

type seriesEntry[T any] struct {
	key  seriesKey
	hash uint64
	n    atomic.Uint64 // the count, for metrics that keep it here
	m    T
}

// seriesTable maps label tuples to Prometheus children. Its capacity is fixed when it is made (the
// series bound), so it is an open-addressed table that never grows: readers probe it without a
// lock, writers add entries under mu. Entries are never removed or changed once published.
type seriesTable[T any] struct {
	seed  maphash.Seed
	slots []atomic.Pointer[seriesEntry[T]]
	mask  uint64
	mu    sync.Mutex
}

func newSeriesTable[T any](capacity int) *seriesTable[T] {
	n := 16
	for n < 2*capacity {
		n <<= 1
	}
	return &seriesTable[T]{seed: maphash.MakeSeed(), slots: make([]atomic.Pointer[seriesEntry[T]], n), mask: uint64(n - 1)}
}

const hashMul = 0x9e3779b97f4a7c15

func (t *seriesTable[T]) mix(h uint64, v string) uint64 {
	return (h ^ maphash.String(t.seed, v)) * hashMul
}

func (t *seriesTable[T]) hash(k *seriesKey, n int) uint64 {
	var h uint64
	for i := 0; i < n; i++ {
		h = t.mix(h, k[i])
	}
	return h
}

func (t *seriesTable[T]) lookup(k *seriesKey, h uint64) *seriesEntry[T] {
	for i := h & t.mask; ; i = (i + 1) & t.mask {
		e := t.slots[i].Load()
		if e == nil || e.hash == h && e.key == *k {
			return e
		}
	}
}

// newEntry makes an entry for k. The label values are copied, so that the table does not keep
// alive the buffers they were cut from.
func (t *seriesTable[T]) newEntry(k *seriesKey, h uint64) *seriesEntry[T] {
	e := &seriesEntry[T]{hash: h}
	for i, v := range k {
		if v != otherValue {
			v = strings.Clone(v)
		}
		e.key[i] = v
	}
	return e
}

// publish makes e visible to readers. The caller holds mu, has checked that e's key is absent and
// that the table is under its capacity, and does not change e afterwards.
func (t *seriesTable[T]) publish(e *seriesEntry[T]) *seriesEntry[T] {
	for i := e.hash & t.mask; ; i = (i + 1) & t.mask {
		if t.slots[i].Load() == nil {
			t.slots[i].Store(e)
			return e
		}
	}
}

func (t *seriesTable[T]) insert(k *seriesKey, h uint64) *seriesEntry[T] {
	return t.publish(t.newEntry(k, h))
}

// Request label positions in a seriesKey. The hash is computed in this order, so a flow can hash
// dst and client once.
const (
	rDst = iota
	rClient
	rMethod
	rName
	rDecision
	rLabels
)

// RequestSeries is the requests counter, mcpintercept_requests_total{orig_dst, mcp_method,
// mcp_name, client, decision}, with its series bounded jointly: it never holds more than max
// series plus ReservedFallbackSeries. It is a prometheus.Collector that keeps one atomic count per
// series (about 200 bytes a series, where a CounterVec child costs about 1 KiB).
//
// The budget has two pools. The general pool (max minus max/KeepShare) takes any combination,
// first come first served. The reserve (max/KeepShare) takes only the per-destination series
// (dst, "other", "other", "other", decision) of destinations for which Keep is true: however many
// values a client invents, even against a configured destination, every configured destination
// still gets a series of its own.
//
// A combination that is not a series yet and does not fit is folded: mcp_name, then client, then
// mcp_method become "other", until the combination exists or fits. If none does, the request is
// counted under ("other", "other", "other", "other", decision), or under the all-"other" series
// (there from the start) once 8 decision values have such a series. Every request counted under a
// series other than its own increments
// mcpintercept_metric_series_folded_total{metric="mcpintercept_requests_total"}.
//
// Existing series are found without a lock and without allocating; only a new combination takes
// a mutex.
type RequestSeries struct {
	desc   *prometheus.Desc
	folded prometheus.Counter
	t      *seriesTable[struct{}]
	keep   atomic.Pointer[func(dst string) bool]

	max, general, reserve int

	// Guarded by t.mu.
	inGeneral, inReserve, fallbacks int
	other                           *seriesEntry[struct{}]
}

type requestEntry = seriesEntry[struct{}]

// NewRequestSeries makes the requests counter, bounded to max series (DefaultRequestSeries if
// max <= 0); it is to be registered. folded counts the requests that were folded. keep tells
// configured destinations (it is given the cleaned orig_dst label value, "addr:port") and may be
// nil (none); SetKeep replaces it.
func NewRequestSeries(folded prometheus.Counter, max int, keep func(dst string) bool) *RequestSeries {
	if max <= 0 {
		max = DefaultRequestSeries
	}
	s := &RequestSeries{
		desc: prometheus.NewDesc("mcpintercept_requests_total",
			"HTTP requests seen at Level 1. Series are bounded jointly; past the bound, labels are folded to \"other\".",
			[]string{"orig_dst", "mcp_method", "mcp_name", "client", "decision"}, nil),
		folded: folded, max: max, reserve: max / KeepShare,
		t: newSeriesTable[struct{}](max + ReservedFallbackSeries)}
	s.general = max - s.reserve
	s.SetKeep(keep)
	k := seriesKey{otherValue, otherValue, otherValue, otherValue, otherValue}
	s.t.mu.Lock()
	s.other = s.t.insert(&k, s.t.hash(&k, rLabels))
	s.t.mu.Unlock()
	return s
}

// Describe implements prometheus.Collector.
func (s *RequestSeries) Describe(ch chan<- *prometheus.Desc) { ch <- s.desc }

// Collect implements prometheus.Collector.
func (s *RequestSeries) Collect(ch chan<- prometheus.Metric) {
	for i := range s.t.slots {
		if e := s.t.slots[i].Load(); e != nil {
			ch <- prometheus.MustNewConstMetric(s.desc, prometheus.CounterValue, float64(e.n.Load()),
				e.key[rDst], e.key[rMethod], e.key[rName], e.key[rClient], e.key[rDecision])
		}
	}
}

// SetKeep replaces the test for configured destinations (after a configuration reload). Series
// already made stay in the pool they were made in.
func (s *RequestSeries) SetKeep(keep func(dst string) bool) {
	if keep == nil {
		keep = func(string) bool { return false }
	}
	s.keep.Store(&keep)
}

// Max is the bound on the series, not counting the ReservedFallbackSeries.
func (s *RequestSeries) Max() int { return s.max }

// Len is the number of series made so far, including the fallbacks.
func (s *RequestSeries) Len() int {
	s.t.mu.Lock()
	defer s.t.mu.Unlock()
	return s.inGeneral + s.inReserve + s.fallbacks + 1
}

// Value is the count of the series with exactly these (cleaned) label values, 0 if there is none;
// for tests.
func (s *RequestSeries) Value(dst, method, name, client, decision string) float64 {
	k := seriesKey{rDst: cleanLabel(dst), rClient: cleanLabel(client), rMethod: cleanLabel(method),
		rName: cleanLabel(name), rDecision: cleanLabel(decision)}
	if e := s.t.lookup(&k, s.t.hash(&k, rLabels)); e != nil {
		return float64(e.n.Load())
	}
	return 0
}

// Inc counts one request. Label values are cleaned (valid UTF-8, at most 128 bytes).
func (s *RequestSeries) Inc(dst, method, name, client, decision string) {
	k := seriesKey{rDst: cleanLabel(dst), rClient: cleanLabel(client), rMethod: cleanLabel(method),
		rName: cleanLabel(name), rDecision: cleanLabel(decision)}
	h := s.t.hash(&k, rLabels)
	if e := s.t.lookup(&k, h); e != nil {
		e.n.Add(1)
		return
	}
	e, folded := s.slow(&k, h)
	if folded {
		s.folded.Inc()
	}
	e.n.Add(1)
}

// slow finds or makes the series for k, folding it if needed. It reports whether the series used
// is not k's own.
func (s *RequestSeries) slow(k *seriesKey, h uint64) (*requestEntry, bool) {
	s.t.mu.Lock()
	defer s.t.mu.Unlock()
	if e := s.t.lookup(k, h); e != nil { // made meanwhile
		return e, false
	}
	c := *k
	kept, keptKnown := false, false
	for step := 0; step < 4; step++ {
		switch step {
		case 1:
			c[rName] = otherValue
		case 2:
			c[rClient] = otherValue
		case 3:
			c[rMethod] = otherValue
		}
		folded := c != *k
		if step > 0 {
			h = s.t.hash(&c, rLabels)
			if e := s.t.lookup(&c, h); e != nil {
				return e, folded
			}
		}
		if s.inGeneral < s.general {
			s.inGeneral++
			return s.t.insert(&c, h), folded
		}
		if step == 3 && s.inReserve < s.reserve {
			if !keptKnown {
				kept, keptKnown = (*s.keep.Load())(c[rDst]), true
			}
			if kept {
				s.inReserve++
				return s.t.insert(&c, h), folded
			}
		}
	}
	c = s.other.key
	c[rDecision] = k[rDecision]
	h = s.t.hash(&c, rLabels)
	if e := s.t.lookup(&c, h); e != nil {
		return e, true
	}
	if s.fallbacks < maxFallbackDecisions {
		s.fallbacks++
		return s.t.insert(&c, h), true
	}
	return s.other, true
}

// FlowRequests counts the requests of one flow: dst and client are cleaned and hashed once, and
// the last few series used are remembered, so a request whose labels repeat costs a few string
// comparisons and an atomic add. It is safe for concurrent use.
type FlowRequests struct {
	s           *RequestSeries
	dst, client string
	h           uint64 // hash of dst and client

	mu    sync.Mutex
	next  int
	cache [4]flowSeries
}

type flowSeries struct {
	method, name, decision string
	e                      *requestEntry
	folded                 bool
}

// ForFlow returns the counter of one flow's requests to dst from client.
func (s *RequestSeries) ForFlow(dst, client string) *FlowRequests {
	f := &FlowRequests{s: s, dst: cleanLabel(dst), client: cleanLabel(client)}
	f.h = s.t.mix(s.t.mix(0, f.dst), f.client)
	return f
}

// Inc counts one request of the flow.
func (f *FlowRequests) Inc(method, name, decision string) {
	f.mu.Lock()
	for i := range f.cache {
		if c := &f.cache[i]; c.e != nil && c.method == method && c.name == name && c.decision == decision {
			e, folded := c.e, c.folded
			f.mu.Unlock()
			if folded {
				f.s.folded.Inc()
			}
			e.n.Add(1)
			return
		}
	}
	f.mu.Unlock()
	s := f.s
	k := seriesKey{rDst: f.dst, rClient: f.client, rMethod: cleanLabel(method), rName: cleanLabel(name),
		rDecision: cleanLabel(decision)}
	h := s.t.mix(s.t.mix(s.t.mix(f.h, k[rMethod]), k[rName]), k[rDecision])
	e := s.t.lookup(&k, h)
	folded := false
	if e == nil {
		e, folded = s.slow(&k, h)
	}
	// Cache under the cleaned values (a value that had to be cleaned misses and takes the path
	// above again, which is correct, only slower), and under the table's copies when they are the
	// same, not the caller's strings, which may pin a request buffer.
	if folded {
		method, name, decision = strings.Clone(k[rMethod]), strings.Clone(k[rName]), strings.Clone(k[rDecision])
	} else {
		method, name, decision = e.key[rMethod], e.key[rName], e.key[rDecision]
	}
	f.mu.Lock()
	f.cache[f.next] = flowSeries{method: method, name: name, decision: decision, e: e, folded: folded}
	f.next = (f.next + 1) % len(f.cache)
	f.mu.Unlock()
	if folded {
		s.folded.Inc()
	}
	e.n.Add(1)
}

// DurationSeries bounds the series of the request duration histogram (mcp_method, status) to max
// (DefaultDurationSeries if max <= 0) plus ReservedDurationSeries: past the bound, mcp_method
// becomes "other" (up to ReservedDurationSeries such per-status series), and the all-"other"
// series takes what is left. Requests observed under a series other than their own increment
// mcpintercept_metric_series_folded_total{metric="mcpintercept_request_duration_seconds"}.
type DurationSeries struct {
	vec    *prometheus.HistogramVec
	folded prometheus.Counter
	t      *seriesTable[prometheus.Observer]
	max    int
	// Guarded by t.mu.
	n, fallbacks int
	other        prometheus.Observer
}

// ReservedDurationSeries is how many series a DurationSeries may hold beyond its bound: 32
// ("other", status) series and the all-"other" one.
const ReservedDurationSeries = maxDurationFallbacks + 1

const maxDurationFallbacks = 32

// NewDurationSeries makes the request duration histogram, bounded to max series
// (DefaultDurationSeries if max <= 0); it is to be registered. folded counts the observations
// that were folded.
func NewDurationSeries(folded prometheus.Counter, max int) *DurationSeries {
	if max <= 0 {
		max = DefaultDurationSeries
	}
	vec := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "mcpintercept_request_duration_seconds", Help: "Request head to response end, at Level 1.",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16)}, []string{"mcp_method", "status"})
	s := &DurationSeries{vec: vec, folded: folded, max: max,
		t: newSeriesTable[prometheus.Observer](max + ReservedDurationSeries)}
	k := seriesKey{otherValue, otherValue}
	s.t.mu.Lock()
	s.other = s.create(&k, s.t.hash(&k, 2)).m
	s.t.mu.Unlock()
	return s
}

// Describe implements prometheus.Collector.
func (s *DurationSeries) Describe(ch chan<- *prometheus.Desc) { s.vec.Describe(ch) }

// Collect implements prometheus.Collector.
func (s *DurationSeries) Collect(ch chan<- prometheus.Metric) { s.vec.Collect(ch) }

func (s *DurationSeries) create(k *seriesKey, h uint64) *seriesEntry[prometheus.Observer] {
	e := s.t.newEntry(k, h)
	e.m = s.vec.WithLabelValues(e.key[0], e.key[1])
	return s.t.publish(e)
}

// Max is the bound on the series, not counting the ReservedDurationSeries.
func (s *DurationSeries) Max() int { return s.max }

// statusText holds the label values of the status codes 0-999, so that Observe does not allocate.
var statusText = func() (t [1000]string) {
	for i := range t {
		t[i] = strconv.Itoa(i)
	}
	return
}()

// Observe records one request of the given MCP method and HTTP status (0 when there was no
// response; a status outside 0-999 is "other"). The method is cleaned as RequestSeries cleans.
func (s *DurationSeries) Observe(method string, status int, seconds float64) {
	st := otherValue
	if status >= 0 && status < len(statusText) {
		st = statusText[status]
	}
	k := seriesKey{cleanLabel(method), st}
	h := s.t.hash(&k, 2)
	if e := s.t.lookup(&k, h); e != nil {
		e.m.Observe(seconds)
		return
	}
	o, folded := s.slow(&k, h)
	if folded {
		s.folded.Inc()
	}
	o.Observe(seconds)
}

// slow finds or makes the series for k, folding it if needed. It reports whether the series used
// is not k's own.
func (s *DurationSeries) slow(k *seriesKey, h uint64) (prometheus.Observer, bool) {
	s.t.mu.Lock()
	defer s.t.mu.Unlock()
	if e := s.t.lookup(k, h); e != nil {
		return e.m, false
	}
	if s.n < s.max {
		s.n++
		return s.create(k, h).m, false
	}
	c := seriesKey{otherValue, k[1]}
	folded := c != *k
	hc := s.t.hash(&c, 2)
	if e := s.t.lookup(&c, hc); e != nil {
		return e.m, folded
	}
	if s.fallbacks < maxDurationFallbacks {
		s.fallbacks++
		return s.create(&c, hc).m, folded
	}
	return s.other, true
}

// KeepPrefixes returns a Keep test for NewRequestSeries: a destination is configured when its
// address (the label is "addr:port" or a bare address) is in one of prefixes.
func KeepPrefixes(prefixes []netip.Prefix) func(dst string) bool {
	ps := append([]netip.Prefix(nil), prefixes...)
	return func(dst string) bool {
		a, err := netip.ParseAddr(dst)
		if err != nil {
			ap, err := netip.ParseAddrPort(dst)
			if err != nil {
				return false
			}
			a = ap.Addr()
		}
		a = a.Unmap()
		for _, p := range ps {
			if p.Contains(a) {
				return true
			}
		}
		return false
	}
}
