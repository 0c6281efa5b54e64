package exchange

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"math"
	"mcpintercept/exchange/httptok"
	"net"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// Defaults applied to zero fields of Limits.
const (
	DefaultMaxHeaderBytes = 64 << 10
	DefaultMaxHeaders     = 100
	DefaultMaxChunkLine   = 4 << 10

	// minReadBuf is the read buffer of a Reader. One buffer holds one read from the socket, which
	// CopyBody writes on as one piece, so it is also the largest write the proxy makes.
	minReadBuf = 16 << 10
	// inlineHeaders is how many headers a Head holds without a second allocation; MCP requests
	// carry about ten.
	inlineHeaders = 16
)

// ErrHeaderTooLarge means a head (start line and header section) exceeded Limits.MaxHeaderBytes;
// the proxy answers 431 and closes.
var ErrHeaderTooLarge = errors.New("header section too large")

// ErrBodyTooLarge means ReadBody met a body longer than its max.
var ErrBodyTooLarge = errors.New("body too large")

// ErrUnsolicited ends a connection whose upstream sent bytes while no request was outstanding
// (Options.CloseUnsolicited).
var ErrUnsolicited = errors.New("upstream sent bytes with no request outstanding")

// MalformedError is framing the reader refuses to guess about: a proxy that forwards bytes it
// parsed differently from the peer behind it is how requests get smuggled past policy. The proxy
// answers 400 and closes.
type MalformedError struct{ Msg string }

func (e *MalformedError) Error() string { return "malformed http: " + e.Msg }

func malformed(msg string) error { return &MalformedError{Msg: msg} }

// WriteError wraps an error returned by CopyBody's destination, so a caller can tell a peer that
// stopped reading from one that stopped sending.
type WriteError struct{ Err error }

func (e *WriteError) Error() string { return "write: " + e.Err.Error() }
func (e *WriteError) Unwrap() error { return e.Err }

// Header is one header field as sent.
type Header struct{ Name, Value string } // Name as sent; Value trimmed of OWS

// Head is a parsed request or response head. Raw is the only thing forwarded; the other fields are
// views of it for policy and framing, so nothing is normalised on the wire. Raw and the strings
// share no memory, but Raw must still be treated as read-only: it is what was received.
type Head struct {
	Raw                   []byte // exact bytes of the start line + headers + final CRLF CRLF (or LF LF)
	Method, Target, Proto string // requests (Proto for both)
	Status                int    // responses
	Reason                string
	Headers               []Header

	// Framing derived per RFC 9112 §6.
	ContentLength  int64 // -1 if none
	Chunked        bool  // Transfer-Encoding ends in chunked
	CloseDelimited bool  // response body runs to connection close
	NoBody         bool  // HEAD response, 1xx, 204, 304, 2xx to CONNECT, or request without CL/TE
	Close          bool  // Connection: close, or HTTP/1.0 without keep-alive, or close-delimited
	Upgrade        bool  // request: Connection: upgrade + Upgrade; response: 101, or 2xx to CONNECT

	inline [inlineHeaders]Header
}

// Get returns the first value of the named header, case-insensitively.
func (h *Head) Get(name string) (string, bool) {
	for i := range h.Headers {
		if equalFold(h.Headers[i].Name, name) {
			return h.Headers[i].Value, true
		}
	}
	return "", false
}

// Count returns how many times the named header appears, case-insensitively: a header peers
// read differently when repeated (one takes the first, another joins them) is refused by the
// stage that reads it.
func (h *Head) Count(name string) int {
	n := 0
	for i := range h.Headers {
		if equalFold(h.Headers[i].Name, name) {
			n++
		}
	}
	return n
}

// Limits bound what one head or chunk line may make the reader buffer.
type Limits struct {
	MaxHeaderBytes int // default 64 KiB
	MaxHeaders     int // default 100
	MaxChunkLine   int // default 4 KiB; also bounds each trailer line
}

func (l Limits) withDefaults() Limits {
	if l.MaxHeaderBytes <= 0 {
		l.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	if l.MaxHeaders <= 0 {
		l.MaxHeaders = DefaultMaxHeaders
	}
	if l.MaxChunkLine <= 0 {
		l.MaxChunkLine = DefaultMaxChunkLine
	}
	return l
}

// fieldSpan locates one header line's name and trimmed value in Reader.buf.
type fieldSpan struct{ ns, ne, vs, ve int }

// foldSpan is an obs-fold continuation (accepted in responses only) of field idx.
type foldSpan struct{ idx, vs, ve int }

// Reader reads HTTP/1.x heads and bodies from one direction of a connection. It is not safe for
// concurrent use.
type Reader struct {
	// br is nil while nothing is buffered and the reader waits for the next byte (see await): an
	// idle connection then holds no read buffer. Use b() to reach it.
	br   *bufio.Reader
	src  source
	size int // read buffer size
	// w, for a plain socket, lets await wait for bytes without reading them, so a body (an SSE
	// stream that goes quiet) can give its buffer back too, and each read still lands whole.
	w   *waiter
	l   Limits
	buf []byte // head bytes of the message being read; reused
	// partial holds the bytes of a head cut short by EOF, until the next read; a proxy forwards
	// them, as the connection would have without it.
	partial []byte
	fields  []fieldSpan
	folds   []foldSpan
	// prefix is a head waiting to go out with the first body bytes, in one write; see forward.
	prefix []byte
	wv     writev // writeTwo's scratch
	// beforeHead, when set, runs just before forward writes a head (forward's before).
	beforeHead func() error
	data       []byte // walkChunked's de-chunked data of one read; reused
}

// NewReader wraps r in a buffered reader of its own; use BufioReader to reach bytes read ahead.
func NewReader(r io.Reader, l Limits) *Reader {
	l = l.withDefaults()
	// A partial chunk line stays in the buffer while more is read, so the buffer must be larger.
	size := max(minReadBuf, l.MaxChunkLine+1)
	rd := &Reader{src: source{r: r}, size: size, l: l}
	if sc, ok := r.(syscall.Conn); ok {
		if rc, err := sc.SyscallConn(); err == nil {
			if rd.w = newWaiter(rc); rd.w != nil {
				rd.w.r = rd
				// The waiter's reads bypass the connection's Read; a wrapper that keeps an
				// activity time (flowconn) is told of them.
				if t, ok := r.(interface{ Touch(int) }); ok {
					rd.src.touch = t.Touch
				}
			}
		}
	}
	return rd
}

// readerPool holds the read buffers of connections that are between messages. A proxied
// connection spends most of its life waiting for the next request; holding two 16 KiB buffers
// through that wait was most of what an idle flow cost.
var readerPool = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, minReadBuf) }}

