// Package telemetry owns what leaves the appliance about its flows: the JSON Lines flow/decision
// log, Prometheus metrics and the admin HTTP listener (/metrics, /healthz, /readyz, /declaration).
// Nothing here may block the data path: the flow log is a bounded queue whose overflow is counted.
package telemetry

import (
	"errors"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"
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
	// JSONRPCID and Direction are set on Level 2 records, one per JSON-RPC message: the id as
	// sent (a string id keeps its quotes) and client_to_server or server_to_client.
	JSONRPCID  string `json:"jsonrpc_id"`
	Direction  string `json:"direction"`
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
	return t.appendJSON(make([]byte, 0, 32)), nil
}

func (t Time) appendJSON(b []byte) []byte {
	b = append(b, '"')
	b = t.UTC().AppendFormat(b, "2006-01-02T15:04:05.000Z07:00")
	return append(b, '"')
}

// AppendJSON appends r as encoding/json.Marshal encodes it, byte for byte (the same keys in the
// same order, omitempty as the struct tags say, the same string escaping: HTML-safe, U+2028 and
// U+2029 escaped, invalid UTF-8 as \ufffd), without reflection or allocation. The flow log writes
// one per request on the data path; TestFlowRecordEncoding and FuzzFlowRecordEncoding hold it
// to encoding/json's output. A field added to FlowRecord or Process must be added here too
// (TestFlowRecordEncodingEveryField fails until it is).
func (r *FlowRecord) AppendJSON(b []byte) []byte {
	b = append(b, `{"time":`...)
	b = r.Time.appendJSON(b)
	b = appendStringField(b, `,"flow":`, r.Flow)
	b = appendStringField(b, `,"client":`, r.Client)
	b = appendStringField(b, `,"orig_dst":`, r.OrigDst)
	b = appendStringField(b, `,"mechanism":`, r.Mechanism)
	b = appendStringField(b, `,"sni":`, r.SNI)
	b = appendStringField(b, `,"tls":`, r.TLS)
	b = strconv.AppendInt(append(b, `,"level":`...), int64(r.Level), 10)
	b = appendStringField(b, `,"http_method":`, r.HTTPMethod)
	b = appendStringField(b, `,"path":`, r.Path)
	b = strconv.AppendInt(append(b, `,"status":`...), int64(r.Status), 10)
	b = appendStringField(b, `,"mcp_version":`, r.MCPVersion)
	b = appendStringField(b, `,"mcp_method":`, r.MCPMethod)
	b = appendStringField(b, `,"mcp_name":`, r.MCPName)
	b = appendStringField(b, `,"jsonrpc_id":`, r.JSONRPCID)
	b = appendStringField(b, `,"direction":`, r.Direction)
	b = appendStringField(b, `,"decision":`, r.Decision)
	b = appendStringField(b, `,"rule":`, r.Rule)
	b = appendStringField(b, `,"reason":`, r.Reason)
	b = strconv.AppendInt(append(b, `,"bytes_up":`...), r.BytesUp, 10)
	b = strconv.AppendInt(append(b, `,"bytes_down":`...), r.BytesDown, 10)
	b = strconv.AppendInt(append(b, `,"duration_ms":`...), r.DurationMS, 10)
	if p := r.Process; p != nil {
		b = strconv.AppendUint(append(b, `,"process":{"pid":`...), uint64(p.PID), 10)
		b = strconv.AppendUint(append(b, `,"uid":`...), uint64(p.UID), 10)
		b = strconv.AppendUint(append(b, `,"gid":`...), uint64(p.GID), 10)
		b = appendStringField(b, `,"comm":`, p.Comm)
		if p.Exe != "" {
			b = appendStringField(b, `,"exe":`, p.Exe)
		}
		b = strconv.AppendUint(append(b, `,"cgroup":`...), p.Cgroup, 10)
		b = append(b, '}')
	}
	return append(b, '}')
}

func appendStringField(b []byte, key, s string) []byte {
	return appendJSONString(append(b, key...), s)
}

