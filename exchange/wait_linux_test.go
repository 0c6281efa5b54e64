package exchange

import (
	"io"
	"sync/atomic"
	"testing"
	"time"

	"mcpintercept/flowconn"
)

// The waiter reads the socket itself, past the wrapper's Read: the wrapper's activity time must
// still move, its prefix must still come first, and an end must read as io.EOF.
func TestWaiterRawRead(t *testing.T) {
	a, b := tcpPair(t)
	defer a.Close()
	defer b.Close()
	var last atomic.Int64
	c := flowconn.Wrap(b, flowconn.Options{Prefix: []byte("GET / HTTP/1.1\r\n"), Activity: &last})
	r := NewReader(c, Limits{})
	if r.w == nil {
		t.Fatal("no waiter on a plain socket")
	}
	// The prefix is replayed by the ordinary read, then the socket's bytes by the raw one.
	go func() {
		time.Sleep(20 * time.Millisecond) // the reader parks first
		a.Write([]byte("Host: x\r\n\r\n"))
	}()
	h, err := r.ReadRequestHead()
	if err != nil || h.Method != "GET" || string(h.Raw) != "GET / HTTP/1.1\r\nHost: x\r\n\r\n" {
		t.Fatalf("head %q, %v", h.Raw, err)
	}
	last.Store(0)
	done := make(chan error, 1)
	go func() { done <- r.await(true) }()
	time.Sleep(20 * time.Millisecond) // parked (that it holds no buffer then: TestIdleFlowMemory)
	a.Write([]byte("POST"))
	if err := <-done; err != nil || r.Buffered() != 4 {
		t.Fatalf("await: %v, %d buffered", err, r.Buffered())
	}
	if last.Load() == 0 {
		t.Error("a raw read did not touch the activity time")
	}
	r.br.Discard(4)
	a.Close()
	if err := r.await(true); err != io.EOF {
		t.Fatalf("await after the peer closed: %v, want io.EOF", err)
	}
}