// b returns the buffered reader, taking a buffer from the pool if the reader has none.
func (r *Reader) b() *bufio.Reader {
	if r.br == nil {
		if r.size == minReadBuf {
			r.br = readerPool.Get().(*bufio.Reader)
		} else {
			r.br = bufio.NewReaderSize(nil, r.size)
		}
		r.br.Reset(&r.src)
	}
	return r.br
}

// release gives the read buffer back to the pool when it holds nothing unread.
func (r *Reader) release() {
	if r.br == nil || r.br.Buffered() > 0 {
		return
	}
	br := r.br
	r.br = nil
	br.Reset(nil)
	if r.size == minReadBuf {
		readerPool.Put(br)
	}
}

// discard returns the read buffer to the pool whatever it holds; the reader is done.
func (r *Reader) discard() {
	if r.br != nil {
		r.br.Discard(r.br.Buffered())
		r.release()
	}
}

// await blocks until at least one byte is buffered. With nothing buffered it waits without a read
// buffer, taking one only once bytes are there, so a connection waiting for its next message
// holds none. On a plain socket it reads whatever arrived in one raw read, taking the buffer only
// for the read that finds bytes (waiter.fill). Elsewhere (TLS, wrapped connections) it reads one
// byte on its own first, which splits that read in two, so it only does that before a head (split), never inside a body, where each read
// must be written on whole; a body then keeps its buffer while it waits.
func (r *Reader) await(split bool) error {
	if r.br != nil && r.br.Buffered() > 0 {
		return nil
	}
	if r.w != nil && r.src.n == 0 {
		r.release()
		return r.w.fill()
	}
	if !split {
		_, err := r.b().Peek(1)
		return err
	}
	r.release()
	if r.src.n == 0 && r.src.err == nil {
		for empty := 0; ; empty++ {
			n, err := r.src.r.Read(r.src.one[:])
			r.src.n, r.src.err = n, err
			if n > 0 || err != nil {
				break
			}
			if empty == 100 {
				r.src.err = io.ErrNoProgress
				break
			}
		}
	}
	if r.src.n == 0 {
		err := r.src.err
		r.src.err = nil
		return err
	}
	_, err := r.b().Peek(1)
	return err
}

// source is what the buffered reader reads: the byte await read on its own, then the connection.
type source struct {
	r   io.Reader
	one [1]byte
	n   int   // 1 while one holds a byte not yet handed on
	err error // returned by the read that brought that byte, for the read after it
	// raw is set while the waiter fills the buffer: Read is then one non-blocking read(2) on fd
	// (see waiter), and touch, when set, reports the bytes to the connection's activity time.
	raw   bool
	fd    int
	touch func(int)
}

func (s *source) Read(p []byte) (int, error) {
	if s.raw {
		return s.rawRead(p)
	}
	if s.n == 0 {
		if err := s.err; err != nil {
			s.err = nil
			return 0, err
		}
		return s.r.Read(p)
	}
	if len(p) == 0 {
		return 0, nil
	}
	p[0] = s.one[0]
	s.n = 0
	return 1, nil
}

// Buffered returns how many bytes have been read ahead of the last message (a pipelined request,
// or the first bytes after an Upgrade).
func (r *Reader) Buffered() int {
	if r.br == nil {
		return 0
	}
	return r.br.Buffered()
}

// BufioReader returns the underlying buffered reader, for the switch to an opaque copy after an
// upgrade: its buffered bytes must be forwarded before reading the connection directly.
func (r *Reader) BufioReader() *bufio.Reader { return r.b() }

// ReadRequestHead reads the next request head. It returns io.EOF if the connection ended cleanly
// before any byte of a head, io.ErrUnexpectedEOF if it ended inside one.
func (r *Reader) ReadRequestHead() (*Head, error) {
	h, err := r.readHead(true)
	if err != nil {
		return nil, err
	}
	if err := h.frameRequest(); err != nil {
		return nil, err
	}
	return h, nil
}

// ReadResponseHead reads the next response head. reqMethod is the method of the request it
// answers: a HEAD response has no body, and a 2xx to CONNECT turns the connection opaque.
func (r *Reader) ReadResponseHead(reqMethod string) (*Head, error) {
	h, err := r.readHead(false)
	if err != nil {
		return nil, err
	}
	if err := h.frameResponse(reqMethod); err != nil {
		return nil, err
	}
	return h, nil
}

// headComplete reports whether a whole head is already buffered, so the caller can skip arming a
// header deadline for it. Leading empty lines are skipped, or a sender could pass them off as the
// end of a head it then trickles.
func (r *Reader) headComplete() bool {
	if r.br == nil {
		return false
	}
	b, _ := r.br.Peek(r.br.Buffered())
	i := 0
	for i < len(b) && (b[i] == '\r' || b[i] == '\n') {
		i++
	}
	b = b[i:]
	return bytes.Contains(b, crlfcrlf) || bytes.Contains(b, lflf)
}

