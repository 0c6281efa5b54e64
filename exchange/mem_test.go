package exchange

import (
	"context"
	"io"
	"log/slog"
	"net"
	"runtime"
	"testing"
	"time"
)

// idleFlows opens n proxied keep-alive connections on loopback, runs one MCP round trip on each
// (so every buffer a request and a response need has been used), and leaves them idle. It
// returns the heap and stack bytes and the goroutines the proxies hold per connection; the
// sockets themselves are opened before the first measurement, so they are not counted.
//
// wrap hides the sockets behind a plain net.Conn, as the engine's activity-tracking wrapper
// does, so the reader cannot wait on the socket itself.
func idleFlows(t testing.TB, n int, wrap bool) (heapPer, stackPer, goroutinesPer float64) {
	t.Helper()
	type flow struct {
		c, pc, pu, s *net.TCPConn
		done         chan struct{}
	}
	flows := make([]*flow, n)
	for i := range flows {
		c, pc := tcpPair(t)
		pu, s := tcpPair(t)
		flows[i] = &flow{c: c, pc: pc, pu: pu, s: s, done: make(chan struct{})}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer func() {
		cancel()
		for _, f := range flows {
			f.c.Close()
			f.s.Close()
			<-f.done
		}
	}()
	req, resp := []byte(mcpRequest), []byte(mcpResponse)
	got := make([]byte, max(len(req), len(resp)))
	log := slog.New(slog.DiscardHandler)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	g0 := runtime.NumGoroutine()
	for _, f := range flows {
		go func() {
			defer close(f.done)
			var pc, pu net.Conn = f.pc, f.pu
			if wrap {
				pc, pu = plainConn{pc}, plainConn{pu}
			}
			Serve(ctx, pc, pu, nil, Options{IdleTimeout: time.Hour}, log)
		}()
		f.c.SetDeadline(time.Now().Add(testTimeout))
		f.s.SetDeadline(time.Now().Add(testTimeout))
		if _, err := f.c.Write(req); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(f.s, got[:len(req)]); err != nil {
			t.Fatal(err)
		}
		if _, err := f.s.Write(resp); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(f.c, got[:len(resp)]); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(50 * time.Millisecond) // let every proxy settle into its idle wait
	runtime.GC()
	runtime.ReadMemStats(&after)
	g1 := runtime.NumGoroutine()
	heapPer = float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / float64(n)
	stackPer = float64(int64(after.StackInuse)-int64(before.StackInuse)) / float64(n)
	goroutinesPer = float64(g1-g0) / float64(n)
	return heapPer, stackPer, goroutinesPer
}

// BenchmarkIdleFlowMemory reports what one idle proxied connection costs (issue 8, case 13: the
// target is 32 KiB per idle plaintext Level 1 flow, engine included).
func BenchmarkIdleFlowMemory(b *testing.B) {
	for _, wrap := range []bool{false, true} {
		name := "socket"
		if wrap {
			name = "wrapped"
		}
		b.Run(name, func(b *testing.B) {
			const n = 1000
			var heap, stack, gs float64
			for b.Loop() {
				heap, stack, gs = idleFlows(b, n, wrap)
			}
			b.ReportMetric(heap, "heapB/conn")
			b.ReportMetric(stack, "stackB/conn")
			b.ReportMetric(heap+stack, "B/conn")
			b.ReportMetric(gs, "goroutines/conn")
		})
	}
}

// plainConn is a net.Conn and nothing more (no SyscallConn, no CloseWrite).
type plainConn struct{ net.Conn }

// TestIdleFlowMemory keeps the exchange loop's share of an idle flow well under the 32 KiB budget of a whole
// plaintext Level 1 flow: read buffers are held only while a message is in progress.
func TestIdleFlowMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("opens hundreds of sockets")
	}
	if raceEnabled {
		t.Skip("the race detector inflates stacks and heap")
	}
	for _, wrap := range []bool{false, true} {
		heap, stack, gs := idleFlows(t, 300, wrap)
		t.Logf("wrapped=%v: per idle connection: heap %.0f B, stacks %.0f B, %.1f goroutines", wrap, heap, stack, gs)
		if heap+stack > 16<<10 {
			t.Errorf("wrapped=%v: an idle connection holds %.0f B (heap %.0f + stacks %.0f); want at most 16 KiB", wrap, heap+stack, heap, stack)
		}
	}
}
