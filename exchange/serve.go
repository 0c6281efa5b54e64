package exchange

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Options tunes Serve. Zero values take the defaults.
type Options struct {
	Limits Limits
	// HeaderTimeout bounds how long a request head may take to complete after its first byte
	// (default 10s; negative disables). It is what keeps a slow sender from holding the reader.
	HeaderTimeout time.Duration
	// IdleTimeout closes a keep-alive connection that sends no new request for this long while
	// nothing is outstanding (0: none).
	IdleTimeout time.Duration
	// MaxDeniedBody is how much of a locally answered request's body is read and discarded to
	// keep the connection usable (default 1 MiB); beyond it the connection is closed.
	MaxDeniedBody int64
	// BodyTimeout bounds how long a request body may take to arrive in full, from the end of its
	// head (0: no bound). On expiry the exchange fails with "request body timeout" and the
	// connection is closed: part of the body may be upstream already, so it can be neither
	// finished nor refused. Response bodies are not bounded (an SSE stream lives as long as it
	// likes).
	BodyTimeout time.Duration
	// CloseUnsolicited closes the connection when the upstream sends bytes while no request is
	// outstanding, instead of passing them on. Bytes the client did not ask for answer no request
	// a stage could judge: a client reads them as the answer to its next request (net/http does),
	// so where messages are judged (Level 2) they must never be copied raw. Off, they are
	// forwarded as they came (Level 1 passes transport errors on, such as a 408 before an idle
	// close).
	CloseUnsolicited bool
}

// DefaultHeaderTimeout is Options.HeaderTimeout when it is 0.
const DefaultHeaderTimeout = 10 * time.Second

func (o Options) withDefaults() Options {
	o.Limits = o.Limits.withDefaults()
	if o.HeaderTimeout == 0 {
		o.HeaderTimeout = DefaultHeaderTimeout
	}
	if o.MaxDeniedBody <= 0 {
		o.MaxDeniedBody = 1 << 20
	}
	return o
}

const (
	// maxPipeline bounds the requests forwarded ahead of their responses; beyond it the client is
	// simply not read, which is TCP back-pressure rather than memory.
	maxPipeline = 64
	// lingerTime and lingerBytes bound how long and how much a connection is read after the last
	// response before closing it, so that unread request bytes do not turn the close into a reset
	// that destroys the response in flight (RFC 9112 §9.6).
	lingerTime  = 500 * time.Millisecond
	lingerBytes = 256 << 10
)

var errIdle = errors.New("idle timeout")

type proxy struct {
	ctx              context.Context
	client, upstream net.Conn
	cr, ur           *Reader
	stages           []Stage
	conn             ConnState
	o                Options
	log              *slog.Logger

	q           chan *Exchange
	done        chan struct{} // closed by stop
	reqLoopDone chan struct{}

	mu      sync.Mutex
	pending int  // entries queued or being answered
	reqDone bool // the request side will queue nothing more

	cur   *Exchange    // the request being forwarded, until queueCurrent queues it
	stash error        // an upstream error seen while idle, for the next response; response side only
	evbuf []byte       // an event framed as a chunk; response side only
	wv    writev       // writeTwo's scratch; response side only
	queue func() error // queueCurrent, as a value made once
	// idleSince is when the last response ended (unix nanoseconds): the idle timeout runs from it.
	idleSince atomic.Int64

	stopOnce   sync.Once
	finishOnce sync.Once
	stopping   atomic.Bool
	opaque     atomic.Int32 // directions finished after a protocol switch

	errMu sync.Mutex
	err   error // the first transport error; also set by the cancellation callback
}

// Serve serves one client connection already connected to its upstream: it reads the HTTP/1.x
// framing in both directions and runs stages over every exchange (see Stage), in order. What no
// stage changes is forwarded byte for byte; with no stage asking for a body, bodies are copied as
// they arrive, one write per read. A request a stage answers is answered in its turn, after the
// responses to the requests before it, and the connection stays usable when it can. Upstream
// transport errors reach the client as they happened: a reset as a reset, a close as a close,
// never a fabricated response. It returns when the connection is done, with the transport error
// that ended it, if any; it closes both connections.
func Serve(ctx context.Context, client, upstream net.Conn, stages []Stage, o Options, log *slog.Logger) error {
	o = o.withDefaults()
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	p := &proxy{
		ctx: ctx, client: client, upstream: upstream,
		cr: NewReader(client, o.Limits), ur: NewReader(upstream, o.Limits),
		stages: stages, o: o, log: log,
		q:           make(chan *Exchange, maxPipeline),
		done:        make(chan struct{}),
		reqLoopDone: make(chan struct{}),
	}
	p.queue = p.queueCurrent
	stopOnCancel := context.AfterFunc(ctx, func() {
		p.fail(ctx.Err())
		p.stop(false, false)
	})
	defer stopOnCancel()

	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer func() {
			// This goroutine is ours, not the caller's: a bug here (or in a stage) must end this
			// connection, not the process (and with it the host's steering).
			if r := recover(); r != nil {
				log.Error("exchange: response loop panicked", "panic", r)
				p.fail(fmt.Errorf("panic: %v", r))
				p.stop(true, true)
			}
		}()
		p.responseLoop()
	}()
	p.requestLoop()
	close(p.reqLoopDone)
	wg.Wait()
	p.stop(false, false)
	p.cr.discard()
	p.ur.discard()
	// Requests forwarded but never answered still get their Done.
	for {
		select {
		case x := <-p.q:
			x.respErr = "connection closed before the response"
			p.half(x)
		default:
			return p.firstErr()
		}
	}
}