var (
	crlfcrlf = []byte("\r\n\r\n")
	lflf     = []byte("\n\n")
)

// readHead reads lines up to the empty line, validating each as it completes, and builds a Head
// whose strings are views of one copy of the head.
func (r *Reader) readHead(req bool) (*Head, error) {
	// A huge head is not worth keeping its buffer for.
	if cap(r.buf) > 8<<10 {
		r.buf = nil
	}
	buf := r.buf[:0]
	defer func() { r.buf = buf[:0] }()
	r.partial = nil
	r.fields = r.fields[:0]
	r.folds = r.folds[:0]
	br := r.b()
	ls, le := -1, -1 // start line
	lineStart := 0
	for {
		frag, err := br.ReadSlice('\n')
		if len(buf)+len(frag) > r.l.MaxHeaderBytes {
			return nil, ErrHeaderTooLarge
		}
		buf = append(buf, frag...)
		if err != nil {
			if err == bufio.ErrBufferFull {
				continue // a line longer than the read buffer; bounded by MaxHeaderBytes
			}
			if err == io.EOF {
				if len(buf) == 0 {
					return nil, io.EOF
				}
				r.partial = buf
				return nil, io.ErrUnexpectedEOF
			}
			return nil, err
		}
		end := len(buf) - 1
		if end > lineStart && buf[end-1] == '\r' {
			end--
		}
		line := buf[lineStart:end]
		next := len(buf)
		if bytes.IndexByte(line, '\r') >= 0 {
			return nil, malformed("bare CR in head")
		}
		switch {
		case ls < 0:
			if len(line) == 0 {
				// RFC 9112 §2.2: empty lines before the start line are ignored. They stay in Raw so
				// the bytes forwarded are the bytes received.
				lineStart = next
				continue
			}
			ls, le = lineStart, end
		case len(line) == 0:
			return r.buildHead(buf, ls, le, req)
		case line[0] == ' ' || line[0] == '\t':
			// obs-fold (RFC 9112 §5.2). A request with one is refused because it cannot be
			// unfolded without modifying it; a response is forwarded as the server sent it.
			if req || len(r.fields) == 0 {
				return nil, malformed("obs-fold in header")
			}
			// A folded framing header is read differently by clients (undici takes
			// "Transfer-Encoding: gzip,\r\n chunked" as not chunked, Go as chunked).
			if f := r.fields[len(r.fields)-1]; framingName(buf[f.ns:f.ne]) {
				return nil, malformed("obs-fold in " + lowerASCII(buf[f.ns:f.ne]))
			}
			vs, ve := trimOWS(buf, lineStart, end)
			if !validValue(buf[vs:ve]) {
				return nil, malformed("invalid character in header value")
			}
			r.folds = append(r.folds, foldSpan{idx: len(r.fields) - 1, vs: vs, ve: ve})
		default:
			if len(r.fields) >= r.l.MaxHeaders {
				return nil, malformed("too many headers")
			}
			colon := bytes.IndexByte(line, ':')
			if colon < 0 {
				return nil, malformed("header line without colon")
			}
			if colon == 0 || !validToken(line[:colon]) {
				return nil, malformed("invalid header name")
			}
			vs, ve := trimOWS(buf, lineStart+colon+1, end)
			if !validValue(buf[vs:ve]) {
				return nil, malformed("invalid character in header value")
			}
			// A tab anywhere in Transfer-Encoding, even as trimmable OWS: undici does not trim a
			// trailing one ("chunked\t" is not chunked to it) while Go and this reader do.
			if bytes.IndexByte(line[colon+1:], '\t') >= 0 && equalFold(string(line[:colon]), "transfer-encoding") {
				return nil, malformed("tab in transfer-encoding")
			}
			r.fields = append(r.fields, fieldSpan{ns: lineStart, ne: lineStart + colon, vs: vs, ve: ve})
		}
		lineStart = next
	}
}

func (r *Reader) buildHead(buf []byte, ls, le int, req bool) (*Head, error) {
	raw := make([]byte, len(buf))
	copy(raw, buf)
	s := string(buf) // one string for every view: a single allocation for all names and values
	h := &Head{Raw: raw, ContentLength: -1}
	if n := len(r.fields); n <= len(h.inline) {
		h.Headers = h.inline[:n]
	} else {
		h.Headers = make([]Header, n)
	}
	for i, f := range r.fields {
		h.Headers[i] = Header{Name: s[f.ns:f.ne], Value: s[f.vs:f.ve]}
	}
	for _, f := range r.folds {
		v := &h.Headers[f.idx].Value
		switch {
		case f.ve == f.vs:
		case *v == "":
			*v = s[f.vs:f.ve]
		default:
			*v = *v + " " + s[f.vs:f.ve]
		}
	}
	start := s[ls:le]
	if req {
		return h, h.parseRequestLine(start)
	}
	return h, h.parseStatusLine(start)
}

func (h *Head) parseRequestLine(line string) error {
	sp1 := strings.IndexByte(line, ' ')
	if sp1 <= 0 {
		return malformed("bad request line")
	}
	rest := line[sp1+1:]
	sp2 := strings.IndexByte(rest, ' ')
	if sp2 <= 0 {
		return malformed("bad request line")
	}
	h.Method, h.Target, h.Proto = line[:sp1], rest[:sp2], rest[sp2+1:]
	if h.Method == "PRI" && h.Proto == "HTTP/2.0" {
		// The HTTP/2 connection preface (h2c with prior knowledge): the streams after it could not
		// be read at Level 1.
		return malformed("http/2 connection preface (h2c) is not allowed")
	}
	if !validTokenString(h.Method) {
		return malformed("bad request method")
	}
	for i := 0; i < len(h.Target); i++ {
		if c := h.Target[i]; c <= ' ' || c >= 0x7f {
			return malformed("bad request target")
		}
	}
	if !validProto(h.Proto) {
		return malformed("unsupported protocol version")
	}
	return nil
}

