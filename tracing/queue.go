//go:build !notracing

package tracing

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// queueProcessor is the batching in front of the OTLP exporter. The SDK's BatchSpanProcessor
// drops spans silently when its queue is full (it keeps the count to itself), so this one does
// the same batching with a counted drop: enqueue offers the ended span to a bounded
// channel without waiting, and a full channel is one more dropped span. A single goroutine
// drains the channel into batches of maxBatch, exported when a batch fills or interval passes;
// while an export is in flight (a slow or dead receiver) nothing else is read, so the channel
// fills and further spans are dropped: the data path never waits for the exporter. The spans of
// an export that fails (a receiver that refuses connections, answers an error, or times out after
// the exporter's retries) are lost too, and counted with the dropped ones; after a failure,
// exports pause (1s, doubling to 30s while they keep failing) and the spans ended meanwhile are
// dropped at enqueue, so a collector that is down costs the data path less than one that is up
// (no batch is encoded for nothing).
type queueProcessor struct {
	exp      exporter
	enc      *encoder // the run goroutine's
	body     []byte   // the run goroutine's: the request being exported
	q        chan *Span
	maxBatch int
	interval time.Duration
	drop     func(n int) // counts n dropped spans
	log      *slog.Logger

	flushReq chan chan struct{}
	stop     chan struct{}
	done     chan struct{}
	stopped  atomic.Bool
	once     sync.Once

	// base is the context of every export; cancelled when Shutdown's ctx ends first, so that a
	// hung export does not outlive it.
	base   context.Context
	cancel context.CancelFunc

	lastErr atomic.Int64 // unix nanos of the last export error logged

	now        func() time.Time // the clock of the pause (tests replace it)
	pauseUntil atomic.Int64     // unix nanos until which spans are dropped at enqueue
	backoff    time.Duration    // the run goroutine's: the current pause
}

// Bounds of the pause after a failed export.
// maxKeptBody is the largest encoded-batch buffer the queue keeps for the next batch.
const maxKeptBody = 4 << 20

const (
	minPause = time.Second
	maxPause = 30 * time.Second
)

func (p *queueProcessor) paused() bool {
	u := p.pauseUntil.Load()
	return u != 0 && p.now().UnixNano() < u
}

func newQueueProcessor(exp exporter, enc *encoder, maxQueue, maxBatch int, interval time.Duration, drop func(n int), log *slog.Logger) *queueProcessor {
	base, cancel := context.WithCancel(context.Background())
	p := &queueProcessor{
		exp: exp, enc: enc, q: make(chan *Span, maxQueue), maxBatch: maxBatch,
		interval: interval, drop: drop, log: log,
		flushReq: make(chan chan struct{}), stop: make(chan struct{}), done: make(chan struct{}),
		base: base, cancel: cancel, now: time.Now,
	}
	go p.run()
	return p
}

// enqueue queues an ended sampled span, or counts it dropped when the queue is full. It never
// blocks.
func (p *queueProcessor) enqueue(s *Span) {
	if p.stopped.Load() {
		return
	}
	if p.paused() {
		p.drop(1)
		return
	}
	select {
	case p.q <- s:
	default:
		p.drop(1)
	}
}

func (p *queueProcessor) run() {
	defer close(p.done)
	batch := make([]*Span, 0, p.maxBatch)
	timer := time.NewTimer(p.interval)
	defer timer.Stop()
	export := func() {
		if len(batch) == 0 {
			return
		}
		if p.paused() { // queued before the failure: not tried while paused
			p.drop(len(batch))
			clear(batch)
			batch = batch[:0]
			return
		}
		p.body = p.enc.encode(p.body[:0], batch)
		switch err := p.exp.Export(p.base, p.body); {
		case err != nil:
			// A failed export's transport may still read its body after Export returned (a gRPC
			// frame queued past the deadline, an HTTP/2 body still being written): the next batch
			// gets a new buffer rather than overwriting bytes in flight.
			p.body = nil
			p.drop(len(batch))
			p.logErr(err, len(batch))
			p.backoff = min(max(2*p.backoff, minPause), maxPause)
			p.pauseUntil.Store(p.now().Add(p.backoff).UnixNano())
		default:
			p.backoff = 0
			p.pauseUntil.Store(0)
		}
		clear(batch)
		batch = batch[:0]
		if cap(p.body) > maxKeptBody {
			p.body = nil // one burst of large spans does not pin its buffer for the process's life
		}
	}
	drain := func() {
		for {
			select {
			case s := <-p.q:
				batch = append(batch, s)
				if len(batch) >= p.maxBatch {
					export()
				}
			default:
				export()
				return
			}
		}
	}
	for {
		select {
		case s := <-p.q:
			batch = append(batch, s)
			if len(batch) >= p.maxBatch {
				export()
			}
		case <-timer.C:
			export()
			timer.Reset(p.interval)
		case ch := <-p.flushReq:
			drain()
			close(ch)
		case <-p.stop:
			drain()
			return
		}
	}
}

// logErr logs a failed export at most once a minute; the error names the receiver, never the
// headers.
func (p *queueProcessor) logErr(err error, n int) {
	if p.log == nil || errors.Is(err, context.Canceled) {
		return
	}
	now := time.Now().UnixNano()
	last := p.lastErr.Load()
	if now-last < int64(time.Minute) || !p.lastErr.CompareAndSwap(last, now) {
		return
	}
	p.log.Warn("otlp span export failed", "spans", n, "err", err)
}

// ForceFlush exports what is queued, waiting at most until ctx ends.
func (p *queueProcessor) ForceFlush(ctx context.Context) error {
	if p.stopped.Load() {
		return nil
	}
	ch := make(chan struct{})
	select {
	case p.flushReq <- ch:
	case <-p.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Shutdown exports what is queued and stops; an export still running when ctx ends is
// cancelled.
func (p *queueProcessor) Shutdown(ctx context.Context) error {
	var err error
	p.once.Do(func() {
		p.stopped.Store(true)
		close(p.stop)
		select {
		case <-p.done:
		case <-ctx.Done():
			p.cancel()
			<-p.done
			err = ctx.Err()
		}
		p.cancel()
		if e := p.exp.Shutdown(ctx); err == nil {
			err = e
		}
	})
	return err
}