func (p *proxy) newExchange(start time.Time, h *Head) *Exchange {
	x := &Exchange{Req: h, Start: start, conn: &p.conn, reqMax: -1, respMax: -1}
	x.vals = x.valInline[:0]
	if h != nil {
		x.method = h.Method
	}
	return x
}

func (p *proxy) fail(err error) {
	p.errMu.Lock()
	defer p.errMu.Unlock()
	if p.err == nil {
		p.err = err
	}
}

func (p *proxy) firstErr() error {
	p.errMu.Lock()
	defer p.errMu.Unlock()
	return p.err
}

// stop closes both connections once; a reset is passed on as a reset.
func (p *proxy) stop(resetClient, resetUpstream bool) {
	p.stopOnce.Do(func() {
		p.stopping.Store(true)
		close(p.done)
		if resetClient {
			setLinger0(p.client)
		}
		if resetUpstream {
			setLinger0(p.upstream)
		}
		p.client.Close()
		p.upstream.Close()
	})
}

// half marks one side of an exchange done; the second runs the stages' Done.
func (p *proxy) half(x *Exchange) {
	if x.halves.Add(1) != 2 {
		return
	}
	switch {
	case x.reqErr != "" && x.respErr != "":
		x.Err = x.reqErr + "; " + x.respErr
	case x.reqErr != "":
		x.Err = x.reqErr
	default:
		x.Err = x.respErr
	}
	for _, s := range p.stages {
		s.Done(x)
	}
}

// The hooks of every stage, in order, until one stops. A Stop without an answer or an abort is
// taken as an abort: the exchange cannot go on as if nothing had been decided.

func (p *proxy) requestHead(x *Exchange) bool {
	for _, s := range p.stages {
		if s.RequestHead(p.ctx, x) == Stop || x.stopped() {
			return x.stoppedBy("RequestHead")
		}
	}
	return false
}

func (p *proxy) requestBody(x *Exchange) bool {
	for _, s := range p.stages {
		if s.RequestBody(p.ctx, x) == Stop || x.stopped() {
			return x.stoppedBy("RequestBody")
		}
	}
	return false
}

func (p *proxy) responseHead(x *Exchange) bool {
	x.respSide = true
	for _, s := range p.stages {
		if s.ResponseHead(p.ctx, x) == Stop || x.aborted != "" {
			return x.stoppedBy("ResponseHead")
		}
	}
	return false
}

func (p *proxy) responseBody(x *Exchange) bool {
	for _, s := range p.stages {
		if s.ResponseBody(p.ctx, x) == Stop || x.aborted != "" {
			return x.stoppedBy("ResponseBody")
		}
	}
	return false
}

func (p *proxy) event(x *Exchange, ev *Event) bool {
	for _, s := range p.stages {
		if s.Event(p.ctx, x, ev) == Stop || x.aborted != "" {
			return x.stoppedBy("Event")
		}
	}
	return false
}

func (x *Exchange) stoppedBy(hook string) bool {
	if !x.stopped() || (x.respSide && x.aborted == "") {
		x.Abort("a stage stopped in " + hook + " without answering")
	}
	return true
}

// ---- request side: client → upstream ----

func (p *proxy) requestLoop() {
	for {
		if err := p.awaitRequest(); err != nil {
			p.clientEnded(err)
			return
		}
		start := time.Now()
		armed := false
		switch {
		case p.o.HeaderTimeout > 0 && !p.cr.headComplete():
			p.client.SetReadDeadline(start.Add(p.o.HeaderTimeout))
			armed = true
		case p.o.IdleTimeout > 0:
			p.client.SetReadDeadline(time.Time{})
		}
		h, err := p.cr.ReadRequestHead()
		if armed {
			p.client.SetReadDeadline(time.Time{})
		}
		if err != nil {
			p.badRequest(start, err)
			return
		}
		if !p.handle(start, h) {
			return
		}
	}
}

// awaitRequest waits for the first byte of the next request, under the idle timeout while nothing
// is outstanding.
func (p *proxy) awaitRequest() error {
	if p.cr.Buffered() > 0 {
		return nil
	}
	wait := p.o.IdleTimeout
	for {
		if wait > 0 {
			p.client.SetReadDeadline(time.Now().Add(wait))
		}
		err := p.cr.await(true)
		if err == nil {
			return nil
		}
		if wait > 0 && errors.Is(err, os.ErrDeadlineExceeded) && !p.stopping.Load() {
			p.mu.Lock()
			busy := p.pending > 0
			p.mu.Unlock()
			if busy {
				wait = p.o.IdleTimeout // a long response (an SSE stream) is still flowing
				continue
			}
			if wait = p.o.IdleTimeout - time.Since(time.Unix(0, p.idleSince.Load())); wait > 0 {
				continue // the last response ended after this wait began
			}
			return errIdle
		}
		return err
	}
}

