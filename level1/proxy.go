package level1

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

// Verdict actions.
const (
	ActionAllow       = "allow"
	ActionDeny        = "deny"
	ActionRateLimited = "rate_limited"
)

// Verdict is a Decider's answer for one request. Level 1 can only let a request through untouched
// or refuse it with an HTTP status; it never answers on the server's behalf.
type Verdict struct {
	Action     string        // ActionAllow, ActionDeny or ActionRateLimited; "" is allow
	Status     int           // refusal status; 0 means 403 (deny) or 429 (rate_limited); 400 for strict-mode refusals
	Reason     string        // short plain text for the response body and the log
	Rule       string        // the rule that decided
	RetryAfter time.Duration // for 429
}

// Decider is the header policy. It is called on the request's own goroutine, in order, once per
// request; a nil Decider allows everything.
type Decider interface {
	Decide(ctx context.Context, info *RequestInfo) Verdict
}

// Exchange describes one HTTP request and its response, for the flow log.
type Exchange struct {
	Info    *RequestInfo
	Verdict Verdict
	// Status is the final response status: the local one when refused, 0 if the upstream never
	// answered.
	Status             int
	BytesUp, BytesDown int64 // raw bytes of the request and response, heads included
	Start              time.Time
	Duration           time.Duration // request head read → response end
	Err                string        // transport error, if any
	// Upgraded is the protocol the connection switched to after this exchange ("websocket", or
	// "connect" after a 2xx to CONNECT), allowed by Options.AllowUpgrade; "" when it did not
	// switch. Nothing after a switch is HTTP, so this record is the last of its connection.
	Upgraded string
}

// Recorder receives every Exchange once both its request and its response have ended (or it was
// refused, or the connection ended under it). It may be called from two goroutines of one Proxy,
// and must not block the data path: hand the record off.
type Recorder interface {
	Record(ex *Exchange)
}

// Options tunes Proxy. Zero values take the defaults.
type Options struct {
	Limits Limits
	// HeaderTimeout bounds how long a request head may take to complete after its first byte
	// (default 10s; negative disables). It is what keeps a slow sender from holding the reader.
	HeaderTimeout time.Duration
	// IdleTimeout closes a keep-alive connection that sends no new request for this long while
	// nothing is outstanding (0: none).
	IdleTimeout time.Duration
	// MaxDeniedBody is how much of a refused request's body is read and discarded to keep the
	// connection usable (default 1 MiB); beyond it the connection is closed.
	MaxDeniedBody int64
	// BodyTimeout bounds how long a request body may take to arrive in full, from the end of its
	// head (0: no bound). On expiry the exchange fails with "request body timeout" and the
	// connection is closed: part of the body is already upstream, so it can be neither finished
	// nor refused. Response bodies are not bounded (an SSE stream lives as long as it likes).
	BodyTimeout time.Duration
	// AllowUpgrade lists the protocols (lower-case Upgrade tokens; "connect" for CONNECT) a
	// request may switch the connection to. Any other Upgrade or CONNECT is refused with 403
	// before it reaches the upstream: after a switch nothing can be judged. h2c is refused even
	// when listed, and so is a request carrying HTTP2-Settings or the HTTP/2 connection preface.
	AllowUpgrade []string
	// StrictMCPHeaders refuses with 400, before the Decider runs: a JSON POST or MCP request
	// without Mcp-Method; a request whose MCP-Protocol-Version is malformed or older than
	// MinTrustedMCPVersion (its server does not check the headers against the body, so a policy on
	// them can be lied to); and a request repeating an Mcp-* header.
	StrictMCPHeaders bool
	// ExpectedHost, when set, is the server name the connection was opened for (a terminated
	// flow's SNI, or its destination address without one). A request whose Host (or absolute-form
	// target) names another host is refused with 421 Misdirected Request; an HTTP/1.1 request
	// without Host gets 400.
	ExpectedHost string
}

