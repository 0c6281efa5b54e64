// Package telemetry owns what leaves the appliance about its flows: the JSON Lines flow/decision
// log, Prometheus metrics and the admin HTTP listener (/metrics, /healthz, /readyz, /declaration).
// Nothing here may block the data path: the flow log is a bounded queue whose overflow is counted.
package telemetry

import (
	"encoding/json"
	"io"
	"log/slog"
	"sync"
	"time"
)

// FlowRecord is one line of the flow/decision log: one per HTTP request, or one per connection for
// opaque and passthrough flows. Every key is always present so consumers see a stable schema;
// fields that do not apply to a record are empty (or 0).
type FlowRecord struct {
	Time       Time   `json:"time"`
	Flow       string `json:"flow"`
	Client     string `json:"client"`
	OrigDst    string `json:"orig_dst"`
	Mechanism  string `json:"mechanism"`
	SNI        string `json:"sni"`
	TLS        string `json:"tls"`
	Level      int    `json:"level"`
	HTTPMethod string `json:"http_method"`
	Path       string `json:"path"`
	Status     int    `json:"status"`
	MCPVersion string `json:"mcp_version"`
	MCPMethod  string `json:"mcp_method"`
	MCPName    string `json:"mcp_name"`
	Decision   string `json:"decision"`
	Rule       string `json:"rule"`
	Reason     string `json:"reason"`
	BytesUp    int64  `json:"bytes_up"`
	BytesDown  int64  `json:"bytes_down"`
	DurationMS int64  `json:"duration_ms"`
	// Process is the local process that opened the connection, when the steering mechanism knows
	// it (eBPF); absent otherwise.
	Process *Process `json:"process,omitempty"`
}

// Process identifies the client program (eBPF steering records it at connect time).
type Process struct {
	PID    uint32 `json:"pid"`
	UID    uint32 `json:"uid"`
	GID    uint32 `json:"gid"`
	Comm   string `json:"comm"`
	Exe    string `json:"exe,omitempty"`
	Cgroup uint64 `json:"cgroup"`
}

// Time marshals as RFC 3339 in UTC with exactly three fractional digits, as the log contract says.
type Time struct{ time.Time }

// MarshalJSON implements json.Marshaler.
func (t Time) MarshalJSON() ([]byte, error) {
	b := make([]byte, 0, 32)
	b = append(b, '"')
	b = t.UTC().AppendFormat(b, "2006-01-02T15:04:05.000Z07:00")
	return append(b, '"'), nil
}

// FlowLog writes records as JSON Lines to an io.Writer from its own goroutine, one write per line
// (so each line is flushed at once). Write never blocks: when the queue is full the record is
// dropped and counted, because a slow log consumer must not stall forwarding.
type FlowLog struct {
	w       io.Writer
	q       chan FlowRecord
	done    chan struct{}
	once    sync.Once
	log     *slog.Logger
	dropped func()
}

// NewFlowLog starts the writer goroutine; Close stops it after writing what is queued.
// onDrop is called for every dropped record (a metric increment); it may be nil.
func NewFlowLog(w io.Writer, queue int, log *slog.Logger, onDrop func()) *FlowLog {
	if queue <= 0 {
		queue = 4096
	}
	if onDrop == nil {
		onDrop = func() {}
	}
	f := &FlowLog{w: w, q: make(chan FlowRecord, queue), done: make(chan struct{}), log: log, dropped: onDrop}
	go f.run()
	return f
}

// Write queues a record without blocking.
func (f *FlowLog) Write(r FlowRecord) {
	select {
	case f.q <- r:
	default:
		f.dropped()
	}
}

func (f *FlowLog) run() {
	defer close(f.done)
	buf := make([]byte, 0, 1024)
	failing := false
	for r := range f.q {
		b, err := json.Marshal(r)
		if err != nil {
			f.log.Error("flow log: encode", "err", err)
			continue
		}
		buf = append(buf[:0], b...)
		buf = append(buf, '\n')
		if _, err := f.w.Write(buf); err != nil {
			// Once per failure streak: a gone reader must not turn into a log flood.
			if !failing {
				f.log.Error("flow log: write failed; records are dropped until it works again", "err", err)
			}
			failing = true
			f.dropped()
			continue
		}
		failing = false
	}
}

// Close flushes the queue and stops the writer. Write must not be called after Close.
func (f *FlowLog) Close() {
	f.once.Do(func() { close(f.q) })
	<-f.done
}