// clientEnded handles the client's side ending between or inside requests.
func (p *proxy) clientEnded(err error) {
	switch {
	case p.stopping.Load():
	case err == io.EOF || err == io.ErrUnexpectedEOF:
		p.clientFIN()
	case isReset(err):
		p.fail(errors.New("client reset"))
		p.stop(false, true)
	case err == errIdle:
		p.log.LogAttrs(p.ctx, slog.LevelDebug, "closing idle connection")
		p.stop(false, false)
	default:
		p.stop(false, false)
	}
}

// clientFIN passes a client half-close on: the upstream gets a FIN, and responses still owed flow
// back before the connection is closed.
func (p *proxy) clientFIN() {
	p.mu.Lock()
	p.reqDone = true
	idle := p.pending == 0
	p.mu.Unlock()
	if idle {
		p.stop(false, false)
		return
	}
	closeWrite(p.upstream)
}

// badRequest answers a head that could not be read and ends the request side.
func (p *proxy) badRequest(start time.Time, err error) {
	var (
		status int
		reason string
		me     *MalformedError
	)
	switch {
	case p.stopping.Load():
		return
	case errors.Is(err, os.ErrDeadlineExceeded):
		status, reason = http.StatusRequestTimeout, "request header timeout"
	case errors.Is(err, ErrHeaderTooLarge):
		status, reason = http.StatusRequestHeaderFieldsTooLarge, "request header too large"
	case errors.As(err, &me):
		status, reason = http.StatusBadRequest, me.Error()
	default:
		p.clientEnded(err)
		return
	}
	p.log.LogAttrs(p.ctx, slog.LevelDebug, "refusing unreadable request",
		slog.Int("status", status), slog.String("reason", reason))
	x := p.newExchange(start, nil)
	x.reqErr = reason
	p.localAnswer(x, status, reason)
	p.half(x)
	p.refuse(x, x.answer.render("", true), true)
	p.endAfterRefusal()
}

// localAnswer is the exchange's own plain-text answer to a request it cannot forward.
func (p *proxy) localAnswer(x *Exchange, status int, reason string) {
	x.Answer(status, PlainTextHeaders, PlainText(reason),
		Verdict{Decision: Deny, Status: status, Reason: reason})
}

// handle runs the stages over one request and forwards it, answers it or aborts; false ends the
// request side.
func (p *proxy) handle(start time.Time, h *Head) bool {
	x := p.newExchange(start, h)
	if p.requestHead(x) {
		return p.requestStopped(x, h, nil)
	}
	if protos, upgrade := h.UpgradeProtocols(); upgrade {
		x.upgrade, x.protos = make(chan bool, 1), protos
	}
	if x.reqMax >= 0 {
		return p.inspectRequest(x, h)
	}
	head := h.Raw
	if len(x.reqEdits) > 0 {
		head = editHead(h.Raw, x.reqEdits)
	}
	p.cur = x // queued by queueCurrent just before its head goes out
	p.armBodyTimeout(h)
	n, err := p.cr.forward(p.upstream, h, head, p.queue)
	p.disarmBodyTimeout(h)
	queued := p.cur == nil
	p.cur = nil
	x.BytesUp = n
	if err != nil {
		if !queued {
			return p.failedBeforeForwarding(x, h, err)
		}
		return p.requestBodyFailed(x, err)
	}
	return p.forwarded(x)
}

// forwarded ends the request side of an exchange whose request went upstream in full; an
// Upgrade or CONNECT waits for the response side to say whether the connection switched.
func (p *proxy) forwarded(x *Exchange) bool {
	p.half(x)
	if x.upgrade != nil {
		select {
		case switched := <-x.upgrade:
			if switched {
				p.pipeOpaque(p.upstream, p.client, p.cr)
				return false
			}
		case <-p.done:
			return false
		}
	}
	return true
}

// queueCurrent puts the request being forwarded in the response queue; it runs just before the
// first byte of it goes upstream, so the response side always finds the exchange its response
// belongs to.
func (p *proxy) queueCurrent() error {
	x := p.cur
	if x == nil {
		return nil
	}
	p.cur = nil
	if !p.enqueue(x) {
		return errStopped
	}
	return nil
}

var errStopped = errors.New("connection closed")

// failedBeforeForwarding handles a request whose body failed before any byte of it went upstream:
// bad chunk framing in the bytes already read is still this proxy's to answer with a 400.
func (p *proxy) failedBeforeForwarding(x *Exchange, h *Head, err error) bool {
	var me *MalformedError
	status := http.StatusBadRequest
	timeout := errors.Is(err, os.ErrDeadlineExceeded)
	if timeout {
		status = http.StatusRequestTimeout
	}
	if !p.stopping.Load() && (timeout || errors.As(err, &me) || errors.Is(err, ErrHeaderTooLarge)) {
		reason := err.Error()
		if timeout {
			reason = errBodyTimeout.Error()
		}
		p.localAnswer(x, status, reason)
		x.reqErr = reason
		x.BytesUp = int64(len(h.Raw))
		p.half(x)
		p.refuse(x, x.answer.render(h.Method, true), true)
		p.endAfterRefusal()
		return false
	}
	x.respErr = "not forwarded"
	p.half(x)
	return p.requestBodyFailed(x, err)
}

// armBodyTimeout bounds the time the request body of h may take (Options.BodyTimeout).
func (p *proxy) armBodyTimeout(h *Head) {
	if p.o.BodyTimeout > 0 && !h.NoBody {
		p.client.SetReadDeadline(time.Now().Add(p.o.BodyTimeout))
	}
}