func (h *Head) parseStatusLine(line string) error {
	if len(line) < 12 || !validProto(line[:8]) || line[8] != ' ' {
		return malformed("bad status line")
	}
	h.Proto = line[:8]
	code := line[9:12]
	for i := 0; i < 3; i++ {
		if code[i] < '0' || code[i] > '9' {
			return malformed("bad status code")
		}
	}
	h.Status = int(code[0]-'0')*100 + int(code[1]-'0')*10 + int(code[2]-'0')
	if h.Status < 100 {
		return malformed("bad status code")
	}
	switch {
	case len(line) == 12:
	case line[12] == ' ':
		h.Reason = line[13:]
		if !validValue(h.Reason) {
			return malformed("bad reason phrase")
		}
	default:
		return malformed("bad status line")
	}
	return nil
}

// validProto accepts HTTP/1.x only: anything else is not this parser's to forward.
func validProto(p string) bool {
	return len(p) == 8 && p[:7] == "HTTP/1." && p[7] >= '0' && p[7] <= '9'
}

// framing is what the headers say about where the body ends.
type framing struct {
	cl            int64
	clSeen        bool
	teSeen        bool
	chunkedLast   bool // the last transfer coding is chunked
	connClose     bool
	connKeepAlive bool
	connUpgrade   bool
	upgradeHdr    bool
	hosts         int
}

func (h *Head) scanFraming() (framing, error) {
	f := framing{cl: -1}
	for i := range h.Headers {
		name, v := h.Headers[i].Name, h.Headers[i].Value
		switch len(name) {
		case 4:
			if equalFold(name, "host") {
				f.hosts++
			}
		case 7:
			if equalFold(name, "upgrade") {
				f.upgradeHdr = true
			}
		case 10:
			if equalFold(name, "connection") {
				forEachToken(v, func(t string) {
					switch {
					case equalFold(t, "close"):
						f.connClose = true
					case equalFold(t, "keep-alive"):
						f.connKeepAlive = true
					case equalFold(t, "upgrade"):
						f.connUpgrade = true
					}
				})
			}
		case 14:
			if equalFold(name, "content-length") {
				n, ok := parseContentLength(v)
				if !ok {
					return f, malformed("bad content-length")
				}
				// Identical repeats are unambiguous (RFC 9110 §8.6); differing ones are the
				// classic smuggling vector.
				if f.clSeen && n != f.cl {
					return f, malformed("conflicting content-length")
				}
				f.cl, f.clSeen = n, true
			}
		case 17:
			if equalFold(name, "transfer-encoding") {
				f.teSeen = true
				if err := scanCodings(v, &f.chunkedLast); err != nil {
					return f, err
				}
			}
		}
	}
	return f, nil
}

// scanCodings reads one Transfer-Encoding field value strictly: a list of tokens separated by
// commas and spaces, nothing else. Clients disagree about everything beyond that (undici reads
// "chunked," as not chunked and ",chunked" as chunked; Go refuses both; RFC 9110 §5.6.1 would
// have a recipient skip empty elements), and a body read as chunked by one side and as running
// to close by the other hides whatever the chunk-size lines frame. chunkedLast carries across
// field lines: chunked must be the final coding, applied once.
func scanCodings(v string, chunkedLast *bool) error {
	if v == "" {
		return malformed("empty transfer-encoding")
	}
	for v != "" {
		var t string
		if i := strings.IndexByte(v, ','); i >= 0 {
			t, v = v[:i], v[i+1:]
			if v == "" {
				return malformed("empty element in transfer-encoding")
			}
		} else {
			t, v = v, ""
		}
		t = strings.Trim(t, " ")
		switch {
		case t == "":
			return malformed("empty element in transfer-encoding")
		case !validTokenString(t):
			// A parameter, a quoted string, obs-text, or two words: none is a coding all
			// clients would read as the same one.
			return malformed("transfer coding is not a token")
		case *chunkedLast:
			return malformed("chunked is not the final transfer coding")
		}
		*chunkedLast = equalFold(t, "chunked")
	}
	return nil
}

// framingName reports whether a header name is Content-Length or Transfer-Encoding.
func framingName(name []byte) bool {
	switch len(name) {
	case len("content-length"):
		return equalFold(string(name), "content-length")
	case len("transfer-encoding"):
		return equalFold(string(name), "transfer-encoding")
	}
	return false
}

// lowerASCII returns b in lower case, for an error message that names a header.
func lowerASCII(b []byte) string {
	out := []byte(string(b))
	for i, c := range out {
		if 'A' <= c && c <= 'Z' {
			out[i] = c + 'a' - 'A'
		}
	}
	return string(out)
}

func (h *Head) frameRequest() error {
	f, err := h.scanFraming()
	if err != nil {
		return err
	}
	if f.hosts > 1 {
		return malformed("duplicate host")
	}
	h10 := h.Proto == "HTTP/1.0"
	switch {
	case f.teSeen && f.clSeen:
		// RFC 9112 §6.1: a message with both is a smuggling attempt or a broken client; the proxy
		// cannot remove Content-Length without modifying the message, so it refuses.
		return malformed("content-length with transfer-encoding")
	case f.teSeen && h10:
		return malformed("transfer-encoding in http/1.0 request")
	case f.teSeen && !f.chunkedLast:
		return malformed("request transfer-encoding does not end in chunked")
	case f.teSeen:
		h.Chunked = true
	case f.clSeen:
		h.ContentLength = f.cl
	default:
		h.NoBody = true
	}
	h.Close = f.connClose || (h10 && !f.connKeepAlive)
	h.Upgrade = f.connUpgrade && f.upgradeHdr
	return nil
}

