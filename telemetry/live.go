package telemetry

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Live is one record as the hub hands it to a subscriber.
type Live struct {
	Kind   Kind
	Record FlowRecord
}

// DefaultLiveBuffer is a subscriber's buffer when Subscribe is asked for none.
const DefaultLiveBuffer = 1024

// Hub is the live view's fan-out: a Sink of the Recorder that offers every record to each
// subscriber (`mcpintercept observe`, the /ui page). Publishing never blocks: each subscriber has
// a bounded buffer, and one whose buffer is full when a record comes is dropped (its Done closes,
// Reason says why) and counted, so that a reader that stops reading costs the data path one
// failed channel send, once. With no subscriber, Record is one atomic load.
// It is safe for concurrent use.
type Hub struct {
	mu   sync.Mutex                    // orders Subscribe, Unsubscribe and drops
	subs atomic.Pointer[[]*Subscriber] // copy on write; nil or empty: nobody listens

	// hist is the ring of the last records (SubscribeSince replays it); histMu also orders a
	// record's entry into the ring against a subscription's copy of it, so that a subscriber
	// that asked for history gets each record once. Empty: no history kept (NewHub).
	histMu   sync.Mutex
	hist     []Live
	histNext int
	histLen  int

	dropped     atomic.Uint64
	droppedCtr  prometheus.Counter
	subscribers prometheus.Gauge
}

// NewHubWithHistory is NewHub that also keeps the last n records for SubscribeSince. The ring
// costs each record a lock and a copy whether or not anybody subscribes.
func NewHubWithHistory(reg prometheus.Registerer, n int) *Hub {
	h := NewHub(reg)
	if n > 0 {
		h.hist = make([]Live, n)
	}
	return h
}

// NewHub makes a hub that keeps no history; its metrics (mcpintercept_observe_subscribers,
// mcpintercept_observe_dropped_total) are registered with reg when it is not nil.
func NewHub(reg prometheus.Registerer) *Hub {
	h := &Hub{
		droppedCtr: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mcpintercept_observe_dropped_total",
			Help: "Live-view subscribers (observe, /ui) dropped because they fell behind (their buffer of records was full).",
		}),
		subscribers: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "mcpintercept_observe_subscribers",
			Help: "Live-view subscribers (observe, /ui) connected now.",
		}),
	}
	if reg != nil {
		reg.MustRegister(h.droppedCtr, h.subscribers)
	}
	return h
}

// Subscriber is one reader of the hub. Read C until Done is closed; after Done, C holds what was
// buffered before the drop (or the unsubscription) and nothing more comes.
type Subscriber struct {
	C        <-chan Live
	c        chan Live
	done     chan struct{}
	once     sync.Once
	reason   atomic.Pointer[string]
	dropping atomic.Bool
	hub      *Hub
}

// Done is closed when the subscriber is dropped or unsubscribed.
func (s *Subscriber) Done() <-chan struct{} { return s.done }

// Reason is why the subscriber was dropped ("" while it is not, or when it unsubscribed).
func (s *Subscriber) Reason() string {
	if p := s.reason.Load(); p != nil {
		return *p
	}
	return ""
}

// Close unsubscribes (idempotent).
func (s *Subscriber) Close() { s.hub.remove(s, "") }

// Subscribe adds a subscriber with a buffer of n records (DefaultLiveBuffer when n <= 0).
func (h *Hub) Subscribe(n int) *Subscriber { return h.SubscribeSince(n, time.Time{}, false) }

// SubscribeSince is Subscribe that first puts in the buffer the records of the hub's history
// (NewHubWithHistory) whose time is since or later, oldest first, when replay is set: at most
// the buffer's size, the newest ones when more match. Every record is then seen once: either
// replayed or live.
func (h *Hub) SubscribeSince(n int, since time.Time, replay bool) *Subscriber {
	if n <= 0 {
		n = DefaultLiveBuffer
	}
	c := make(chan Live, n)
	s := &Subscriber{C: c, c: c, done: make(chan struct{}), hub: h}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.hist) > 0 {
		h.histMu.Lock()
		defer h.histMu.Unlock()
		if replay {
			var keep []int
			for i := 0; i < h.histLen; i++ {
				j := (h.histNext - h.histLen + i + len(h.hist)) % len(h.hist)
				if !h.hist[j].Record.Time.Before(since) {
					keep = append(keep, j)
				}
			}
			if len(keep) > n {
				keep = keep[len(keep)-n:]
			}
			for _, j := range keep {
				c <- h.hist[j]
			}
		}
	}
	var next []*Subscriber
	if p := h.subs.Load(); p != nil {
		next = append(next, *p...)
	}
	next = append(next, s)
	h.subs.Store(&next)
	h.subscribers.Inc()
	return s
}

// remove takes s out of the list and closes its Done with reason; it does nothing the second
// time.
func (h *Hub) remove(s *Subscriber, reason string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	p := h.subs.Load()
	if p == nil {
		return false
	}
	next := make([]*Subscriber, 0, len(*p))
	found := false
	for _, o := range *p {
		if o == s {
			found = true
			continue
		}
		next = append(next, o)
	}
	if !found {
		return false
	}
	h.subs.Store(&next)
	h.subscribers.Dec()
	if reason != "" {
		s.reason.Store(&reason)
	}
	s.once.Do(func() { close(s.done) })
	return true
}

// Subscribers is the number of subscribers now.
func (h *Hub) Subscribers() int {
	if p := h.subs.Load(); p != nil {
		return len(*p)
	}
	return 0
}

// Dropped is the number of subscribers dropped for falling behind since the hub was made.
func (h *Hub) Dropped() uint64 { return h.dropped.Load() }

// Record implements Sink: r is offered to every subscriber without blocking.
func (h *Hub) Record(k Kind, r FlowRecord) {
	var p *[]*Subscriber
	if len(h.hist) > 0 {
		h.histMu.Lock()
		h.hist[h.histNext] = Live{Kind: k, Record: r}
		h.histNext = (h.histNext + 1) % len(h.hist)
		if h.histLen < len(h.hist) {
			h.histLen++
		}
		p = h.subs.Load() // under histMu: see SubscribeSince
		h.histMu.Unlock()
	} else {
		p = h.subs.Load()
	}
	if p == nil || len(*p) == 0 {
		return
	}
	for _, s := range *p {
		select {
		case s.c <- Live{Kind: k, Record: r}:
		default:
			h.drop(s)
		}
	}
}

// drop runs off the fast path, once per slow subscriber (the flag makes the flows that race
// with it skip it): the subscriber leaves the list and its Done closes with the reason.
func (h *Hub) drop(s *Subscriber) {
	if !s.dropping.CompareAndSwap(false, true) {
		return
	}
	if h.remove(s, fmt.Sprintf("dropped: fell behind (%d records buffered and unread); reconnect to follow again", cap(s.c))) {
		h.dropped.Add(1)
		h.droppedCtr.Inc()
	}
}

// Close drops every subscriber (the appliance is stopping): their Done closes with reason.
func (h *Hub) Close(reason string) {
	h.mu.Lock()
	p := h.subs.Load()
	var all []*Subscriber
	if p != nil {
		all = append(all, *p...)
	}
	h.mu.Unlock()
	for _, s := range all {
		h.remove(s, reason)
	}
}