func (p *proxy) disarmBodyTimeout(h *Head) {
	if p.o.BodyTimeout > 0 && !h.NoBody {
		p.client.SetReadDeadline(time.Time{})
	}
}

var errBodyTimeout = errors.New("request body timeout")

// requestStopped handles a request a stage answered or aborted. body is what was read of its
// body for the stages (nil when nothing was).
func (p *proxy) requestStopped(x *Exchange, h *Head, body []byte) bool {
	bodyRead := body != nil
	if x.answer == nil {
		// Aborted: nothing is forwarded; the connection closes once what is owed before this
		// request has been written.
		p.log.LogAttrs(p.ctx, slog.LevelDebug, "request aborted by a stage", slog.String("reason", x.aborted))
		x.reqErr = x.aborted
		x.BytesUp = int64(len(h.Raw) + len(body))
		p.half(x)
		p.refuse(x, nil, true)
		p.endAfterRefusal()
		return false
	}
	return p.refuseRequest(x, h, bodyRead, int64(len(body)))
}

// refuseRequest answers a well-framed request locally and discards its body (unless the stages
// read it already), keeping the connection usable; false ends the request side.
func (p *proxy) refuseRequest(x *Exchange, h *Head, bodyRead bool, bodyLen int64) bool {
	v := x.Verdict
	// A client waiting for 100-continue sends no body once refused, so the body cannot be
	// discarded to find the next request; close instead, as servers do.
	expect, _ := h.Get("Expect")
	closeAfter := h.Close || (!bodyRead && !h.NoBody && equalFold(expect, "100-continue"))
	p.log.LogAttrs(p.ctx, slog.LevelDebug, "answering request locally",
		slog.String("decision", string(v.Decision)), slog.Int("status", x.Status), slog.String("rule", v.Rule),
		slog.String("method", h.Method))
	// The answer goes first: a client may wait for it before sending the rest of its body.
	p.refuse(x, x.answer.render(h.Method, closeAfter), closeAfter)
	if closeAfter || bodyRead {
		x.BytesUp = int64(len(h.Raw)) + bodyLen
		p.half(x)
		if closeAfter {
			p.endAfterRefusal()
			return false
		}
		return true
	}
	return p.discardBody(x, h)
}

// discardBody reads and drops the body of a request answered locally, up to MaxDeniedBody.
func (p *proxy) discardBody(x *Exchange, h *Head) bool {
	d := discardUpTo{left: p.o.MaxDeniedBody}
	p.armBodyTimeout(h)
	n, err := p.cr.CopyBody(&d, h)
	p.disarmBodyTimeout(h)
	x.BytesUp = int64(len(h.Raw)) + n
	if err != nil {
		var we *WriteError
		if errors.As(err, &we) {
			x.reqErr = "refused request body too large"
			p.half(x)
			p.endAfterRefusal()
			return false
		}
		return p.requestBodyFailed(x, err)
	}
	p.half(x)
	return true
}

// inspectRequest reads the request body for the stages that asked for it, runs their
// RequestBody hooks, and forwards the request in one write: byte for byte when no stage changed
// it, re-framed with Content-Length when one replaced the body.
func (p *proxy) inspectRequest(x *Exchange, h *Head) bool {
	max := x.reqMax
	if h.ContentLength > max {
		return p.requestTooLarge(x, h, max)
	}
	if !h.NoBody {
		if expect, _ := h.Get("Expect"); equalFold(expect, "100-continue") {
			p.sendContinue()
		}
	}
	var (
		raw, body []byte
		refused   bool
		discarded int64
	)
	p.armBodyTimeout(h)
	n, err := p.cr.walk(h, func(r, d []byte) error {
		if refused {
			if discarded += int64(len(r)); discarded > p.o.MaxDeniedBody {
				return errTooLarge
			}
			return nil
		}
		raw = append(raw, r...)
		if h.Chunked {
			body = append(body, d...)
		} else {
			body = raw
		}
		if int64(len(body)) > max {
			// Over the bound halfway through a chunked body: answer now, discard the rest.
			refused, raw, body = true, nil, nil
			p.bodyTooLargeAnswer(x, h, max, false)
		}
		return nil
	})
	p.disarmBodyTimeout(h)
	if refused {
		x.BytesUp = int64(len(h.Raw)) + n
		switch {
		case errors.Is(err, errTooLarge):
			x.reqErr = "refused request body too large"
		case err != nil:
			return p.requestBodyFailed(x, err)
		}
		p.half(x)
		if err != nil {
			p.endAfterRefusal()
			return false
		}
		return true
	}
	if err != nil {
		return p.failedBeforeForwarding(x, h, err)
	}
	if body == nil {
		body = []byte{}
	}
	x.reqBody = body
	if p.requestBody(x) {
		return p.requestStopped(x, h, body)
	}
	head := h.Raw
	if len(x.reqEdits) > 0 {
		head = editHead(h.Raw, x.reqEdits)
	}
	if x.reqBodySet {
		hh := *h
		hh.Raw = head
		head, raw = Reframe(&hh, x.reqBody, false), nil
	}
	if !p.enqueue(x) {
		x.reqErr, x.respErr = "connection closed", "not forwarded"
		p.half(x)
		p.half(x)
		return false
	}
	w, err := writeTwo(p.upstream, head, raw, &p.cr.wv)
	x.BytesUp = int64(w)
	if err != nil {
		return p.requestBodyFailed(x, &WriteError{Err: err})
	}
	return p.forwarded(x)
}

