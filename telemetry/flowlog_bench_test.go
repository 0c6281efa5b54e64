package telemetry

import (
	"bytes"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// chanFlowLog is the flow log as it was before batching, kept as the benchmarks' baseline: the
// record copied by value through a channel, encoded on the writer goroutine, one write per line.
type chanFlowLog struct {
	w       io.Writer
	q       chan FlowRecord
	done    chan struct{}
	once    sync.Once
	dropped func()
}

func newChanFlowLog(w io.Writer, queue int, onDrop func()) *chanFlowLog {
	f := &chanFlowLog{w: w, q: make(chan FlowRecord, queue), done: make(chan struct{}), dropped: onDrop}
	go f.run()
	return f
}

func (f *chanFlowLog) Write(r FlowRecord) {
	select {
	case f.q <- r:
	default:
		f.dropped()
	}
}

func (f *chanFlowLog) run() {
	defer close(f.done)
	buf := make([]byte, 0, 1024)
	for r := range f.q {
		buf = append(r.AppendJSON(buf[:0]), '\n')
		if _, err := f.w.Write(buf); err != nil {
			f.dropped()
		}
	}
}

func (f *chanFlowLog) Close() {
	f.once.Do(func() { close(f.q) })
	<-f.done
}

// cpuTime is the CPU time the process has used, user and system, in nanoseconds.
func cpuTime() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// benchRecord is a typical Level 2 message record.
func benchRecord() FlowRecord {
	return FlowRecord{Time: Time{time.Now()}, Flow: "f-0001a2b3c4", Client: "10.200.1.2:53124",
		OrigDst: "10.200.2.2:8080", Mechanism: "nftables-tproxy", TLS: "plaintext", Level: 2,
		HTTPMethod: "POST", Path: "/mcp", Status: 200, MCPVersion: "2026-07-28", MCPMethod: "tools/call",
		MCPName: "echo", JSONRPCID: "7", Direction: ClientToServer, Decision: "allow",
		BytesUp: 1234, BytesDown: 1100, DurationMS: 3}
}

// lineCounter is /dev/null counting the lines written to it, so that a benchmark can wait for the
// writer to catch up.
type lineCounter struct {
	f    *os.File
	mu   sync.Mutex
	cond *sync.Cond
	n    int64 // lines
	w    int64 // writes
}

func newLineCounter(b *testing.B) *lineCounter {
	f, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		b.Skip(err)
	}
	b.Cleanup(func() { f.Close() })
	c := &lineCounter{f: f}
	c.cond = sync.NewCond(&c.mu)
	return c
}

func (c *lineCounter) Write(p []byte) (int, error) {
	n, err := c.f.Write(p)
	c.mu.Lock()
	c.n += int64(bytes.Count(p[:n], []byte{'\n'}))
	c.w++
	c.mu.Unlock()
	c.cond.Broadcast()
	return n, err
}

func (c *lineCounter) wait(lines int64) {
	c.mu.Lock()
	for c.n < lines {
		c.cond.Wait()
	}
	c.mu.Unlock()
}

// BenchmarkFlowLog writes records from one goroutine (single) and from GOMAXPROCS goroutines
// (parallel) into the writer before batching (channel) and now (batched), to /dev/null, so that
// each write is a real syscall that costs no disk, through a queue of the appliance's size. A
// producer logs bursts of burst records and waits for the writer to catch up after each, as the
// data path leaves the writer a core while it waits on the network (a producer that never waits
// starves the writer and measures the drop path). ns/op is the wall time per record, the writer's
// work included; cpu-ns/record the process's CPU time per record (every goroutine, the writer's
// syscalls included); writes/record the write calls per record.
func BenchmarkFlowLog(b *testing.B) {
	const burst = 256
	type log interface {
		Write(FlowRecord)
		Close()
	}
	impls := []struct {
		name string
		open func(w *lineCounter, drop func()) log
	}{
		{"channel", func(w *lineCounter, drop func()) log { return newChanFlowLog(w, 8192, drop) }},
		{"batched", func(w *lineCounter, drop func()) log { return NewFlowLog(w, 8192, quietLog(), drop) }},
	}
	for _, parallel := range []bool{false, true} {
		for _, impl := range impls {
			name := impl.name + "/single"
			if parallel {
				name = impl.name + "/parallel"
			}
			b.Run(name, func(b *testing.B) {
				w := newLineCounter(b)
				var dropped, produced atomic.Int64
				fl := impl.open(w, func() { dropped.Add(1) })
				r := benchRecord()
				produce := func(next func() bool) {
					for n := 1; next(); n++ {
						fl.Write(r)
						if p := produced.Add(1); n%burst == 0 {
							w.wait(p - dropped.Load())
						}
					}
				}
				b.ReportAllocs()
				b.ResetTimer()
				cpu := cpuTime()
				if parallel {
					b.RunParallel(func(pb *testing.PB) { produce(pb.Next) })
				} else {
					i := 0
					produce(func() bool { i++; return i <= b.N })
				}
				fl.Close()
				b.StopTimer()
				b.ReportMetric(float64(cpuTime()-cpu)/float64(b.N), "cpu-ns/record")
				b.ReportMetric(float64(w.w)/float64(b.N), "writes/record")
				b.ReportMetric(float64(dropped.Load())/float64(b.N), "dropped/op")
			})
		}
	}
}

// BenchmarkRecorder is the cost per record of the engine's call (a Level 2 message: requests
// counter, duration histogram, the flow log's queue), single and parallel.
func BenchmarkRecorder(b *testing.B) {
	for _, parallel := range []bool{false, true} {
		name := "single"
		if parallel {
			name = "parallel"
		}
		b.Run(name, func(b *testing.B) {
			w, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
			if err != nil {
				b.Skip(err)
			}
			defer w.Close()
			m := NewMetrics()
			fl := NewFlowLog(w, 8192, quietLog(), m.LogDropped.Inc)
			rc := NewRecorder(m, fl)
			fr := rc.ForFlow("10.200.2.2:8080", "10.200.1.2")
			base := benchRecord()
			b.ReportAllocs()
			b.ResetTimer()
			if parallel {
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						rec := base
						fr.Message(&rec, 3*time.Millisecond)
					}
				})
			} else {
				for range b.N {
					rec := base
					fr.Message(&rec, 3*time.Millisecond)
				}
			}
			fl.Close()
		})
	}
}
