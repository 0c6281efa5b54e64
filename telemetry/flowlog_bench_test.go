package telemetry

import (
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// chanFlowLog is the flow log as it was before batching, kept as the benchmarks' baseline: the
// record copied by value through a channel, encoded on the writer goroutine, one write per line.
type chanFlowLog struct {
	w       *os.File
	q       chan FlowRecord
	done    chan struct{}
	once    sync.Once
	dropped func()
}

func newChanFlowLog(w *os.File, queue int, onDrop func()) *chanFlowLog {
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

// benchRecord is a typical Level 2 message record.
func benchRecord() FlowRecord {
	return FlowRecord{Time: Time{time.Now()}, Flow: "f-0001a2b3c4", Client: "10.200.1.2:53124",
		OrigDst: "10.200.2.2:8080", Mechanism: "nftables-tproxy", TLS: "plaintext", Level: 2,
		HTTPMethod: "POST", Path: "/mcp", Status: 200, MCPVersion: "2026-07-28", MCPMethod: "tools/call",
		MCPName: "echo", JSONRPCID: "7", Direction: ClientToServer, Decision: "allow",
		BytesUp: 1234, BytesDown: 1100, DurationMS: 3}
}

// BenchmarkFlowLog writes records from one goroutine (single) and from GOMAXPROCS goroutines
// (parallel) into the writer before batching (channel) and now (batched), through a queue of the
// appliance's size to /dev/null, so that each write is a real syscall that costs no disk. ns/op is
// what the data path pays per record; records/s is what reached the file per second of the run,
// the drain at the end included; dropped/op is the share the writer could not keep up with.
func BenchmarkFlowLog(b *testing.B) {
	type log interface {
		Write(FlowRecord)
		Close()
	}
	impls := []struct {
		name string
		open func(w *os.File, drop func()) log
	}{
		{"channel", func(w *os.File, drop func()) log { return newChanFlowLog(w, 8192, drop) }},
		{"batched", func(w *os.File, drop func()) log { return NewFlowLog(w, 8192, quietLog(), drop) }},
	}
	for _, parallel := range []bool{false, true} {
		for _, impl := range impls {
			name := impl.name + "/single"
			if parallel {
				name = impl.name + "/parallel"
			}
			b.Run(name, func(b *testing.B) {
				w, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
				if err != nil {
					b.Skip(err)
				}
				defer w.Close()
				var dropped atomic.Int64
				fl := impl.open(w, func() { dropped.Add(1) })
				r := benchRecord()
				b.ReportAllocs()
				b.ResetTimer()
				start := time.Now()
				if parallel {
					b.RunParallel(func(pb *testing.PB) {
						for pb.Next() {
							fl.Write(r)
						}
					})
				} else {
					for range b.N {
						fl.Write(r)
					}
				}
				fl.Close()
				b.StopTimer()
				written := float64(int64(b.N) - dropped.Load())
				b.ReportMetric(written/time.Since(start).Seconds(), "records/s")
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
