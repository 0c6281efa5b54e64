package telemetry

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"sync"
)

// FlowLog writes records as JSON Lines to an io.Writer from its own goroutine. Write encodes the
// record on the caller's goroutine and appends the line to the pending batch; it never blocks:
// when queue records are already held (waiting, or in the batch being written) the record is
// dropped and counted, because a slow log consumer must not stall forwarding. The writer goroutine takes the whole batch at once and
// hands it to the io.Writer in one Write of whole lines, so a busy appliance pays one syscall for
// many records, and an idle one still has each line written as soon as it is made. When the
// writer is a Reopener (a RotatingFile), Reopen has the writer goroutine reopen it between two
// batches.
type FlowLog struct {
	w       io.Writer
	log     *slog.Logger
	dropped func()
	queue   int

	mu     sync.Mutex
	buf    []byte // lines not yet taken by the writer goroutine
	lines  int    // how many lines buf holds
	taken  int    // how many lines the writer goroutine is writing
	closed bool

	wake   chan struct{} // capacity 1: buf went from empty to not empty
	reopen chan chan error
	stop   chan struct{}
	done   chan struct{}
	once   sync.Once
}

// Reopener is a flow log writer that can close and reopen its file (after logrotate renamed it).
type Reopener interface{ Reopen() error }

// ErrFlowLogClosed is Reopen's error once the flow log is closed.
var ErrFlowLogClosed = errors.New("flow log is closed")

// minRetained is the batch buffer capacity always kept for reuse. A larger one is let go after
// shrinkAfter batches in a row that filled less than a quarter of it, so that one burst does not
// pin megabytes for the life of the process, while a load whose batches vary in size does not
// regrow it again and again (that cost more than encoding the records).
const (
	minRetained = 64 << 10
	shrinkAfter = 64
)

// NewFlowLog starts the writer goroutine; Close stops it after writing what is queued.
// queue bounds the records held, waiting or being written (4096 if queue <= 0). onDrop is called for every
// dropped record (a metric increment); it may be nil.
func NewFlowLog(w io.Writer, queue int, log *slog.Logger, onDrop func()) *FlowLog {
	if queue <= 0 {
		queue = 4096
	}
	if onDrop == nil {
		onDrop = func() {}
	}
	f := &FlowLog{w: w, log: log, dropped: onDrop, queue: queue,
		wake: make(chan struct{}, 1), reopen: make(chan chan error),
		stop: make(chan struct{}), done: make(chan struct{})}
	go f.run()
	return f
}

// Write queues a record without blocking.
func (f *FlowLog) Write(r FlowRecord) { f.append(&r) }

// Record implements Sink: the flow log takes records of every kind.
func (f *FlowLog) Record(_ Kind, r FlowRecord) { f.append(&r) }

// linePool holds the buffers records are encoded into before they join the batch: encoding
// outside the batch's lock keeps parallel writers from queueing behind each other's encoding.
var linePool = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// maxPooledLine keeps an unusually long record's buffer out of the pool.
const maxPooledLine = 16 << 10

func (f *FlowLog) append(r *FlowRecord) {
	bp := linePool.Get().(*[]byte)
	line := append(r.AppendJSON((*bp)[:0]), '\n')
	first, ok := f.push(line)
	if cap(line) <= maxPooledLine {
		*bp = line
		linePool.Put(bp)
	}
	if !ok {
		f.dropped()
		return
	}
	if first {
		// The goroutine that makes the batch non-empty wakes the writer; the later ones find the
		// wake-up pending (or the writer about to take their line with the batch).
		select {
		case f.wake <- struct{}{}:
		default:
		}
	}
}

// push adds line to the batch. It reports whether the batch was empty before, and false when the
// line was not taken (the queue is full, or the log is closed).
func (f *FlowLog) push(line []byte) (first, ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed || f.lines+f.taken >= f.queue {
		return false, false
	}
	f.buf = append(f.buf, line...)
	f.lines++
	return f.lines == 1, true
}

// take hands the batch to the writer goroutine and starts the next one in spare. Its lines count
// against the queue until written.
func (f *FlowLog) take(spare []byte) (batch []byte, lines int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	batch, lines = f.buf, f.lines
	f.buf, f.lines, f.taken = spare[:0], 0, lines
	return batch, lines
}

// written frees the queue the batch being written held.
func (f *FlowLog) written() {
	f.mu.Lock()
	f.taken = 0
	f.mu.Unlock()
}

// Reopen has the writer goroutine reopen its file between two batches and returns the result:
// the records queued before the call go to the old file, the later ones to the new file, none is
// lost or split. It blocks the caller (never Write) until the batch being written is done; it is
// a no-op for a writer that is not a Reopener (stdout).
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
	w := batchWriter{FlowLog: f}
	for {
		select {
		case <-f.wake:
			w.flush()
		case req := <-f.reopen:
			// What was queued before the reopen goes to the file it was logged into.
			w.flush()
			err := f.w.(Reopener).Reopen()
			if err == nil {
				w.failing = false
			}
			req <- err
		case <-f.stop:
			w.flush()
			return
		}
	}
}

// batchWriter is the writer goroutine's state.
type batchWriter struct {
	*FlowLog
	spare   []byte // the buffer the next batch is appended to
	small   int    // batches in a row that filled less than a quarter of their buffer
	failing bool
}

func (w *batchWriter) flush() {
	batch, lines := w.take(w.spare)
	if lines > 0 {
		w.write(batch, lines)
		w.written()
	}
	w.spare = w.retain(batch)
}

// retain is the buffer the next batch is to be appended to, once batch is written.
func (w *batchWriter) retain(batch []byte) []byte {
	if cap(batch) <= minRetained || len(batch) >= cap(batch)/4 {
		w.small = 0
		return batch
	}
	if w.small++; w.small < shrinkAfter {
		return batch
	}
	w.small = 0
	return nil
}

func (w *batchWriter) write(batch []byte, lines int) {
	n, err := w.w.Write(batch)
	if err == nil {
		w.failing = false
		return
	}
	// Once per failure streak: a gone reader must not turn into a log flood.
	if !w.failing {
		w.log.Error("flow log: write failed; records are dropped until it works again", "err", err)
	}
	w.failing = true
	for lost := lines - bytes.Count(batch[:n], []byte{'\n'}); lost > 0; lost-- {
		w.dropped()
	}
}

// Close flushes the queue and stops the writer. Records written after Close are dropped and
// counted; the writer itself (a file) is the caller's to close, after Close.
func (f *FlowLog) Close() {
	f.once.Do(func() {
		f.mu.Lock()
		f.closed = true
		f.mu.Unlock()
		close(f.stop)
	})
	<-f.done
}
