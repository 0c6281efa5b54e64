package telemetry

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestHubDelivers(t *testing.T) {
	h := NewHub(nil)
	h.Record(KindMessage, FlowRecord{MCPName: "nobody"}) // no subscriber: nothing to do
	a, b := h.Subscribe(8), h.Subscribe(8)
	if h.Subscribers() != 2 {
		t.Fatalf("subscribers %d", h.Subscribers())
	}
	for i, n := range []string{"one", "two", "three"} {
		h.Record(Kind(i%3+1), FlowRecord{MCPName: n})
	}
	for _, s := range []*Subscriber{a, b} {
		for i, n := range []string{"one", "two", "three"} {
			got := <-s.C
			if got.Record.MCPName != n || got.Kind != Kind(i%3+1) {
				t.Fatalf("record %d: %+v", i, got)
			}
		}
	}
	a.Close()
	a.Close()
	select {
	case <-a.Done():
	default:
		t.Fatal("Done not closed after Close")
	}
	if a.Reason() != "" {
		t.Fatalf("reason after Close: %q", a.Reason())
	}
	h.Record(KindMessage, FlowRecord{MCPName: "four"})
	if got := <-b.C; got.Record.MCPName != "four" {
		t.Fatalf("b got %+v", got)
	}
	if len(a.C) != 0 {
		t.Fatal("a got a record after Close")
	}
	if h.Dropped() != 0 {
		t.Fatalf("dropped %d", h.Dropped())
	}
}

func TestHubDropsSlowSubscriber(t *testing.T) {
	reg := prometheus.NewRegistry()
	h := NewHub(reg)
	slow, fast := h.Subscribe(2), h.Subscribe(16)
	for i := 0; i < 10; i++ {
		h.Record(KindMessage, FlowRecord{Status: i})
	}
	select {
	case <-slow.Done():
	default:
		t.Fatal("slow subscriber not dropped")
	}
	if !strings.Contains(slow.Reason(), "fell behind") {
		t.Fatalf("reason %q", slow.Reason())
	}
	if len(slow.C) != 2 {
		t.Fatalf("slow buffered %d, want its 2", len(slow.C))
	}
	for i := 0; i < 10; i++ {
		if got := <-fast.C; got.Record.Status != i {
			t.Fatalf("fast record %d: %+v", i, got)
		}
	}
	if h.Dropped() != 1 || h.Subscribers() != 1 {
		t.Fatalf("dropped %d subscribers %d", h.Dropped(), h.Subscribers())
	}
	if v := testutil.ToFloat64(h.droppedCtr); v != 1 {
		t.Fatalf("dropped counter %v", v)
	}
	if v := testutil.ToFloat64(h.subscribers); v != 1 {
		t.Fatalf("subscribers gauge %v", v)
	}
	h.Close("stopping")
	select {
	case <-fast.Done():
	default:
		t.Fatal("Close left a subscriber")
	}
	if fast.Reason() != "stopping" || h.Subscribers() != 0 {
		t.Fatalf("reason %q subscribers %d", fast.Reason(), h.Subscribers())
	}
}

// Publishing from many flows while subscribers come, go and stall (run with -race).
func TestHubConcurrent(t *testing.T) {
	h := NewHub(nil)
	stop := make(chan struct{})
	done := make(chan struct{})
	for w := 0; w < 4; w++ {
		go func() {
			defer func() { done <- struct{}{} }()
			for {
				select {
				case <-stop:
					return
				default:
					h.Record(KindMessage, FlowRecord{})
				}
			}
		}()
	}
	for i := 0; i < 200; i++ {
		s := h.Subscribe(4)
		if i%2 == 0 {
			s.Close()
		}
	}
	deadline := time.After(30 * time.Second)
	for h.Subscribers() != 0 { // every stalled one is dropped eventually
		select {
		case <-deadline:
			t.Fatalf("%d subscribers left", h.Subscribers())
		default:
		}
		time.Sleep(time.Millisecond)
	}
	close(stop)
	for w := 0; w < 4; w++ {
		<-done
	}
	// The 100 that never read are dropped; one closed just after subscribing may have been
	// dropped first when the writers filled its buffer before Close (a loaded scheduler).
	if d := h.Dropped(); d < 100 || d > 200 {
		t.Fatalf("dropped %d, want at least the 100 that never read and at most all 200", d)
	}
}

