package exchange

import (
	"bytes"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Exchange is one HTTP request and its response as the stages see it: the heads as received, the
// bodies and events a stage asked for, what the stages decided, and what happened on the wire.
// Serve creates one per request head read (and one for a head it could not read), runs the stages
// over it, and hands it to every stage's Done once both directions have ended.
//
// Req and Resp are the heads as received and must not be modified (edit them with the Set/Del
// methods, which change what is forwarded, not the Head). The other exported fields are filled by
// Serve; a stage writes only Verdict (a stage that lets a request through may still record why).
type Exchange struct {
	// Req is the request head; nil for the record of a request whose head could not be read.
	Req *Head
	// Resp is the final response head, nil until it has been read (and when it never was).
	Resp *Head
	// Start is when the request head began to arrive; Duration runs from it to the response's
	// end.
	Start    time.Time
	Duration time.Duration
	// Status is the final response status: the local one when answered locally, 0 if the
	// upstream never answered.
	Status int
	// BytesUp and BytesDown are the bytes of the request and the response written to the peer
	// (read and discarded, for a request answered locally), heads included.
	BytesUp, BytesDown int64
	// Upgraded is the protocol the connection switched to after this exchange ("websocket", or
	// "connect" after a 2xx to CONNECT); "" when it did not switch. Nothing after a switch is
	// HTTP, so this exchange is the last of its connection.
	Upgraded string
	// Err is the transport error or abort that ended the exchange, if any.
	Err string
	// Verdict is what the stages decided, for the record.
	Verdict Verdict
	// Uninspected says why part of the exchange was forwarded without a stage seeing it (a
	// response body over its bound with OverflowForward); "" when nothing was.
	Uninspected string

	conn      *ConnState
	vals      []keyVal
	valInline [4]keyVal // vals' first backing: most exchanges keep a value or two

	// What the stages asked for and changed. The request fields are touched by request hooks
	// only, the response fields by response hooks only.
	reqMax      int64 // -1: no stage asked for the request body
	reqBody     []byte
	reqBodySet  bool
	reqEdits    []headerEdit
	respMax     int64 // -1: no stage asked for the response body
	overflow    Overflow
	respBody    []byte
	respBodySet bool
	respEdits   []headerEdit
	maxEvent    int // 0: no stage asked for events
	answer      *answer
	aborted     string
	respSide    bool // response hooks have begun: Answer is no longer possible
	closeAfter  bool // the response was re-framed to run to the connection's close

	// The ordered queue from the request side to the response side.
	method string
	// local, when set, is the answer written in this exchange's turn instead of reading the
	// upstream; localSet with an empty local is an abort (nothing written, then closed).
	local    []byte
	localSet bool
	// upgrade is set for Upgrade and CONNECT requests that went upstream: the response side
	// reports whether the connection switched to an opaque stream. protos is what the request
	// asked for.
	upgrade         chan bool
	protos          []string
	signaled        bool   // upgrade answered; response side only
	reqErr, respErr string // written by their own side only
	halves          atomic.Int32
}

type keyVal struct{ k, v any }

// Set keeps a value on the exchange under key, for a later hook of the same or another stage
// (request state its response needs: a JSON-RPC id, a method). Keys follow context.Context's
// convention: an unexported type of the stage's package.
func (x *Exchange) Set(key, val any) {
	for i := range x.vals {
		if x.vals[i].k == key {
			x.vals[i].v = val
			return
		}
	}
	x.vals = append(x.vals, keyVal{key, val})
}

// Get returns the value Set under key, or nil.
func (x *Exchange) Get(key any) any {
	for i := range x.vals {
		if x.vals[i].k == key {
			return x.vals[i].v
		}
	}
	return nil
}

// Conn returns the state shared by every exchange of the connection (a session seen on an
// earlier request, a version negotiated once). Both directions use it, so it locks.
func (x *Exchange) Conn() *ConnState { return x.conn }

// ConnState is per-connection state shared by its exchanges; safe for concurrent use.
type ConnState struct {
	mu   sync.Mutex
	vals map[any]any
}

// Set keeps val under key for the life of the connection.
func (c *ConnState) Set(key, val any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.vals == nil {
		c.vals = map[any]any{}
	}
	c.vals[key] = val
}

// Get returns the value Set under key, or nil.
func (c *ConnState) Get(key any) any {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.vals[key]
}

// WantRequestBody asks for the whole request body, up to max bytes (de-chunked, still
// content-encoded), before anything of the request is forwarded; RequestBody hooks then run. A
// longer body is answered locally with 413 in the request's turn. Several stages may ask; the
// smallest bound wins. Call it from RequestHead.
func (x *Exchange) WantRequestBody(max int64) {
	if max < 0 {
		max = 0
	}
	if x.reqMax < 0 || max < x.reqMax {
		x.reqMax = max
	}
}

// WantsRequestBody reports whether a stage asked for the request body (RequestBody hooks will
// run before anything of the request is forwarded).
func (x *Exchange) WantsRequestBody() bool { return x.reqMax >= 0 }

// RequestBody is the request body read for the stages (de-chunked, still content-encoded), or
// the replacement set by an earlier stage; nil before it was read or when no stage asked.
func (x *Exchange) RequestBody() []byte { return x.reqBody }

// SetRequestBody replaces the request body: the request is then forwarded re-framed with
// Content-Length. Call it from RequestBody.
func (x *Exchange) SetRequestBody(b []byte) {
	if b == nil {
		b = []byte{}
	}
	x.reqBody, x.reqBodySet = b, true
}

// SetRequestHeader replaces every field of that name in the forwarded request with one (added at
// the end of the head). The framing fields (Content-Length, Transfer-Encoding, Connection) are
// the exchange's own and cannot be set; a name that is not a token or a value with a control
// character is ignored, so a stage cannot inject a field.
func (x *Exchange) SetRequestHeader(name, value string) {
	x.reqEdits = addEdit(x.reqEdits, name, value, false)
}

// DelRequestHeader removes every field of that name from the forwarded request.
func (x *Exchange) DelRequestHeader(name string) {
	x.reqEdits = addEdit(x.reqEdits, name, "", true)
}

// WantResponseBody asks for the whole response body, up to max bytes, before anything of the
// response is forwarded; ResponseBody hooks then run. Over the bound, o decides: OverflowClose
// closes the connection (the client gets nothing of the response), OverflowForward forwards it
// uninspected and says so in Uninspected. Several stages may ask; the smallest bound wins, and
// OverflowClose wins over OverflowForward. Call it from ResponseHead; it is ignored for a
// text/event-stream response when a stage asked for events.
func (x *Exchange) WantResponseBody(max int64, o Overflow) {
	if max < 0 {
		max = 0
	}
	if x.respMax < 0 {
		x.respMax, x.overflow = max, o
		return
	}
	x.respMax = min(x.respMax, max)
	if o == OverflowClose {
		x.overflow = OverflowClose
	}
}

// ResponseBody is the response body read for the stages, or the replacement set by an earlier
// stage.
func (x *Exchange) ResponseBody() []byte { return x.respBody }

// SetResponseBody replaces the response body: the response is then forwarded re-framed with
// Content-Length. Call it from ResponseBody.
func (x *Exchange) SetResponseBody(b []byte) {
	if b == nil {
		b = []byte{}
	}
	x.respBody, x.respBodySet = b, true
}

// ReplaceInResponseHeaders replaces every occurrence of old by value inside the reason phrase and
// the value of every field of the forwarded response (obs-fold continuations included), each
// field kept in place, the framing fields excepted; and in x.Resp, so that later stages read the
// same. old must not be
// empty and value must be a valid field value (else nothing is done).
func (x *Exchange) ReplaceInResponseHeaders(old, value string) {
	if old == "" || !validValue(value) || x.Resp == nil {
		return
	}
	x.respEdits = append(x.respEdits, headerEdit{replace: true, old: old, value: value})
	h := *x.Resp
	h.Reason = strings.ReplaceAll(h.Reason, old, value)
	h.Headers = make([]Header, len(x.Resp.Headers))
	for i, f := range x.Resp.Headers {
		if !framingField(f.Name) {
			f.Value = strings.ReplaceAll(f.Value, old, value)
		}
		h.Headers[i] = f
	}
	x.Resp = &h
}

// SetResponseHeader is SetRequestHeader for the response.
func (x *Exchange) SetResponseHeader(name, value string) {
	x.respEdits = addEdit(x.respEdits, name, value, false)
}

// DelResponseHeader is DelRequestHeader for the response.
func (x *Exchange) DelResponseHeader(name string) {
	x.respEdits = addEdit(x.respEdits, name, "", true)
}

// WantEvents asks for a text/event-stream response as events: the stream is parsed as it
// arrives, each event goes to every stage's Event hook as soon as its blank line has arrived, and
// is then written on its own (one write, never merged with another, never held back). Events
// over maxEvent bytes (DefaultMaxEventSize when 0 or less) close the connection. The stage decides
// what is a stream (a peer may read `\xa0text/event-stream` as one): the response is parsed as
// events whatever its Content-Type says. Call it from ResponseHead.
func (x *Exchange) WantEvents(maxEvent int) {
	if maxEvent <= 0 {
		maxEvent = DefaultMaxEventSize
	}
	if x.maxEvent == 0 || maxEvent < x.maxEvent {
		x.maxEvent = maxEvent
	}
}

// Answer answers the request locally with a complete response the stage produced: status,
// headers (framing fields are ignored: Content-Length is computed, and Connection: close is added
// when the connection cannot stay usable) and body (not sent for HEAD). It is written in the
// request's turn of the pipeline order and the request is never forwarded. v is the record's
// verdict (its Status defaults to status). Call it from RequestHead or RequestBody and return
// Stop; from a response hook it aborts the connection instead, since the response has begun.
func (x *Exchange) Answer(status int, headers []Header, body []byte, v Verdict) {
	if v.Status == 0 {
		v.Status = status
	}
	x.Verdict = v
	if x.respSide {
		x.Abort("local answer after the response began")
		return
	}
	x.Status = status
	x.answer = &answer{status: status, headers: headers, body: body}
}

// Abort ends the connection: on the request side after the responses owed before this request
// have been written (the request is not forwarded), on the response side at once (the client gets
// nothing more of this response). reason goes to Err. Return Stop after it.
func (x *Exchange) Abort(reason string) {
	if reason == "" {
		reason = "aborted"
	}
	if x.aborted == "" {
		x.aborted = reason
	}
}

// stopped reports whether a hook answered or aborted.
func (x *Exchange) stopped() bool { return x.answer != nil || x.aborted != "" }

// switched tells the request side, once, whether the connection became an opaque stream.
func (x *Exchange) switched(ok bool) {
	if x.upgrade != nil && !x.signaled {
		x.signaled = true
		x.upgrade <- ok
	}
}

// Replace makes the event go out as b instead of its Raw bytes (b is written as it is: a whole
// block, blank line included; EncodeEvent frames one). Call it from an Event hook; later stages
// see the replacement in Out.
func (e *Event) Replace(b []byte) {
	e.out, e.replaced, e.dropped = b, true, false
}

// Drop keeps the event from the client.
func (e *Event) Drop() { e.dropped = true }

// Dropped reports whether a stage dropped the event.
func (e *Event) Dropped() bool { return e.dropped }

// Out is what will be written for the event: its Raw bytes, or a stage's replacement.
func (e *Event) Out() []byte {
	if e.replaced {
		return e.out
	}
	return e.Raw
}

// answer is a local response a stage produced.
type answer struct {
	status  int
	headers []Header
	body    []byte
}

// render frames the answer; closeAfter adds Connection: close.
func (a *answer) render(method string, closeAfter bool) []byte {
	text := http.StatusText(a.status)
	n := 64 + len(a.body)
	for _, h := range a.headers {
		n += len(h.Name) + len(h.Value) + 4
	}
	b := make([]byte, 0, n)
	b = append(b, "HTTP/1.1 "...)
	b = strconv.AppendInt(b, int64(a.status), 10)
	b = append(b, ' ')
	b = append(b, text...)
	b = append(b, "\r\n"...)
	for _, h := range a.headers {
		if framingField(h.Name) || !validTokenString(h.Name) || !validValue(h.Value) {
			continue
		}
		b = append(b, h.Name...)
		b = append(b, ": "...)
		b = append(b, h.Value...)
		b = append(b, "\r\n"...)
	}
	noBody := a.status == http.StatusNoContent || a.status == http.StatusNotModified || a.status < 200
	if !noBody {
		b = append(b, "Content-Length: "...)
		b = strconv.AppendInt(b, int64(len(a.body)), 10)
		b = append(b, "\r\n"...)
	}
	if closeAfter {
		b = append(b, "Connection: close\r\n"...)
	}
	b = append(b, "\r\n"...)
	if method == "HEAD" || noBody {
		return b // a HEAD response carries no body, whatever its Content-Length says
	}
	return append(b, a.body...)
}

// PlainText is the body of a plain-text local answer that names the intermediary:
// "mcpintercept: reason\n", control characters replaced by spaces.
func PlainText(reason string) []byte {
	if reason == "" {
		reason = "request refused"
	}
	b := make([]byte, 0, len("mcpintercept: ")+len(reason)+1)
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

// PlainTextHeaders are the headers of a PlainText answer.
var PlainTextHeaders = []Header{{Name: "Content-Type", Value: "text/plain; charset=utf-8"}}

// headerEdit is one Set or Del of a header field by a stage, or (replace) a substitution of old
// by value inside every field's value.
type headerEdit struct {
	name, value string
	del         bool
	replace     bool
	old         string
}

func addEdit(edits []headerEdit, name, value string, del bool) []headerEdit {
	if framingField(name) || !validTokenString(name) || !validValue(value) {
		return edits
	}
	for i := range edits {
		if equalFold(edits[i].name, name) {
			edits[i] = headerEdit{name: name, value: value, del: del}
			return edits
		}
	}
	return append(edits, headerEdit{name: name, value: value, del: del})
}

// framingField names the fields that frame the message, which only the exchange writes.
func framingField(name string) bool {
	return equalFold(name, "content-length") || equalFold(name, "transfer-encoding") || equalFold(name, "connection")
}

// editHead returns raw with the fields named by edits removed (obs-fold continuations with them)
// and the Set ones appended before the blank line; every other byte is kept.
func editHead(raw []byte, edits []headerEdit) []byte {
	if len(edits) == 0 {
		return raw
	}
	eol := "\r\n"
	if !bytes.HasSuffix(raw, crlfcrlf) {
		eol = "\n"
	}
	out := make([]byte, 0, len(raw)+64)
	pos := 0
	started, skipFold, inFraming := false, false, false
	for pos < len(raw) {
		i := bytes.IndexByte(raw[pos:], '\n')
		line := raw[pos : pos+i+1]
		pos += i + 1
		content := trimEOL(line)
		switch {
		case !started:
			started = len(content) > 0
			// The start line too: a response's reason phrase could carry what is replaced.
			out = append(out, replaceIn(line, edits, false)...)
			continue
		case len(content) == 0:
			for _, e := range edits {
				if !e.del && !e.replace {
					out = append(out, e.name...)
					out = append(out, ": "...)
					out = append(out, e.value...)
					out = append(out, eol...)
				}
			}
			out = append(out, line...)
			continue
		case content[0] == ' ' || content[0] == '\t':
			if !skipFold {
				out = append(out, replaceIn(line, edits, inFraming)...)
			}
			continue
		}
		skipFold = false
		name := content
		if colon := bytes.IndexByte(content, ':'); colon >= 0 {
			name = content[:colon]
		}
		edited := false
		for _, e := range edits {
			if !e.replace && equalFold(string(name), e.name) {
				edited = true
				break
			}
		}
		if edited {
			skipFold = true
			continue
		}
		inFraming = framingField(string(name))
		if colon := bytes.IndexByte(line, ':'); colon >= 0 {
			out = append(out, line[:colon+1]...)
			out = append(out, replaceIn(line[colon+1:], edits, inFraming)...)
		} else {
			out = append(out, line...)
		}
	}
	return out
}

// replaceIn applies the replace edits to part of a field line (a value, or a continuation),
// unless it belongs to a framing field.
func replaceIn(b []byte, edits []headerEdit, framing bool) []byte {
	if framing {
		return b
	}
	for _, e := range edits {
		if e.replace && bytes.Contains(b, []byte(e.old)) {
			b = bytes.ReplaceAll(b, []byte(e.old), []byte(e.value))
		}
	}
	return b
}