func (o Options) withDefaults() Options {
	o.Limits = o.Limits.withDefaults()
	if o.HeaderTimeout == 0 {
		o.HeaderTimeout = 10 * time.Second
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

// entry is one request in the ordered queue from the request side to the response side.
type entry struct {
	ex     Exchange
	method string
	// local, when set, is a refusal written in this entry's turn instead of reading the upstream.
	local []byte
	// upgrade is set for allowed Upgrade and CONNECT requests: the response side reports whether
	// the connection switched to an opaque stream. protos is what the request asked for.
	upgrade         chan bool
	protos          []string
	signaled        bool   // upgrade answered; response side only
	reqErr, respErr string // written by their own side only
	halves          atomic.Int32
}

type proxy struct {
	ctx              context.Context
	client, upstream net.Conn
	cr, ur           *Reader
	d                Decider
	rec              Recorder
	o                Options
	log              *slog.Logger

	q           chan *entry
	done        chan struct{} // closed by stop
	reqLoopDone chan struct{}

	mu      sync.Mutex
	pending int  // entries queued or being answered
	reqDone bool // the request side will queue nothing more

	session sessionMemo // request side only
	cur     *entry      // the request being forwarded, until beforeHead queues it
	stash   error       // an upstream error seen while idle, for the next response; response side only
	// idleSince is when the last response ended (unix nanoseconds): the idle timeout runs from it.
	idleSince atomic.Int64

	stopOnce   sync.Once
	finishOnce sync.Once
	stopping   atomic.Bool
	opaque     atomic.Int32 // directions finished after a protocol switch

	errMu sync.Mutex
	err   error // the first transport error; also set by the cancellation callback
}

// Proxy serves one client connection already connected to its upstream, forwarding every byte
// unmodified in both directions while reading the HTTP/1.x framing to apply d to each request. A
// refused request is answered locally with 403/429/400 in its turn, after the responses to the
// requests before it, and the connection stays usable. Upstream transport errors reach the client
// as they happened: a reset as a reset, a close as a close, never a fabricated response. It
// returns when the connection is done, with the transport error that ended it, if any; it closes
// both connections.
func Proxy(ctx context.Context, client, upstream net.Conn, d Decider, rec Recorder, o Options, log *slog.Logger) error {
	o = o.withDefaults()
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	p := &proxy{
		ctx: ctx, client: client, upstream: upstream,
		cr: NewReader(client, o.Limits), ur: NewReader(upstream, o.Limits),
		d: d, rec: rec, o: o, log: log,
		q:           make(chan *entry, maxPipeline),
		done:        make(chan struct{}),
		reqLoopDone: make(chan struct{}),
	}
	p.cr.beforeHead = p.queueCurrent
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
			// This goroutine is ours, not the caller's: a bug here must end this connection,
			// not the process (and with it the host's steering).
			if r := recover(); r != nil {
				log.Error("level1: response loop panicked", "panic", r)
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
	// Requests forwarded but never answered still get their record.
	for {
		select {
		case e := <-p.q:
			e.respErr = "connection closed before the response"
			p.half(e)
		default:
			return p.firstErr()
		}
	}
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

// half marks one side of an exchange done; the second records it.
func (p *proxy) half(e *entry) {
	if e.halves.Add(1) != 2 {
		return
	}
	switch {
	case e.reqErr != "" && e.respErr != "":
		e.ex.Err = e.reqErr + "; " + e.respErr
	case e.reqErr != "":
		e.ex.Err = e.reqErr
	default:
		e.ex.Err = e.respErr
	}
	if p.rec != nil {
		p.rec.Record(&e.ex)
	}
}

// switched tells the request side, once, whether the connection became an opaque stream.
func (e *entry) switched(ok bool) {
	if e.upgrade != nil && !e.signaled {
		e.signaled = true
		e.upgrade <- ok
	}
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
	e := &entry{ex: Exchange{
		Info:    &RequestInfo{Kind: KindHTTP},
		Verdict: Verdict{Action: ActionDeny, Status: status, Reason: reason},
		Start:   start,
	}}
	e.reqErr = reason
	p.half(e)
	p.refuse(e, "", status, reason, 0, true)
	p.endAfterRefusal()
}

// handle forwards or refuses one request; false ends the request side.
func (p *proxy) handle(start time.Time, h *Head) bool {
	info := classify(h, &p.session)
	protos, upgrade := upgradeRequest(h)
	v := p.check(h, info, protos, upgrade)
	e := &entry{method: h.Method, ex: Exchange{Info: info, Verdict: v, Start: start}}
	if v.Action != ActionAllow {
		return p.refuseRequest(e, h)
	}
	if upgrade {
		e.upgrade, e.protos = make(chan bool, 1), protos
	}
	p.cur = e // queued by queueCurrent just before its head goes out
	p.armBodyTimeout(h)
	n, err := p.cr.forward(p.upstream, h)
	p.disarmBodyTimeout(h)
	queued := p.cur == nil
	p.cur = nil
	e.ex.BytesUp = n
	if err != nil {
		if !queued {
			return p.failedBeforeForwarding(e, h, err)
		}
		return p.requestBodyFailed(e, err)
	}
	p.half(e)
	if e.upgrade != nil {
		select {
		case switched := <-e.upgrade:
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
// first byte of it goes upstream, so the response side always finds the entry its response
// belongs to.
func (p *proxy) queueCurrent() error {
	e := p.cur
	if e == nil {
		return nil
	}
	p.cur = nil
	if !p.enqueue(e) {
		return errStopped
	}
	return nil
}

var errStopped = errors.New("connection closed")

// failedBeforeForwarding handles a request whose body failed before any byte of it went upstream:
// bad chunk framing in the bytes already read is still this proxy's to answer with a 400.
func (p *proxy) failedBeforeForwarding(e *entry, h *Head, err error) bool {
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
		e.ex.Verdict = Verdict{Action: ActionDeny, Status: status, Reason: reason}
		e.reqErr = reason
		e.ex.BytesUp = int64(len(h.Raw))
		p.half(e)
		p.refuse(e, h.Method, status, reason, 0, true)
		p.endAfterRefusal()
		return false
	}
	e.respErr = "not forwarded"
	p.half(e)
	return p.requestBodyFailed(e, err)
}

// check runs the checks that do not depend on policy, then the Decider: a protocol switch the
// route does not allow, a Host that is not the connection's, an unreadable MCP header, and the
// strict-header rules.
func (p *proxy) check(h *Head, info *RequestInfo, protos []string, upgrade bool) Verdict {
	if upgrade {
		if v, ok := upgradeVerdict(protos, p.o.AllowUpgrade); !ok {
			return v
		}
	}
	if p.o.ExpectedHost != "" {
		if v, ok := hostVerdict(h, p.o.ExpectedHost); !ok {
			return v
		}
	}
	if info.Err == nil && p.o.StrictMCPHeaders {
		if v, ok := strictVerdict(h, info); !ok {
			return v
		}
	}
	return p.decide(info)
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

func (p *proxy) decide(info *RequestInfo) Verdict {
	if info.Err != nil {
		// An MCP header this proxy cannot read could carry a name policy would refuse.
		return Verdict{Action: ActionDeny, Status: http.StatusBadRequest, Reason: "invalid MCP header: " + info.Err.Error()}
	}
	if p.d == nil {
		return Verdict{Action: ActionAllow}
	}
	v := p.d.Decide(p.ctx, info)
	switch v.Action {
	case "":
		v.Action = ActionAllow
	case ActionAllow:
	case ActionRateLimited:
		if v.Status < 400 || v.Status > 599 {
			v.Status = http.StatusTooManyRequests
		}
	default: // deny, and anything unknown: fail closed
		if v.Status < 400 || v.Status > 599 {
			v.Status = http.StatusForbidden
		}
	}
	return v
}

// refuseRequest answers a well-framed request locally and discards its body, keeping the
// connection usable; false ends the request side.
func (p *proxy) refuseRequest(e *entry, h *Head) bool {
	v := e.ex.Verdict
	// A client waiting for 100-continue sends no body once refused, so the body cannot be
	// discarded to find the next request; close instead, as servers do.
	expect, _ := h.Get("Expect")
	closeAfter := h.Close || (!h.NoBody && equalFold(expect, "100-continue"))
	p.log.LogAttrs(p.ctx, slog.LevelDebug, "refusing request",
		slog.String("action", v.Action), slog.Int("status", v.Status), slog.String("rule", v.Rule),
		slog.String("method", e.ex.Info.Method), slog.String("path", e.ex.Info.Path),
		slog.String("mcp_method", e.ex.Info.MCPMethod))
	// The answer goes first: a client may wait for it before sending the rest of its body.
	p.refuse(e, h.Method, v.Status, v.Reason, v.RetryAfter, closeAfter)
	if closeAfter {
		e.ex.BytesUp = int64(len(h.Raw))
		p.half(e)
		p.endAfterRefusal()
		return false
	}
	d := discardUpTo{left: p.o.MaxDeniedBody}
	p.armBodyTimeout(h)
	n, err := p.cr.CopyBody(&d, h)
	p.disarmBodyTimeout(h)
	e.ex.BytesUp = int64(len(h.Raw)) + n
	if err != nil {
		var we *WriteError
		if errors.As(err, &we) {
			e.reqErr = "refused request body too large"
			p.half(e)
			p.endAfterRefusal()
			return false
		}
		return p.requestBodyFailed(e, err)
	}
	p.half(e)
	return true
}

// refuse writes the local response now if nothing is owed before it, else queues it for its turn.
func (p *proxy) refuse(e *entry, method string, status int, reason string, retry time.Duration, closeAfter bool) {
	e.local = localResponse(method, status, reason, retry, closeAfter)
	e.ex.Status = status
	e.ex.BytesDown = int64(len(e.local))
	p.mu.Lock()
	if p.pending > 0 {
		p.pending++
		p.mu.Unlock()
		if !p.push(e) {
			e.respErr = "connection closed"
			p.half(e)
		}
		return
	}
	_, err := p.client.Write(e.local)
	p.mu.Unlock()
	e.ex.Duration = time.Since(e.ex.Start)
	if err != nil {
		e.respErr = "client write failed"
		p.stop(false, false)
	}
	p.half(e)
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

func (p *proxy) enqueue(e *entry) bool {
	p.mu.Lock()
	p.pending++
	p.mu.Unlock()
	return p.push(e)
}

func (p *proxy) push(e *entry) bool {
	select {
	case p.q <- e:
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
func (p *proxy) requestBodyFailed(e *entry, err error) bool {
	var (
		we *WriteError
		me *MalformedError
	)
	switch {
	case p.stopping.Load():
		e.reqErr = "connection closed"
	case errors.As(err, &we):
		e.reqErr = "upstream write failed"
		defer p.upstreamWriteFailed(we.Err)
	case errors.Is(err, os.ErrDeadlineExceeded):
		// Only the body timeout sets a deadline while a body is read. Part of the body may be
		// upstream: the message can be neither finished nor refused, so the connection ends.
		e.reqErr = errBodyTimeout.Error()
		p.fail(errBodyTimeout)
		defer p.stop(false, false)
	case err == io.ErrUnexpectedEOF:
		e.reqErr = "client closed mid-request"
		defer p.clientFIN()
	case isReset(err):
		e.reqErr = "client reset"
		defer p.clientEnded(err)
	case errors.As(err, &me), errors.Is(err, ErrHeaderTooLarge):
		// Part of the body is already upstream; the message cannot be finished or refused.
		e.reqErr = "malformed request body: " + err.Error()
		defer p.stop(false, false)
	default:
		e.reqErr = err.Error()
		defer p.stop(false, false)
	}
	p.half(e)
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
func (p *proxy) next() *entry {
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
// 408 before it closes an idle connection): they are not this proxy's to drop.
func (p *proxy) forwardUnsolicited() {
	p.log.LogAttrs(p.ctx, slog.LevelDebug, "upstream sent bytes with no request outstanding")
	p.mu.Lock()
	defer p.mu.Unlock()
	b, _ := p.ur.br.Peek(p.ur.br.Buffered())
	if _, err := p.client.Write(b); err != nil {
		p.stop(false, false)
	}
	p.ur.br.Discard(len(b))
}

// respond writes the answer to e; false ends the response side.
func (p *proxy) respond(e *entry) (more bool) {
	if e.local != nil {
		_, err := p.client.Write(e.local)
		e.ex.Duration = time.Since(e.ex.Start)
		if err != nil {
			e.respErr = "client write failed"
			p.half(e)
			p.stop(false, false)
			return false
		}
		p.half(e)
		return true
	}
	var down int64
	for {
		h, err := p.readResponseHead(e.method)
		if err != nil {
			if b := p.ur.partial; len(b) > 0 && err == io.ErrUnexpectedEOF {
				// Cut short by the upstream: the client gets what was sent, then the same end.
				if _, werr := p.client.Write(b); werr == nil {
					down += int64(len(b))
				}
			}
			p.responseFailed(e, down, err)
			return false
		}
		if h.NoBody {
			if _, err := p.client.Write(h.Raw); err != nil {
				p.responseFailed(e, down, &WriteError{Err: err})
				return false
			}
			down += int64(len(h.Raw))
		}
		if h.Status < 200 && h.Status != 101 {
			continue // 100-continue and other interim responses precede the final one
		}
		e.ex.Status = h.Status
		if h.Upgrade {
			e.ex.BytesDown = down
			e.ex.Duration = time.Since(e.ex.Start)
			proto, asked := "", false
			if e.upgrade != nil {
				proto, asked = switchedTo(h, e.protos)
			}
			if !asked {
				// The server switched protocols nobody asked for (or to one other than asked
				// for); the request side would go on parsing the new protocol as HTTP, or an
				// unjudged protocol would pass.
				p.log.LogAttrs(p.ctx, slog.LevelWarn, "upstream switched protocols unasked", slog.String("protocol", proto))
				e.respErr = "upstream switched protocols unasked"
				p.half(e)
				p.stop(false, false)
				return false
			}
			e.ex.Upgraded = proto
			p.half(e)
			e.switched(true)
			p.pipeOpaque(p.client, p.upstream, p.ur)
			return false
		}
		if !h.NoBody {
			n, err := p.ur.forward(p.client, h)
			down += n
			if err != nil {
				p.responseFailed(e, down, err)
				return false
			}
		}
		e.ex.BytesDown = down
		e.ex.Duration = time.Since(e.ex.Start)
		e.switched(false)
		p.half(e)
		if h.Close {
			// The server ends the connection after this response; so does the client's side.
			p.closeClientGently()
			return false
		}
		return true
	}
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
func (p *proxy) responseFailed(e *entry, down int64, err error) {
	e.switched(false)
	e.ex.BytesDown = down
	e.ex.Duration = time.Since(e.ex.Start)
	var (
		we *WriteError
		me *MalformedError
	)
	switch {
	case p.stopping.Load():
		e.respErr = "connection closed"
	case errors.As(err, &we):
		e.respErr = "client write failed"
		p.stop(false, false)
	case isReset(err):
		e.respErr = "upstream reset"
		p.fail(errors.New("upstream reset"))
		p.stop(true, false)
	case err == io.EOF && down == 0:
		e.respErr = "upstream closed before responding"
		p.fail(errors.New(e.respErr))
		p.closeClientGently()
	case err == io.EOF || err == io.ErrUnexpectedEOF:
		e.respErr = "upstream closed mid-response"
		p.fail(errors.New(e.respErr))
		p.closeClientGently()
	case errors.As(err, &me), errors.Is(err, ErrHeaderTooLarge):
		e.respErr = "malformed upstream response: " + err.Error()
		p.log.LogAttrs(p.ctx, slog.LevelWarn, "malformed upstream response", slog.String("error", err.Error()))
		p.fail(errors.New(e.respErr))
		p.stop(false, false)
	default:
		e.respErr = err.Error()
		p.fail(err)
		p.stop(false, false)
	}
	p.half(e)
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

// localResponse builds a refusal: plain text naming the intermediary, never a JSON-RPC body.
func localResponse(method string, status int, reason string, retry time.Duration, closeAfter bool) []byte {
	if reason == "" {
		reason = "request refused"
	}
	bodyLen := len("mcpintercept: ") + len(reason) + 1
	b := make([]byte, 0, 160+bodyLen)
	b = append(b, "HTTP/1.1 "...)
	b = strconv.AppendInt(b, int64(status), 10)
	b = append(b, ' ')
	b = append(b, http.StatusText(status)...)
	b = append(b, "\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: "...)
	b = strconv.AppendInt(b, int64(bodyLen), 10)
	b = append(b, "\r\n"...)
	if status == http.StatusTooManyRequests {
		secs := int64((retry + time.Second - 1) / time.Second)
		b = append(b, "Retry-After: "...)
		b = strconv.AppendInt(b, max(secs, 1), 10)
		b = append(b, "\r\n"...)
	}
	if closeAfter {
		b = append(b, "Connection: close\r\n"...)
	}
	b = append(b, "\r\n"...)
	if method == "HEAD" {
		return b // a HEAD response carries no body, whatever its Content-Length says
	}
	b = append(b, "mcpintercept: "...)
	for i := 0; i < len(reason); i++ {
		c := reason[i]
		if c < ' ' || c == 0x7f {
			c = ' '
		}
		b = append(b, c)
	}
	return append(b, '\n')
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