// requestTooLarge answers 413 to a request whose Content-Length is over the bound, and discards
// its body as for any local answer.
func (p *proxy) requestTooLarge(x *Exchange, h *Head, max int64) bool {
	p.bodyTooLargeAnswer(x, h, max, true)
	return p.refuseRequest(x, h, false, 0)
}

func (p *proxy) bodyTooLargeAnswer(x *Exchange, h *Head, max int64, renderLater bool) {
	reason := "request body over " + strconv.FormatInt(max, 10) + " bytes"
	p.localAnswer(x, http.StatusRequestEntityTooLarge, reason)
	if !renderLater {
		p.refuse(x, x.answer.render(h.Method, false), false)
	}
}

// sendContinue tells a client waiting for 100-continue to send its body, which the stages need
// before the request can go upstream. Only when nothing is owed before it: an interim response
// must not cut into another one.
func (p *proxy) sendContinue() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pending == 0 {
		p.client.Write(continue100)
	}
}

var continue100 = []byte("HTTP/1.1 100 Continue\r\n\r\n")

// refuse writes a local answer now if nothing is owed before it, else queues it for its turn. An
// empty local is an abort: nothing is written.
func (p *proxy) refuse(x *Exchange, local []byte, closeAfter bool) {
	x.local, x.localSet = local, true
	x.BytesDown = int64(len(local))
	p.mu.Lock()
	if p.pending > 0 {
		p.pending++
		p.mu.Unlock()
		if !p.push(x) {
			x.respErr = "connection closed"
			p.half(x)
		}
		return
	}
	var err error
	if len(local) > 0 {
		_, err = p.client.Write(local)
	}
	p.mu.Unlock()
	x.Duration = time.Since(x.Start)
	if err != nil {
		x.respErr = "client write failed"
		p.stop(false, false)
	}
	p.half(x)
}

// endAfterRefusal stops reading requests after a refusal that closes the connection; the
// response side closes it once everything owed before the refusal has been written.
func (p *proxy) endAfterRefusal() {
	p.mu.Lock()
	p.reqDone = true
	idle := p.pending == 0
	p.mu.Unlock()
	if idle {
		p.finish()
	}
}

func (p *proxy) enqueue(x *Exchange) bool {
	p.mu.Lock()
	p.pending++
	p.mu.Unlock()
	return p.push(x)
}

func (p *proxy) push(x *Exchange) bool {
	select {
	case p.q <- x:
		return true
	case <-p.done:
		return false
	}
}

func (p *proxy) upstreamWriteFailed(err error) {
	if p.stopping.Load() {
		return
	}
	if isReset(err) {
		// The write consumed the reset; the response side would only see EOF.
		p.fail(errors.New("upstream reset"))
		p.stop(true, false)
		return
	}
	// The response side sees the upstream end and passes it on; nothing more is sent.
	p.mu.Lock()
	p.reqDone = true
	p.mu.Unlock()
}

// requestBodyFailed ends the request side after its body could not be forwarded.
func (p *proxy) requestBodyFailed(x *Exchange, err error) bool {
	var (
		we *WriteError
		me *MalformedError
	)
	switch {
	case p.stopping.Load():
		x.reqErr = "connection closed"
	case errors.As(err, &we):
		x.reqErr = "upstream write failed"
		defer p.upstreamWriteFailed(we.Err)
	case errors.Is(err, os.ErrDeadlineExceeded):
		// Only the body timeout sets a deadline while a body is read. Part of the body may be
		// upstream: the message can be neither finished nor refused, so the connection ends.
		x.reqErr = errBodyTimeout.Error()
		p.fail(errBodyTimeout)
		defer p.stop(false, false)
	case err == io.ErrUnexpectedEOF:
		x.reqErr = "client closed mid-request"
		defer p.clientFIN()
	case isReset(err):
		x.reqErr = "client reset"
		defer p.clientEnded(err)
	case errors.As(err, &me), errors.Is(err, ErrHeaderTooLarge):
		// Part of the body is already upstream; the message cannot be finished or refused.
		x.reqErr = "malformed request body: " + err.Error()
		defer p.stop(false, false)
	default:
		x.reqErr = err.Error()
		defer p.stop(false, false)
	}
	p.half(x)
	return false
}

// ---- response side: upstream → client ----

func (p *proxy) responseLoop() {
	for {
		e := p.next()
		if e == nil {
			return
		}
		more := p.respond(e)
		p.mu.Lock()
		p.pending--
		last := p.pending == 0 && p.reqDone
		if p.pending == 0 && p.o.IdleTimeout > 0 {
			p.idleSince.Store(time.Now().UnixNano())
		}
		p.mu.Unlock()
		if !more {
			return
		}
		if last {
			p.finish()
			return
		}
	}
}

// next returns the next entry to answer, or nil when the connection is done.
func (p *proxy) next() *Exchange {
	for {
		p.mu.Lock()
		n, reqDone := p.pending, p.reqDone
		p.mu.Unlock()
		if n > 0 {
			select {
			case e := <-p.q:
				return e
			case <-p.done:
				return nil
			}
		}
		if reqDone {
			p.finish()
			return nil
		}
		// Nothing is owed: watch the upstream anyway, so that its idle close reaches the client
		// now, as it would without the proxy, rather than failing the client's next request.
		err := p.ur.await(true)
		if p.stopping.Load() {
			return nil
		}
		p.mu.Lock()
		n = p.pending
		p.mu.Unlock()
		if n > 0 {
			// Bytes (or an end) that came after a request was forwarded belong to its response.
			p.stash = err
			continue
		}
		if err != nil {
			p.upstreamEnded(err)
			return nil
		}
		p.forwardUnsolicited()
	}
}