func (h *Head) frameResponse(reqMethod string) error {
	f, err := h.scanFraming()
	if err != nil {
		return err
	}
	if f.teSeen && f.clSeen {
		return malformed("content-length with transfer-encoding")
	}
	h10 := h.Proto == "HTTP/1.0"
	if f.teSeen && h10 {
		// RFC 9112 §6.1: Transfer-Encoding in an HTTP/1.0 message means faulty framing. Go's
		// client reads such a body to close, undici de-chunks it: either reading hides what the
		// other sees (chunk-size lines inside an SSE stream), so neither is guessed.
		return malformed("transfer-encoding in http/1.0 response")
	}
	h.ContentLength = f.cl
	switch {
	case h.Status == 101:
		h.NoBody, h.Upgrade = true, true
	case reqMethod == "CONNECT" && h.Status >= 200 && h.Status < 300:
		h.NoBody, h.Upgrade = true, true
	case h.Status < 200 || h.Status == 204 || h.Status == 304 || reqMethod == "HEAD":
		h.NoBody = true
	case f.teSeen && f.chunkedLast:
		h.Chunked = true
	case f.teSeen:
		// RFC 9112 §6.3: a non-chunked final coding leaves the body running to close.
		h.CloseDelimited = true
	case f.clSeen:
	default:
		h.CloseDelimited = true
	}
	h.Close = f.connClose || (h10 && !f.connKeepAlive) || h.CloseDelimited
	return nil
}

// CopyBody forwards the body of h exactly as framed on the wire — chunk-size lines, extensions,
// data, trailers and the final CRLF included — to dst. Each read from the source is written as
// soon as it has been parsed and never merged with the next read (SSE events must reach the client
// one by one); only an incomplete chunk-size or trailer line, which carries no data, waits for the
// rest of itself. A close-delimited body is copied until EOF. Errors from dst come back as
// *WriteError. It returns the raw bytes copied.
func (r *Reader) CopyBody(dst io.Writer, h *Head) (int64, error) {
	switch {
	case h.NoBody:
		return 0, nil
	case h.Chunked:
		return r.copyChunked(dst)
	case h.ContentLength >= 0:
		return r.copyN(dst, h.ContentLength, false)
	case h.CloseDelimited:
		return r.copyN(dst, math.MaxInt64, true)
	}
	return 0, nil
}

// copyN writes what each read brings, up to n bytes; toEOF makes EOF the normal end.
func (r *Reader) copyN(dst io.Writer, n int64, toEOF bool) (int64, error) {
	var written int64
	for written < n {
		if r.Buffered() == 0 {
			if err := r.flushPrefix(dst); err != nil {
				return written, err
			}
			if err := r.await(false); err != nil {
				if toEOF && err == io.EOF {
					return written, nil
				}
				return written, noEOF(err)
			}
		}
		k := r.br.Buffered()
		if rem := n - written; int64(k) > rem {
			k = int(rem)
		}
		b, _ := r.br.Peek(k)
		w, err := r.write(dst, b)
		r.br.Discard(w)
		written += int64(w)
		if err != nil {
			return written, &WriteError{Err: err}
		}
	}
	return written, nil
}

// write writes b, preceded by a pending head: both in one write (see writeTwo).
func (r *Reader) write(dst io.Writer, b []byte) (int, error) {
	if r.prefix == nil {
		return dst.Write(b)
	}
	head := r.prefix
	r.prefix = nil
	if r.beforeHead != nil {
		if err := r.beforeHead(); err != nil {
			return 0, err
		}
	}
	n, err := writeTwo(dst, head, b, &r.wv)
	return max(n-len(head), 0), err
}

// writev is the scratch space of writeTwo's writev, kept by its caller so that it allocates
// nothing.
type writev struct {
	iov [2][]byte
	nb  net.Buffers
}

// maxCoalesce is the largest head + body that writeTwo copies into one buffer to write them in
// one call.
const maxCoalesce = 64 << 10

// coalescePool holds the buffers writeTwo joins a head and a body in.
var coalescePool = sync.Pool{New: func() any { b := make([]byte, 0, maxCoalesce); return &b }}

// writeTwo writes a and then b as one write when it can: a writev on a plain TCP socket (which
// is one system call), else one Write of both joined in a pooled buffer when they are small.
// Handing net.Buffers to any other net.Conn (a TLS connection, a wrapper that counts activity)
// falls back to one Write per buffer, two system calls and two TLS records where one does. wv
// is scratch space so the writev allocates nothing. It returns the bytes written of a and b.
func writeTwo(dst io.Writer, a, b []byte, wv *writev) (int, error) {
	switch {
	case len(a) == 0:
		return dst.Write(b)
	case len(b) == 0:
		return dst.Write(a)
	}
	if tc, ok := dst.(*net.TCPConn); ok {
		wv.iov = [2][]byte{a, b}
		wv.nb = wv.iov[:] // WriteTo consumes nb as it writes
		n, err := wv.nb.WriteTo(tc)
		wv.iov, wv.nb = [2][]byte{}, nil
		return int(n), err
	}
	if len(a)+len(b) <= maxCoalesce {
		bp := coalescePool.Get().(*[]byte)
		buf := append(append((*bp)[:0], a...), b...)
		n, err := dst.Write(buf)
		*bp = buf[:0]
		coalescePool.Put(bp)
		return n, err
	}
	n, err := dst.Write(a)
	if err != nil {
		return n, err
	}
	m, err := dst.Write(b)
	return n + m, err
}