// BenchmarkPublish is the data path's cost of the live view: nobody subscribed, one reader
// keeping up, and one stalled reader (dropped at its first full buffer; after that, as none).
func BenchmarkPublish(b *testing.B) {
	rec := FlowRecord{Flow: "f1", Client: "10.0.0.1:1234", OrigDst: "10.0.0.2:443", MCPMethod: "tools/call", MCPName: "echo", Decision: "allow"}
	b.Run("subscribers=0", func(b *testing.B) {
		h := NewHub(nil)
		b.ReportAllocs()
		for b.Loop() {
			h.Record(KindMessage, rec)
		}
	})
	b.Run("subscribers=1", func(b *testing.B) {
		// A reader that keeps up: the buffer is emptied in the loop every 512 records (a reader
		// goroutine on a 2-core machine falls behind a publisher that does nothing else, and is
		// dropped, which would measure the stalled case).
		h := NewHub(nil)
		s := h.Subscribe(1024)
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			h.Record(KindMessage, rec)
			if i++; i == 512 {
				for ; i > 0; i-- {
					<-s.C
				}
			}
		}
		if h.Dropped() != 0 {
			b.Fatalf("dropped %d", h.Dropped())
		}
	})
	b.Run("subscribers=0-history", func(b *testing.B) {
		h := NewHubWithHistory(nil, 1024)
		b.ReportAllocs()
		for b.Loop() {
			h.Record(KindMessage, rec)
		}
	})
	b.Run("subscribers=1-stalled", func(b *testing.B) {
		h := NewHub(nil)
		h.Subscribe(1024)
		b.ReportAllocs()
		for b.Loop() {
			h.Record(KindMessage, rec)
		}
	})
	b.Run("subscribers=1-stalled-kept", func(b *testing.B) {
		// The worst case: a full buffer on every record (a subscriber caught at the moment of its
		// drop); the publisher's cost is a failed send.
		h := NewHub(nil)
		s := h.Subscribe(1)
		s.dropping.Store(true)
		h.Record(KindMessage, rec)
		b.ReportAllocs()
		for b.Loop() {
			h.Record(KindMessage, rec)
		}
	})
}

func TestHubHistory(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	fill := func() *Hub {
		h := NewHubWithHistory(nil, 4)
		for i := 0; i < 6; i++ { // the ring keeps 2..5
			h.Record(KindMessage, FlowRecord{Time: Time{t0.Add(time.Duration(i) * time.Second)}, Status: i})
		}
		return h
	}
	read := func(s *Subscriber) (got []int) {
		for len(s.C) > 0 {
			got = append(got, (<-s.C).Record.Status)
		}
		return got
	}
	cases := []struct {
		since  time.Time
		replay bool
		buf    int
		want   string
	}{
		{time.Time{}, false, 8, "[]"},
		{time.Time{}, true, 8, "[2 3 4 5]"},
		{t0.Add(4 * time.Second), true, 8, "[4 5]"},
		{t0.Add(time.Hour), true, 8, "[]"},
		{time.Time{}, true, 3, "[3 4 5]"},
	}
	for _, c := range cases {
		h := fill()
		s := h.SubscribeSince(c.buf, c.since, c.replay)
		if got := fmt.Sprint(read(s)); got != c.want {
			t.Errorf("since %v replay %v buf %d: %s, want %s", c.since, c.replay, c.buf, got, c.want)
		}
		h.Record(KindMessage, FlowRecord{Status: 99})
		if got := read(s); len(got) != 1 || got[0] != 99 {
			t.Errorf("live after replay: %v", got)
		}
		s.Close()
	}
}