// upstreamEnded passes on an upstream end seen while nothing was owed.
func (p *proxy) upstreamEnded(err error) {
	if isReset(err) {
		p.fail(errors.New("upstream reset"))
		p.stop(true, false)
		return
	}
	p.closeClientGently()
}

// forwardUnsolicited passes on bytes the upstream sent with no request outstanding (typically a
// 408 before it closes an idle connection): they are not this proxy's to drop. With
// CloseUnsolicited they are not passed on: the connection is closed and the error recorded.
func (p *proxy) forwardUnsolicited() {
	p.mu.Lock()
	if p.pending > 0 {
		// A request was forwarded meanwhile: the bytes are its response's.
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	if p.o.CloseUnsolicited {
		n := p.ur.br.Buffered()
		p.log.LogAttrs(p.ctx, slog.LevelWarn, "upstream sent bytes with no request outstanding; closing the connection, nothing forwarded",
			slog.Int("bytes", n))
		p.fail(ErrUnsolicited)
		p.stop(false, false)
		return
	}
	p.log.LogAttrs(p.ctx, slog.LevelDebug, "upstream sent bytes with no request outstanding")
	p.mu.Lock()
	defer p.mu.Unlock()
	b, _ := p.ur.br.Peek(p.ur.br.Buffered())
	if _, err := p.client.Write(b); err != nil {
		p.stop(false, false)
	}
	p.ur.br.Discard(len(b))
}

// respond writes the answer to x; false ends the response side.
func (p *proxy) respond(x *Exchange) (more bool) {
	if x.localSet {
		var err error
		if len(x.local) > 0 {
			_, err = p.client.Write(x.local)
		}
		x.Duration = time.Since(x.Start)
		if err != nil {
			x.respErr = "client write failed"
			p.half(x)
			p.stop(false, false)
			return false
		}
		p.half(x)
		return true
	}
	var down int64
	for {
		h, err := p.readResponseHead(x.method)
		if err != nil {
			if b := p.ur.partial; len(b) > 0 && err == io.ErrUnexpectedEOF {
				// Cut short by the upstream: the client gets what was sent, then the same end.
				if _, werr := p.client.Write(b); werr == nil {
					down += int64(len(b))
				}
			}
			p.responseFailed(x, down, err)
			return false
		}
		if h.Status < 200 && h.Status != 101 {
			// 100-continue and other interim responses precede the final one.
			if _, err := p.client.Write(h.Raw); err != nil {
				p.responseFailed(x, down, &WriteError{Err: err})
				return false
			}
			down += int64(len(h.Raw))
			continue
		}
		x.Resp, x.Status = h, h.Status
		if p.responseHead(x) {
			return p.responseAborted(x, down)
		}
		head := h.Raw
		if len(x.respEdits) > 0 {
			head = editHead(h.Raw, x.respEdits)
		}
		if h.NoBody {
			if _, err := p.client.Write(head); err != nil {
				p.responseFailed(x, down, &WriteError{Err: err})
				return false
			}
			down += int64(len(head))
		}
		if h.Upgrade {
			return p.upgraded(x, h, down)
		}
		if !h.NoBody {
			var n int64
			switch {
			case x.maxEvent > 0:
				n, err = p.streamEvents(x, h, head)
			case x.respMax >= 0:
				n, err = p.inspectResponse(x, h, head)
			default:
				n, err = p.ur.forward(p.client, h, head, nil)
			}
			down += n
			if err == errAborted {
				return p.responseAborted(x, down)
			}
			if err != nil {
				p.responseFailed(x, down, err)
				return false
			}
		}
		x.BytesDown = down
		x.Duration = time.Since(x.Start)
		x.switched(false)
		p.half(x)
		if h.Close || x.closeAfter {
			// The server ends the connection after this response; so does the client's side.
			p.closeClientGently()
			return false
		}
		return true
	}
}

// upgraded hands the connection over to an opaque copy after a 101 (or a 2xx to CONNECT) the
// request asked for.
func (p *proxy) upgraded(x *Exchange, h *Head, down int64) bool {
	x.BytesDown = down
	x.Duration = time.Since(x.Start)
	proto, asked := "", false
	if x.upgrade != nil {
		proto, asked = switchedTo(h, x.protos)
	}
	if !asked {
		// The server switched protocols nobody asked for (or to one other than asked for); the
		// request side would go on parsing the new protocol as HTTP, or an unjudged protocol
		// would pass.
		p.log.LogAttrs(p.ctx, slog.LevelWarn, "upstream switched protocols unasked", slog.String("protocol", proto))
		x.respErr = "upstream switched protocols unasked"
		p.half(x)
		p.stop(false, false)
		return false
	}
	x.Upgraded = proto
	p.half(x)
	x.switched(true)
	p.pipeOpaque(p.client, p.upstream, p.ur)
	return false
}

// errAborted is returned by a body walk whose Event or ResponseBody hook aborted.
var errAborted = errors.New("aborted by a stage")

// responseAborted ends the connection at once: a stage aborted the response (the client gets
// nothing more of it).
func (p *proxy) responseAborted(x *Exchange, down int64) bool {
	p.log.LogAttrs(p.ctx, slog.LevelDebug, "response aborted by a stage", slog.String("reason", x.aborted))
	x.switched(false)
	x.BytesDown = down
	x.Duration = time.Since(x.Start)
	x.respErr = x.aborted
	p.half(x)
	p.stop(false, false)
	return false
}

// inspectResponse reads the response body for the stages that asked for it, runs their
// ResponseBody hooks, and writes the response in one write: byte for byte when no stage changed
// it, re-framed with Content-Length when one replaced the body. Over the bound it closes, or
// forwards the rest uninspected (Overflow). It returns the bytes written.
func (p *proxy) inspectResponse(x *Exchange, h *Head, head []byte) (int64, error) {
	var (
		raw, body  []byte
		forwarding bool
		written    int64
		max        = x.respMax
	)
	_, err := p.ur.walk(h, func(r, d []byte) error {
		if forwarding {
			n, err := p.client.Write(r)
			written += int64(n)
			if err != nil {
				return &WriteError{Err: err}
			}
			return nil
		}
		raw = append(raw, r...)
		if h.Chunked {
			body = append(body, d...)
		} else {
			body = raw
		}
		if int64(len(body)) <= max {
			return nil
		}
		if x.overflow == OverflowClose {
			return errOverflow
		}
		x.Uninspected = "response body over " + strconv.FormatInt(max, 10) + " bytes forwarded uninspected"
		forwarding = true
		n, err := writeTwo(p.client, head, raw, &p.wv)
		written += int64(n)
		raw, body = nil, nil
		if err != nil {
			return &WriteError{Err: err}
		}
		return nil
	})
	switch {
	case err == errOverflow:
		x.Abort("response body over " + strconv.FormatInt(max, 10) + " bytes; connection closed")
		return written, errAborted
	case err != nil, forwarding:
		return written, err
	}
	if body == nil {
		body = []byte{}
	}
	x.respBody = body
	if p.responseBody(x) {
		return written, errAborted
	}
	if x.respBodySet {
		hh := *h
		hh.Raw = head
		head, raw = Reframe(&hh, x.respBody, false), nil
	}
	n, err := writeTwo(p.client, head, raw, &p.wv)
	written += int64(n)
	if err != nil {
		return written, &WriteError{Err: err}
	}
	return written, nil
}

var errOverflow = errors.New("body over its bound")

// streamEvents forwards a text/event-stream response event by event: the head at once, then
// every event as soon as its blank line has arrived, after the stages' Event hooks, in one write
// of its own (its exact bytes unless a stage replaced it). A chunked stream is re-framed one
// chunk per event; a stream framed by Content-Length, whose length a replaced event would
// change, is forwarded close-delimited instead. It returns the bytes written.
func (p *proxy) streamEvents(x *Exchange, h *Head, head []byte) (int64, error) {
	if !h.Chunked && !h.CloseDelimited {
		head = editHead(head, []headerEdit{{name: "Content-Length", del: true}, {name: "Connection", value: "close"}})
		x.closeAfter = true
	}
	var written int64
	if _, err := p.client.Write(head); err != nil {
		return 0, &WriteError{Err: err}
	}
	written += int64(len(head))
	parser := NewSSEParser(x.maxEvent)
	emit := func(b []byte) error {
		n, err := p.writeEvent(b, h.Chunked)
		written += int64(n)
		if err != nil {
			return &WriteError{Err: err}
		}
		return nil
	}
	_, err := p.ur.walk(h, func(_, d []byte) error {
		evs, perr := parser.Feed(d)
		for i := range evs {
			ev := &evs[i]
			if p.event(x, ev) {
				return errAborted
			}
			if ev.dropped || len(ev.Out()) == 0 {
				continue
			}
			if err := emit(ev.Out()); err != nil {
				return err
			}
		}
		if perr == nil && parser.TakeSplitLF() {
			if err := emit(lf); err != nil {
				return err
			}
		}
		if perr != nil {
			x.Abort("SSE event over " + strconv.Itoa(x.maxEvent) + " bytes; connection closed")
			return errAborted
		}
		return nil
	})
	if err != nil {
		return written, err
	}
	// What is left of an unterminated block is the server's: it goes out as it came, but judged
	// first. A WHATWG reader discards it, the Go SDK's reader dispatches it (its scanner yields
	// the event at EOF): the stages see it as the block it would be with its blank line.
	if rest := parser.Pending(); len(rest) > 0 {
		rest = append([]byte(nil), rest...)
		var evs []Event
		for i := 0; i < 3 && len(evs) == 0; i++ {
			evs, _ = parser.Feed(lf)
		}
		for i := range evs {
			ev := &evs[i]
			if p.event(x, ev) {
				return written, errAborted
			}
			out := rest
			switch {
			case ev.dropped:
				out = nil
			case ev.replaced:
				out = ev.Out()
			}
			if len(out) > 0 {
				if err := emit(out); err != nil {
					return written, err
				}
			}
			rest = nil
		}
	}
	if h.Chunked {
		n, err := p.client.Write(lastChunk)
		written += int64(n)
		if err != nil {
			return written, &WriteError{Err: err}
		}
	}
	return written, nil
}

var (
	lastChunk = []byte("0\r\n\r\n")
	lf        = []byte("\n")
)

// writeEvent writes one event in one write, as a chunk of its own when chunked.
func (p *proxy) writeEvent(b []byte, chunked bool) (int, error) {
	if !chunked {
		return p.client.Write(b)
	}
	buf := strconv.AppendInt(p.evbuf[:0], int64(len(b)), 16)
	buf = append(buf, "\r\n"...)
	buf = append(buf, b...)
	buf = append(buf, "\r\n"...)
	if cap(buf) <= 64<<10 {
		p.evbuf = buf[:0]
	} else {
		p.evbuf = nil
	}
	return p.client.Write(buf)
}

func (p *proxy) readResponseHead(method string) (*Head, error) {
	if err := p.stash; err != nil {
		p.stash = nil
		if p.ur.Buffered() == 0 {
			return nil, err
		}
	}
	return p.ur.ReadResponseHead(method)
}

// responseFailed records why e's response did not complete and passes the failure on as it
// happened: a reset as a reset, an end as an end, never a made-up response.
func (p *proxy) responseFailed(x *Exchange, down int64, err error) {
	x.switched(false)
	x.BytesDown = down
	x.Duration = time.Since(x.Start)
	var (
		we *WriteError
		me *MalformedError
	)
	switch {
	case p.stopping.Load():
		x.respErr = "connection closed"
	case errors.As(err, &we):
		x.respErr = "client write failed"
		p.stop(false, false)
	case isReset(err):
		x.respErr = "upstream reset"
		p.fail(errors.New("upstream reset"))
		p.stop(true, false)
	case err == io.EOF && down == 0:
		x.respErr = "upstream closed before responding"
		p.fail(errors.New(x.respErr))
		p.closeClientGently()
	case err == io.EOF || err == io.ErrUnexpectedEOF:
		x.respErr = "upstream closed mid-response"
		p.fail(errors.New(x.respErr))
		p.closeClientGently()
	case errors.As(err, &me), errors.Is(err, ErrHeaderTooLarge):
		x.respErr = "malformed upstream response: " + err.Error()
		p.log.LogAttrs(p.ctx, slog.LevelWarn, "malformed upstream response", slog.String("error", err.Error()))
		p.fail(errors.New(x.respErr))
		p.stop(false, false)
	default:
		x.respErr = err.Error()
		p.fail(err)
		p.stop(false, false)
	}
	p.half(x)
}

// closeClientGently ends the client connection the way the upstream ended its own: a FIN after
// the last byte, then a short wait for the request side to see the client close, so unread
// client bytes do not turn the FIN into a reset.
func (p *proxy) closeClientGently() {
	if closeWrite(p.client) {
		t := time.NewTimer(lingerTime)
		select {
		case <-p.reqLoopDone:
		case <-p.done:
		case <-t.C:
		}
		t.Stop()
	}
	p.stop(false, false)
}

// finish closes the connection once the request side has stopped and nothing more is owed. Both
// sides may get there; the first does it.
func (p *proxy) finish() {
	p.finishOnce.Do(func() {
		p.lingerClose()
		p.stop(false, false)
	})
}

// lingerClose half-closes the client and reads what it still sends for a moment, so the last
// response is not lost to a reset (RFC 9112 §9.6). Only called once the request side has stopped
// reading.
func (p *proxy) lingerClose() {
	if p.stopping.Load() || !closeWrite(p.client) {
		return
	}
	p.client.SetReadDeadline(time.Now().Add(lingerTime))
	io.CopyN(io.Discard, p.cr.b(), lingerBytes)
}

// pipeOpaque copies one direction after a protocol switch: first what the HTTP reader had
// already buffered, then the connection itself. The proxy stops once both directions are done.
func (p *proxy) pipeOpaque(dst, src net.Conn, r *Reader) {
	var err error
	if n := r.Buffered(); n > 0 {
		b, _ := r.br.Peek(n)
		_, err = dst.Write(b)
		r.br.Discard(n)
	}
	r.release()
	if r.src.n > 0 { // cannot happen after a Peek, which hands the byte on; kept for safety
		_, err = dst.Write(r.src.one[:1])
		r.src.n = 0
	}
	if err == nil {
		_, err = io.Copy(dst, src)
	}
	switch {
	case p.stopping.Load():
	case err == nil:
		if !closeWrite(dst) {
			p.stop(false, false)
		}
	case isReset(err):
		p.stop(dst == p.client, dst == p.upstream)
	default:
		p.stop(false, false)
	}
	if p.opaque.Add(1) == 2 {
		p.stop(false, false)
	}
}

// discardUpTo swallows a refused body, failing once it exceeds the allowance.
type discardUpTo struct{ left int64 }

var errTooLarge = errors.New("refused body too large")

func (d *discardUpTo) Write(b []byte) (int, error) {
	if int64(len(b)) > d.left {
		return 0, errTooLarge
	}
	d.left -= int64(len(b))
	return len(b), nil
}

func isReset(err error) bool { return errors.Is(err, syscall.ECONNRESET) }

func closeWrite(c net.Conn) bool {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite() == nil
	}
	return false
}

func setLinger0(c net.Conn) {
	if l, ok := c.(interface{ SetLinger(int) error }); ok {
		l.SetLinger(0)
	}
}