// flushPrefix writes a pending head on its own before the reader blocks for more: a head is never
// held back waiting for body bytes (an SSE client acts on the head alone).
func (r *Reader) flushPrefix(dst io.Writer) error {
	if r.prefix == nil {
		return nil
	}
	head := r.prefix
	r.prefix = nil
	if r.beforeHead != nil {
		if err := r.beforeHead(); err != nil {
			return &WriteError{Err: err}
		}
	}
	if _, err := dst.Write(head); err != nil {
		return &WriteError{Err: err}
	}
	return nil
}

// forward writes head (h.Raw, or an edited copy of it), then the body of h as CopyBody does. The
// head goes out in one write with the body bytes that arrived in the same read as it, which saves
// a system call per message, and alone otherwise. before, when set, runs just before the first
// byte goes out; an error stops the write (the proxy queues the request there, so a request that
// fails before any byte left is still its to answer). It returns the bytes written, head
// included.
func (r *Reader) forward(dst io.Writer, h *Head, head []byte, before func() error) (int64, error) {
	r.prefix, r.beforeHead = head, before
	defer func() { r.beforeHead = nil }()
	n, err := r.CopyBody(dst, h)
	if err == nil {
		err = r.flushPrefix(dst) // no body
	}
	if r.prefix != nil {
		r.prefix = nil
		return n, err
	}
	return int64(len(head)) + n, err
}

const (
	stSize = iota
	stData
	stDataEnd
	stTrailer
	stDone
)

// chunkScan is the state of a walk over chunked framing, kept across reads.
type chunkScan struct {
	st       int
	remain   int64
	trailers int
}

// scan advances over buf as far as it holds complete framing elements and returns where it
// stopped; an incomplete chunk-size or trailer line is left for the next call, with the rest of
// it. onData, when set, gets the range of every piece of chunk data passed. The framing is
// validated before anything is passed, so a malformed chunk line never reaches the peer.
func (c *chunkScan) scan(buf []byte, l *Limits, onData func(lo, hi int)) (int, error) {
	pos := 0
	for pos < len(buf) && c.st != stDone {
		switch c.st {
		case stSize, stTrailer:
			i := bytes.IndexByte(buf[pos:], '\n')
			if i < 0 {
				if len(buf)-pos > l.MaxChunkLine {
					return pos, malformed("chunk line too long")
				}
				return pos, nil
			}
			line := buf[pos : pos+i+1]
			if len(line) > l.MaxChunkLine {
				return pos, malformed("chunk line too long")
			}
			if c.st == stSize {
				n, err := parseChunkLine(line)
				if err != nil {
					return pos, err
				}
				if n == 0 {
					c.st = stTrailer
				} else {
					c.st, c.remain = stData, n
				}
			} else {
				c.trailers += len(line)
				if c.trailers > l.MaxHeaderBytes {
					return pos, ErrHeaderTooLarge
				}
				empty, err := checkTrailerLine(line)
				if err != nil {
					return pos, err
				}
				if empty {
					c.st = stDone
				}
			}
			pos += len(line)
		case stData:
			k := int64(len(buf) - pos)
			if k > c.remain {
				k = c.remain
			}
			if onData != nil {
				onData(pos, pos+int(k))
			}
			pos += int(k)
			if c.remain -= k; c.remain == 0 {
				c.st = stDataEnd
			}
		case stDataEnd:
			switch {
			case buf[pos] == '\n':
				pos++
			case buf[pos] != '\r':
				return pos, malformed("chunk data not followed by CRLF")
			case pos+1 == len(buf):
				return pos, nil
			case buf[pos+1] != '\n':
				return pos, malformed("chunk data not followed by CRLF")
			default:
				pos += 2
			}
			c.st = stSize
		}
	}
	return pos, nil
}

// copyChunked walks the chunked framing over whatever is buffered, writes the parsed span in one
// Write, and only then reads again.
func (r *Reader) copyChunked(dst io.Writer) (int64, error) {
	var (
		total int64
		c     chunkScan
	)
	if r.Buffered() == 0 {
		if err := r.flushPrefix(dst); err != nil {
			return 0, err
		}
		if err := r.await(false); err != nil {
			return 0, noEOF(err)
		}
	}
	for {
		buf, _ := r.br.Peek(r.br.Buffered())
		pos, serr := c.scan(buf, &r.l, nil)
		if serr != nil {
			return total, serr
		}
		if pos > 0 {
			w, err := r.write(dst, buf[:pos])
			r.br.Discard(w)
			total += int64(w)
			if err != nil {
				return total, &WriteError{Err: err}
			}
		}
		if c.st == stDone {
			return total, nil
		}
		// One more read; an incomplete line stays buffered and is scanned again with the rest.
		if err := r.flushPrefix(dst); err != nil {
			return total, err
		}
		if err := r.more(); err != nil {
			return total, noEOF(err)
		}
	}
}

// more reads again: at least one byte more than is buffered.
func (r *Reader) more() error {
	if n := r.br.Buffered(); n > 0 {
		_, err := r.br.Peek(n + 1)
		return err
	}
	return r.await(false)
}

// errStopWalk is returned by a walk sink to end the walk early without an error of its own.
var errStopWalk = errors.New("walk stopped")

// walk reads the body of h as it arrives and calls sink once per read with the raw bytes it
// consumed (framing included) and the body data inside them (de-chunked; the same bytes for other
// framings). data is raw itself or a reused buffer; neither may be kept after sink returns. The
// bytes are consumed once sink returns nil; an error from sink ends the walk with that error. It
// returns the raw bytes consumed.
func (r *Reader) walk(h *Head, sink func(raw, data []byte) error) (int64, error) {
	switch {
	case h.NoBody:
		return 0, nil
	case h.Chunked:
		return r.walkChunked(sink)
	case h.ContentLength >= 0:
		return r.walkN(h.ContentLength, false, sink)
	case h.CloseDelimited:
		return r.walkN(math.MaxInt64, true, sink)
	}
	return 0, nil
}

