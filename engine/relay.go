package engine

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"mcpintercept/telemetry"
)

// idleWatch closes a flow once no direction moved a byte for the idle timeout. last is updated by
// whoever moves bytes; the timer re-arms itself for the remaining time, so an active flow costs
// one timer wake-up per idle period.
type idleWatch struct{ t *time.Timer }

func newIdleWatch(idle time.Duration, last *atomic.Int64, onIdle func()) *idleWatch {
	w := &idleWatch{}
	if idle <= 0 {
		return w
	}
	var check func()
	check = func() {
		since := time.Since(time.Unix(0, last.Load()))
		if since >= idle {
			onIdle()
			return
		}
		w.t.Reset(idle - since)
	}
	w.t = time.AfterFunc(idle, check)
	return w
}

func (w *idleWatch) stop() {
	if w.t != nil {
		w.t.Stop()
	}
}

// watchIdle closes both sides of a flow that cannot splice once neither moved a byte for idle:
// last is the activity time their flowconn wrappers keep. stop must be called when the flow ends;
// idled reports whether the watch fired.
func watchIdle(idle time.Duration, last *atomic.Int64, client, upstream net.Conn) (idled func() bool, stop func()) {
	var fired atomic.Bool
	last.Store(time.Now().UnixNano())
	w := newIdleWatch(idle, last, func() {
		fired.Store(true)
		client.Close()
		upstream.Close()
	})
	return fired.Load, w.stop
}

// flowConns lets Drain abort a flow from outside its goroutine.
type flowConns struct {
	mu       sync.Mutex
	client   *net.TCPConn
	upstream *net.TCPConn
	aborted  bool
}

func (f *flowConns) setUpstream(up *net.TCPConn) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.aborted {
		return false
	}
	f.upstream = up
	return true
}

func (f *flowConns) abort() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.aborted = true
	f.client.Close()
	if f.upstream != nil {
		f.upstream.Close()
	}
}

type relayResult struct {
	up, down int64
	idle     bool // closed by the idle timeout
	reset    bool // a side reset the connection; the other side was reset too
	aborted  bool // closed by shutdown
}

func (r relayResult) reason() string {
	switch {
	case r.aborted:
		return "shutdown"
	case r.idle:
		return "idle timeout"
	case r.reset:
		return "reset"
	}
	return ""
}

// relay forwards both directions until both have ended. A FIN one way becomes CloseWrite on the
// other connection, leaving the reverse direction open (half-close). A reset one way is passed on
// as a reset. io.Copy between two *net.TCPConn uses splice(2) on Linux, so payload bytes never
// enter user space.
//
// Idle timeout without giving up splice: each direction copies under a read deadline of one
// "slice"; when it fires the copy returns with the bytes it moved, which marks activity, and the
// copy resumes. A read-deadline timeout only happens while nothing is buffered, so no byte is lost.
// A watchdog closes both connections once no direction moved a byte for the idle timeout.
func relay(client, upstream *net.TCPConn, idle time.Duration, fc *flowConns, head *headTap) relayResult {
	var res relayResult
	var last atomic.Int64
	last.Store(time.Now().UnixNano())
	var idled, resetSeen atomic.Bool
	slice := idleSlice(idle)

	w := newIdleWatch(idle, &last, func() {
		idled.Store(true)
		client.Close()
		upstream.Close()
	})
	defer w.stop()

	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		res.down = pipe(client, upstream, slice, &last, &resetSeen)
	}()
	if head != nil {
		// The client's first bytes through user space (each read forwarded at once), then
		// splice as usual.
		n, done := head.pipe(upstream, client, slice, &last, &resetSeen)
		res.up = n
		if !done {
			res.up += pipe(upstream, client, slice, &last, &resetSeen)
		}
	} else {
		res.up = pipe(upstream, client, slice, &last, &resetSeen)
	}
	wg.Wait()
	client.Close()
	upstream.Close()

	res.idle = idled.Load()
	res.reset = resetSeen.Load()
	fc.mu.Lock()
	res.aborted = fc.aborted
	fc.mu.Unlock()
	return res
}

func idleSlice(idle time.Duration) time.Duration {
	if idle <= 0 {
		return 0
	}
	return min(max(idle/4, 10*time.Millisecond), 30*time.Second)
}