// jsonSafe marks the ASCII bytes encoding/json writes as they are (with HTML escaping, its
// default): everything from space up except '"', '\\', '<', '>' and '&'.
var jsonSafe = func() (t [utf8.RuneSelf]bool) {
	for c := ' '; c < utf8.RuneSelf; c++ {
		t[c] = true
	}
	for _, c := range `"\<>&` {
		t[c] = false
	}
	return t
}()

// appendJSONString is encoding/json's string encoder (appendString with escapeHTML).
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if jsonSafe[c] {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '\\', '"':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default: // other control bytes, and <, >, &
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xF])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// FlowLog writes records as JSON Lines to an io.Writer from its own goroutine, one write per line
// (so each line is flushed at once). Write never blocks: when the queue is full the record is
// dropped and counted, because a slow log consumer must not stall forwarding. When the writer is
// a Reopener (a RotatingFile), Reopen has the writer goroutine reopen it between two records.
type FlowLog struct {
	w       io.Writer
	q       chan FlowRecord
	reopen  chan chan error
	done    chan struct{}
	once    sync.Once
	log     *slog.Logger
	dropped func()
}

// Reopener is a flow log writer that can close and reopen its file (after logrotate renamed it).
type Reopener interface{ Reopen() error }

// ErrFlowLogClosed is Reopen's error once the flow log is closed.
var ErrFlowLogClosed = errors.New("flow log is closed")

// NewFlowLog starts the writer goroutine; Close stops it after writing what is queued.
// onDrop is called for every dropped record (a metric increment); it may be nil.
func NewFlowLog(w io.Writer, queue int, log *slog.Logger, onDrop func()) *FlowLog {
	if queue <= 0 {
		queue = 4096
	}
	if onDrop == nil {
		onDrop = func() {}
	}
	f := &FlowLog{w: w, q: make(chan FlowRecord, queue), reopen: make(chan chan error),
		done: make(chan struct{}), log: log, dropped: onDrop}
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

// Reopen has the writer goroutine reopen its file between two records and returns the result:
// the records queued before the call go to the old file, the later ones to the new file, none is
// lost or split. It
// blocks the caller (never Write) until the record being written is done; it is a no-op for a
// writer that is not a Reopener (stdout).
func (f *FlowLog) Reopen() error {
	if _, ok := f.w.(Reopener); !ok {
		return nil
	}
	req := make(chan error, 1)
	select {
	case f.reopen <- req:
		return <-req
	case <-f.done:
		return ErrFlowLogClosed
	}
}

func (f *FlowLog) run() {
	defer close(f.done)
	w := lineWriter{FlowLog: f, buf: make([]byte, 0, 1024)}
	for {
		select {
		case req := <-f.reopen:
			// What was queued before the reopen goes to the file it was logged into.
			for n := len(f.q); n > 0; n-- {
				w.write(<-f.q)
			}
			err := f.w.(Reopener).Reopen()
			if err == nil {
				w.failing = false
			}
			req <- err
		case r, ok := <-f.q:
			if !ok {
				return
			}
			w.write(r)
		}
	}
}

// lineWriter is the writer goroutine's state.
type lineWriter struct {
	*FlowLog
	buf     []byte
	failing bool
}

func (w *lineWriter) write(r FlowRecord) {
	w.buf = append(r.AppendJSON(w.buf[:0]), '\n')
	if _, err := w.w.Write(w.buf); err != nil {
		// Once per failure streak: a gone reader must not turn into a log flood.
		if !w.failing {
			w.log.Error("flow log: write failed; records are dropped until it works again", "err", err)
		}
		w.failing = true
		w.dropped()
		return
	}
	w.failing = false
}

// Close flushes the queue and stops the writer. Write must not be called after Close; the writer
// itself (a file) is the caller's to close, after Close.
func (f *FlowLog) Close() {
	f.once.Do(func() { close(f.q) })
	<-f.done
}