func (r *Reader) walkN(n int64, toEOF bool, sink func(raw, data []byte) error) (int64, error) {
	var done int64
	for done < n {
		if r.Buffered() == 0 {
			if err := r.await(false); err != nil {
				if toEOF && err == io.EOF {
					return done, nil
				}
				return done, noEOF(err)
			}
		}
		k := r.br.Buffered()
		if rem := n - done; int64(k) > rem {
			k = int(rem)
		}
		b, _ := r.br.Peek(k)
		if err := sink(b, b); err != nil {
			return done, err
		}
		r.br.Discard(k)
		done += int64(k)
	}
	return done, nil
}

func (r *Reader) walkChunked(sink func(raw, data []byte) error) (int64, error) {
	var (
		total int64
		c     chunkScan
		buf   []byte
	)
	onData := func(lo, hi int) { r.data = append(r.data, buf[lo:hi]...) }
	if r.Buffered() == 0 {
		if err := r.await(false); err != nil {
			return 0, noEOF(err)
		}
	}
	for {
		buf, _ = r.br.Peek(r.br.Buffered())
		r.data = r.data[:0]
		pos, serr := c.scan(buf, &r.l, onData)
		if serr != nil {
			return total, serr
		}
		if pos > 0 {
			if err := sink(buf[:pos], r.data); err != nil {
				return total, err
			}
			r.br.Discard(pos)
			total += int64(pos)
		}
		if c.st == stDone {
			return total, nil
		}
		if err := r.more(); err != nil {
			return total, noEOF(err)
		}
	}
}

// parseChunkLine parses "hex-size [BWS] [; extensions] CRLF". Sizes are bounded to int64 and
// extensions are forwarded as sent but may not contain control characters.
func parseChunkLine(line []byte) (int64, error) {
	content := trimEOL(line)
	var n int64
	i := 0
	for ; i < len(content); i++ {
		d := unhex(content[i])
		if d < 0 {
			break
		}
		if n > math.MaxInt64>>4 {
			return 0, malformed("chunk size overflows")
		}
		n = n<<4 | int64(d)
	}
	if i == 0 {
		return 0, malformed("bad chunk size")
	}
	for i < len(content) && (content[i] == ' ' || content[i] == '\t') {
		i++
	}
	if i < len(content) {
		if content[i] != ';' {
			return 0, malformed("bad chunk size")
		}
		if !validValue(content[i:]) {
			return 0, malformed("bad chunk extension")
		}
	}
	return n, nil
}

// checkTrailerLine validates one trailer field line; it reports whether line ends the trailers.
func checkTrailerLine(line []byte) (bool, error) {
	content := trimEOL(line)
	if len(content) == 0 {
		return true, nil
	}
	colon := bytes.IndexByte(content, ':')
	if colon <= 0 || !validToken(content[:colon]) || !validValue(content[colon+1:]) {
		return false, malformed("bad trailer line")
	}
	return false, nil
}

// trimEOL strips the LF or CRLF ending a line.
func trimEOL(line []byte) []byte {
	if n := len(line); n > 0 && line[n-1] == '\n' {
		line = line[:n-1]
		if n := len(line); n > 0 && line[n-1] == '\r' {
			line = line[:n-1]
		}
	}
	return line
}

// ReadBody reads and decodes (de-chunks) the whole body of h, for a stage that will change it.
// Trailers are read and dropped. More than max bytes of body yield ErrBodyTooLarge, after which
// the connection's framing is lost and it must be closed.
func (r *Reader) ReadBody(h *Head, max int64) ([]byte, error) {
	r.b()
	switch {
	case h.NoBody:
		return nil, nil
	case h.Chunked:
		return r.readChunked(max)
	case h.ContentLength >= 0:
		if h.ContentLength > max {
			return nil, ErrBodyTooLarge
		}
		b := make([]byte, h.ContentLength)
		if _, err := io.ReadFull(r.br, b); err != nil {
			return nil, noEOF(err)
		}
		return b, nil
	case h.CloseDelimited:
		b, err := io.ReadAll(io.LimitReader(r.br, max+1))
		if err != nil {
			return nil, err
		}
		if int64(len(b)) > max {
			return nil, ErrBodyTooLarge
		}
		return b, nil
	}
	return nil, nil
}

func (r *Reader) readChunked(max int64) ([]byte, error) {
	var out []byte
	for {
		line, err := r.readLine()
		if err != nil {
			return nil, err
		}
		n, err := parseChunkLine(line)
		if err != nil {
			return nil, err
		}
		if n == 0 {
			break
		}
		if n > max-int64(len(out)) {
			return nil, ErrBodyTooLarge
		}
		out = append(out, make([]byte, n)...)
		if _, err := io.ReadFull(r.br, out[len(out)-int(n):]); err != nil {
			return nil, noEOF(err)
		}
		switch b, err := r.br.ReadByte(); {
		case err != nil:
			return nil, noEOF(err)
		case b == '\r':
			if b, err = r.br.ReadByte(); err != nil {
				return nil, noEOF(err)
			}
			if b != '\n' {
				return nil, malformed("chunk data not followed by CRLF")
			}
		case b != '\n':
			return nil, malformed("chunk data not followed by CRLF")
		}
	}
	trailers := 0
	for {
		line, err := r.readLine()
		if err != nil {
			return nil, err
		}
		if trailers += len(line); trailers > r.l.MaxHeaderBytes {
			return nil, ErrHeaderTooLarge
		}
		empty, err := checkTrailerLine(line)
		if err != nil {
			return nil, err
		}
		if empty {
			if out == nil {
				out = []byte{}
			}
			return out, nil
		}
	}
}