// pipe copies src to dst until src ends, then half-closes dst. It returns the bytes copied.
func pipe(dst, src *net.TCPConn, slice time.Duration, last *atomic.Int64, resetSeen *atomic.Bool) int64 {
	var total int64
	for {
		if slice > 0 {
			src.SetReadDeadline(time.Now().Add(slice))
		}
		n, err := io.Copy(dst, src)
		total += n
		if n > 0 {
			last.Store(time.Now().UnixNano())
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			continue
		}
		endPipe(dst, src, err, resetSeen)
		return total
	}
}

// endPipe ends one direction after its copy returned err: nil or io.EOF (src's FIN) half-closes
// dst, keeping the other direction open; a reset is passed on as a reset; anything else (closed
// by the watchdog, by Drain, or by the other direction; a write error) closes both.
func endPipe(dst, src *net.TCPConn, err error, resetSeen *atomic.Bool) {
	switch {
	case err == nil || err == io.EOF:
		dst.CloseWrite()
	case errors.Is(err, syscall.ECONNRESET):
		// Pass a reset on as a reset; the peer must not mistake it for a clean end.
		resetSeen.Store(true)
		dst.SetLinger(0)
		dst.Close()
		src.Close()
	default:
		dst.Close()
		src.Close()
	}
}

// HeadObserver is shown the first bytes a client sent on a flow forwarded opaque whose opening
// was not a TLS ClientHello (Options.OpaqueHead: the inventory recognises MCP there). Every byte
// is forwarded before the observer sees it, so it delays nothing; it runs on the flow's goroutine
// and must be quick.
type HeadObserver interface {
	// More reports whether head (what the client sent so far, at most OpaqueHeadMax bytes) is
	// worth the next read too: the engine reads at most opaqueHeadReads times.
	More(head []byte) bool
	// Head is shown what was read (head is the engine's: not to be kept); rec gives the flow's
	// record, with TLS set to plaintext.
	Head(rec func() telemetry.FlowRecord, head []byte)
}

// OpaqueHeadMax bounds the bytes a HeadObserver is shown; opaqueHeadReads the reads that fill
// them.
const (
	OpaqueHeadMax   = 4096
	opaqueHeadReads = 4
)

// headFirst is the buffer of the first read: a flow whose client is slow to speak holds only
// this much while it waits; the full OpaqueHeadMax buffer is taken when the observer wants more.
const headFirst = 512

var (
	headBufs      = sync.Pool{New: func() any { b := make([]byte, OpaqueHeadMax); return &b }}
	headFirstBufs = sync.Pool{New: func() any { b := make([]byte, headFirst); return &b }}
)

// headTap is the first bytes' trip through user space on an opaque flow.
type headTap struct {
	prefix []byte // bytes the peek read, forwarded already
	obs    HeadObserver
	rec    func() telemetry.FlowRecord
}

// pipe forwards the client's first bytes read by read (each written before the next is read),
// while the observer wants more and at most OpaqueHeadMax of them (the peek's included), then
// shows them to the observer. n is the bytes it forwarded; done says src ended or failed, as pipe
// ends it.
func (h *headTap) pipe(dst, src *net.TCPConn, slice time.Duration, last *atomic.Int64, resetSeen *atomic.Bool) (n int64, done bool) {
	small := headFirstBufs.Get().(*[]byte)
	defer headFirstBufs.Put(small)
	var big *[]byte
	defer func() {
		if big != nil {
			headBufs.Put(big)
		}
	}()
	buf := (*small)[:0]
	if len(h.prefix) > headFirst {
		big = headBufs.Get().(*[]byte)
		buf = (*big)[:0]
	}
	buf = append(buf, h.prefix[:min(len(h.prefix), OpaqueHeadMax)]...)
	defer func() { // before the buffers go back
		if len(buf) > 0 {
			h.obs.Head(h.rec, buf)
		}
	}()
	for reads := 0; reads < opaqueHeadReads && len(buf) < OpaqueHeadMax && (len(buf) == 0 || h.obs.More(buf)); {
		if len(buf) == cap(buf) && big == nil {
			big = headBufs.Get().(*[]byte)
			buf = append((*big)[:0], buf...)
		}
		if slice > 0 {
			src.SetReadDeadline(time.Now().Add(slice))
		}
		m, err := src.Read(buf[len(buf):cap(buf)])
		if m > 0 {
			reads++
			if _, werr := dst.Write(buf[len(buf) : len(buf)+m]); werr != nil {
				endPipe(dst, src, werr, resetSeen)
				return n, true
			}
			buf = buf[:len(buf)+m]
			n += int64(m)
			last.Store(time.Now().UnixNano())
		}
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				continue
			}
			endPipe(dst, src, err, resetSeen)
			return n, true
		}
	}
	return n, false
}