// readLine returns one chunk or trailer line, bounded by MaxChunkLine.
func (r *Reader) readLine() ([]byte, error) {
	line, err := r.b().ReadSlice('\n')
	switch {
	case err == bufio.ErrBufferFull || len(line) > r.l.MaxChunkLine:
		return nil, malformed("chunk line too long")
	case err != nil:
		return nil, noEOF(err)
	}
	return line, nil
}

// Reframe returns h and body as one message framed either by Content-Length (the existing header
// is rewritten in place, so header order is kept) or as a single chunk. Transfer-Encoding and
// Content-Length are adjusted to match; every other line of h.Raw is kept byte for byte, which is
// what lets a Level 2 stage change a body without a second HTTP parser. It is meant for messages
// that carry a body; trailers are not reproduced. Transfer codings other than chunked (which
// ReadBody does not undo, and which nobody sends in practice) are kept in chunked mode and dropped
// with Content-Length, which cannot be combined with any.
func Reframe(h *Head, body []byte, chunked bool) []byte {
	raw := h.Raw
	eol := "\r\n"
	if !bytes.HasSuffix(raw, crlfcrlf) {
		eol = "\n"
	}
	out := make([]byte, 0, len(raw)+len(body)+48)
	var clDone, teDone bool
	lenLine := func(out []byte, name string) []byte {
		out = append(out, name...)
		out = append(out, ": "...)
		out = strconv.AppendInt(out, int64(len(body)), 10)
		return append(out, eol...)
	}
	pos := 0
	started := false // past the start line
	skipFold := false
	for pos < len(raw) {
		i := bytes.IndexByte(raw[pos:], '\n')
		line := raw[pos : pos+i+1]
		pos += i + 1
		content := trimEOL(line)
		switch {
		case !started:
			started = len(content) > 0
			out = append(out, line...)
			continue
		case len(content) == 0: // end of head
			if !chunked && !clDone {
				out = lenLine(out, "Content-Length")
			}
			if chunked && !teDone {
				out = append(out, "Transfer-Encoding: chunked"...)
				out = append(out, eol...)
			}
			out = append(out, line...)
			continue
		case content[0] == ' ' || content[0] == '\t':
			if !skipFold {
				out = append(out, line...)
			}
			continue
		}
		skipFold = false
		colon := bytes.IndexByte(content, ':')
		name := string(content[:colon])
		switch {
		case equalFold(name, "content-length"):
			skipFold = true
			if !chunked && !clDone {
				out = lenLine(out, name)
				clDone = true
			}
		case equalFold(name, "transfer-encoding"):
			skipFold = true
			if teDone {
				continue
			}
			teDone = true
			if chunked {
				codings := append(nonChunkedCodings(h), "chunked")
				out = append(out, name...)
				out = append(out, ": "...)
				for j, c := range codings {
					if j > 0 {
						out = append(out, ", "...)
					}
					out = append(out, c...)
				}
				out = append(out, eol...)
			}
			if !chunked && !clDone {
				out = lenLine(out, "Content-Length")
				clDone = true
			}
		default:
			out = append(out, line...)
		}
	}
	if !chunked {
		return append(out, body...)
	}
	if len(body) > 0 {
		out = strconv.AppendInt(out, int64(len(body)), 16)
		out = append(out, eol...)
		out = append(out, body...)
		out = append(out, eol...)
	}
	out = append(out, '0')
	out = append(out, eol...)
	return append(out, eol...)
}

// nonChunkedCodings lists the transfer codings of h other than chunked, in order.
func nonChunkedCodings(h *Head) []string {
	var cs []string
	for _, hd := range h.Headers {
		if equalFold(hd.Name, "transfer-encoding") {
			forEachToken(hd.Value, func(t string) {
				if !equalFold(t, "chunked") {
					cs = append(cs, t)
				}
			})
		}
	}
	return cs
}

// noEOF turns an EOF inside a message into io.ErrUnexpectedEOF: the message was truncated.
func noEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

func parseContentLength(v string) (int64, bool) {
	if v == "" || len(v) > 19 {
		return 0, false
	}
	var n int64
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		if n > (math.MaxInt64-int64(c-'0'))/10 {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// forEachToken calls fn for each non-empty element of a comma-separated list (httptok).
func forEachToken(v string, fn func(string)) { httptok.ForEachToken(v, fn) }

func trimOWS(b []byte, s, e int) (int, int) {
	for s < e && (b[s] == ' ' || b[s] == '\t') {
		s++
	}
	for e > s && (b[e-1] == ' ' || b[e-1] == '\t') {
		e--
	}
	return s, e
}

// tchar is RFC 9110 §5.6.2 token characters.
var tchar = func() (t [256]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c] = true
		t[c-'a'+'A'] = true
	}
	for _, c := range "!#$%&'*+-.^_`|~" {
		t[c] = true
	}
	return t
}()

func validToken(b []byte) bool {
	for _, c := range b {
		if !tchar[c] {
			return false
		}
	}
	return len(b) > 0
}

func validTokenString(s string) bool {
	for i := 0; i < len(s); i++ {
		if !tchar[s[i]] {
			return false
		}
	}
	return len(s) > 0
}

// validValue rejects control characters other than HTAB, and DEL (RFC 9110 §5.5); obs-text is
// allowed.
func validValue[T string | []byte](b T) bool {
	for i := 0; i < len(b); i++ {
		if c := b[i]; (c < ' ' && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}

func unhex(c byte) int {
	switch {
	case '0' <= c && c <= '9':
		return int(c - '0')
	case 'a' <= c && c <= 'f':
		return int(c-'a') + 10
	case 'A' <= c && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}

// EqualFold compares ASCII case-insensitively without allocating (header names and tokens).
func EqualFold(a, b string) bool { return equalFold(a, b) }

// equalFold compares ASCII case-insensitively without allocating (httptok).
func equalFold(a, b string) bool { return httptok.EqualFold(a, b) }
