package exchange

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
	"time"
)

// errMalformed stands for "any *MalformedError" in test tables.
var errMalformed = errors.New("malformed")

func checkErr(t *testing.T, got, want error) {
	t.Helper()
	switch {
	case want == nil && got == nil:
	case want == nil || got == nil:
		t.Fatalf("error = %v, want %v", got, want)
	case want == errMalformed:
		var me *MalformedError
		if !errors.As(got, &me) {
			t.Fatalf("error = %v (%T), want a *MalformedError", got, got)
		}
	case !errors.Is(got, want):
		t.Fatalf("error = %v, want %v", got, want)
	}
}

// framingOf is the part of a Head the tables compare.
type framingOf struct {
	CL                                          int64
	Chunked, CloseDelim, NoBody, Close, Upgrade bool
}

func fr(h *Head) framingOf {
	return framingOf{h.ContentLength, h.Chunked, h.CloseDelimited, h.NoBody, h.Close, h.Upgrade}
}

func TestReadRequestHead(t *testing.T) {
	tests := []struct {
		name    string
		in      string // one request, head and body
		head    string // expected Raw; "" means the whole input up to the body
		body    string // raw body bytes CopyBody must forward
		method  string
		target  string
		framing framingOf
		err     error
	}{
		{
			name:    "get without body",
			in:      "GET /mcp HTTP/1.1\r\nHost: a\r\nAccept: text/event-stream\r\n\r\n",
			method:  "GET",
			target:  "/mcp",
			framing: framingOf{CL: -1, NoBody: true},
		},
		{
			name:    "post with content-length",
			in:      "POST /mcp HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello",
			body:    "hello",
			method:  "POST",
			target:  "/mcp",
			framing: framingOf{CL: 5},
		},
		{
			name:    "content-length zero",
			in:      "POST / HTTP/1.1\r\nContent-Length: 0\r\n\r\n",
			method:  "POST",
			target:  "/",
			framing: framingOf{CL: 0},
		},
		{
			name:    "chunked with extensions and trailers",
			in:      "POST /mcp HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5;name=\"v a\";x\r\nhello\r\n0A \r\n0123456789\r\n0;last\r\nX-Trailer: 1\r\nChecksum: abc\r\n\r\n",
			body:    "5;name=\"v a\";x\r\nhello\r\n0A \r\n0123456789\r\n0;last\r\nX-Trailer: 1\r\nChecksum: abc\r\n\r\n",
			method:  "POST",
			target:  "/mcp",
			framing: framingOf{CL: -1, Chunked: true},
		},
		{
			name:    "transfer-encoding list ending in chunked",
			in:      "POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\nTransfer-Encoding: CHUNKED\r\n\r\n0\r\n\r\n",
			body:    "0\r\n\r\n",
			method:  "POST",
			target:  "/",
			framing: framingOf{CL: -1, Chunked: true},
		},
		{
			name:    "lf only line endings",
			in:      "POST /x HTTP/1.1\nHost: a\nContent-Length: 2\n\nok",
			body:    "ok",
			method:  "POST",
			target:  "/x",
			framing: framingOf{CL: 2},
		},
		{
			name:    "chunked with lf only lines",
			in:      "POST /x HTTP/1.1\nTransfer-Encoding: chunked\n\n2\nok\n0\n\n",
			body:    "2\nok\n0\n\n",
			method:  "POST",
			target:  "/x",
			framing: framingOf{CL: -1, Chunked: true},
		},
		{
			name:    "leading empty lines kept in raw",
			in:      "\r\n\r\nGET / HTTP/1.1\r\n\r\n",
			method:  "GET",
			target:  "/",
			framing: framingOf{CL: -1, NoBody: true},
		},
		{
			name:    "identical duplicate content-length",
			in:      "POST / HTTP/1.1\r\nContent-Length: 3\r\ncontent-length: 3\r\n\r\nabc",
			body:    "abc",
			method:  "POST",
			target:  "/",
			framing: framingOf{CL: 3},
		},
		{
			name:    "header whitespace and case kept",
			in:      "GET / HTTP/1.1\r\nX-Odd-Case:   spaced value \t\r\nhOsT:a\r\n\r\n",
			method:  "GET",
			target:  "/",
			framing: framingOf{CL: -1, NoBody: true},
		},
		{
			name:    "connection close",
			in:      "GET / HTTP/1.1\r\nConnection: keep-alive, Close\r\n\r\n",
			method:  "GET",
			target:  "/",
			framing: framingOf{CL: -1, NoBody: true, Close: true},
		},
		{
			name:    "http/1.0 closes by default",
			in:      "GET / HTTP/1.0\r\n\r\n",
			method:  "GET",
			target:  "/",
			framing: framingOf{CL: -1, NoBody: true, Close: true},
		},
		{
			name:    "http/1.0 keep-alive",
			in:      "GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
			method:  "GET",
			target:  "/",
			framing: framingOf{CL: -1, NoBody: true},
		},
		{
			name:    "upgrade",
			in:      "GET /ws HTTP/1.1\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
			method:  "GET",
			target:  "/ws",
			framing: framingOf{CL: -1, NoBody: true, Upgrade: true},
		},
		{
			name:    "upgrade header without connection token",
			in:      "GET /ws HTTP/1.1\r\nUpgrade: websocket\r\n\r\n",
			method:  "GET",
			target:  "/ws",
			framing: framingOf{CL: -1, NoBody: true},
		},
		{
			name:    "absolute-form target",
			in:      "GET http://example.com/mcp?x=1 HTTP/1.1\r\n\r\n",
			method:  "GET",
			target:  "http://example.com/mcp?x=1",
			framing: framingOf{CL: -1, NoBody: true},
		},
		{name: "content-length with transfer-encoding", in: "POST / HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n", err: errMalformed},
		{name: "transfer-encoding before content-length", in: "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n", err: errMalformed},
		{name: "differing duplicate content-length", in: "POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n", err: errMalformed},
		{name: "content-length list", in: "POST / HTTP/1.1\r\nContent-Length: 5, 5\r\n\r\n", err: errMalformed},
		{name: "negative content-length", in: "POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n", err: errMalformed},
		{name: "signed content-length", in: "POST / HTTP/1.1\r\nContent-Length: +5\r\n\r\n", err: errMalformed},
		{name: "empty content-length", in: "POST / HTTP/1.1\r\nContent-Length:\r\n\r\n", err: errMalformed},
		{name: "overflowing content-length", in: "POST / HTTP/1.1\r\nContent-Length: 99999999999999999999\r\n\r\n", err: errMalformed},
		{name: "transfer-encoding not ending in chunked", in: "POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n", err: errMalformed},
		{name: "chunked twice", in: "POST / HTTP/1.1\r\nTransfer-Encoding: chunked, chunked\r\n\r\n", err: errMalformed},
		{name: "transfer-encoding in http/1.0", in: "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", err: errMalformed},
		{name: "transfer-encoding trailing comma", in: "POST / HTTP/1.1\r\nTransfer-Encoding: chunked,\r\n\r\n", err: errMalformed},
		{name: "transfer-encoding leading comma", in: "POST / HTTP/1.1\r\nTransfer-Encoding: ,chunked\r\n\r\n", err: errMalformed},
		{name: "transfer-encoding trailing tab", in: "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\t\r\n\r\n", err: errMalformed},
		{name: "transfer-encoding empty", in: "POST / HTTP/1.1\r\nTransfer-Encoding:\r\n\r\n", err: errMalformed},
		{name: "transfer-encoding parameter", in: "POST / HTTP/1.1\r\nTransfer-Encoding: chunked;x=1\r\n\r\n", err: errMalformed},
		{name: "space before colon", in: "GET / HTTP/1.1\r\nHost : a\r\n\r\n", err: errMalformed},
		{name: "no colon", in: "GET / HTTP/1.1\r\nHost a\r\n\r\n", err: errMalformed},
		{name: "empty header name", in: "GET / HTTP/1.1\r\n: a\r\n\r\n", err: errMalformed},
		{name: "ctl in value", in: "GET / HTTP/1.1\r\nX: a\x01b\r\n\r\n", err: errMalformed},
		{name: "nul in value", in: "GET / HTTP/1.1\r\nX: a\x00b\r\n\r\n", err: errMalformed},
		{name: "del in value", in: "GET / HTTP/1.1\r\nX: a\x7fb\r\n\r\n", err: errMalformed},
		{name: "bare cr in value", in: "GET / HTTP/1.1\r\nX: a\rContent-Length: 5\r\n\r\n", err: errMalformed},
		{name: "obs-fold in request", in: "GET / HTTP/1.1\r\nX: a\r\n b\r\n\r\n", err: errMalformed},
		{name: "duplicate host", in: "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", err: errMalformed},
		{name: "missing target", in: "GET HTTP/1.1\r\n\r\n", err: errMalformed},
		{name: "double space in request line", in: "GET  / HTTP/1.1\r\n\r\n", err: errMalformed},
		{name: "bad method", in: "G(T / HTTP/1.1\r\n\r\n", err: errMalformed},
		{name: "http/2 preface", in: "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", err: errMalformed},
		{name: "lowercase version", in: "GET / http/1.1\r\n\r\n", err: errMalformed},
		{name: "non-ascii target", in: "GET /\xff HTTP/1.1\r\n\r\n", err: errMalformed},
		{name: "truncated head", in: "GET / HTTP/1.1\r\nHost: a\r\n", err: io.ErrUnexpectedEOF},
		{name: "truncated request line", in: "GET / HT", err: io.ErrUnexpectedEOF},
		{name: "empty input", in: "", err: io.EOF},
		{name: "too many headers", in: "GET / HTTP/1.1\r\n" + strings.Repeat("X: y\r\n", 101) + "\r\n", err: errMalformed},
		{name: "oversized head", in: "GET / HTTP/1.1\r\nX: " + strings.Repeat("a", 70<<10) + "\r\n\r\n", err: ErrHeaderTooLarge},
		{name: "oversized single line without newline", in: "GET /" + strings.Repeat("a", 200<<10), err: ErrHeaderTooLarge},
		{name: "endless empty lines", in: strings.Repeat("\r\n", 40<<10), err: ErrHeaderTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := NewReader(strings.NewReader(tt.in), Limits{})
			h, err := r.ReadRequestHead()
			checkErr(t, err, tt.err)
			if err != nil {
				return
			}
			wantHead := tt.in[:len(tt.in)-len(tt.body)]
			if string(h.Raw) != wantHead {
				t.Errorf("Raw = %q, want %q", h.Raw, wantHead)
			}
			if h.Method != tt.method || h.Target != tt.target {
				t.Errorf("method, target = %q %q, want %q %q", h.Method, h.Target, tt.method, tt.target)
			}
			if got := fr(h); got != tt.framing {
				t.Errorf("framing = %+v, want %+v", got, tt.framing)
			}
			var out bytes.Buffer
			n, err := r.CopyBody(&out, h)
			if err != nil {
				t.Fatalf("CopyBody: %v", err)
			}
			if out.String() != tt.body || n != int64(len(tt.body)) {
				t.Errorf("body = %q (%d), want %q", out.String(), n, tt.body)
			}
			if r.Buffered() != 0 {
				t.Errorf("%d bytes left over", r.Buffered())
			}
		})
	}
}

func TestHeaderValues(t *testing.T) {
	in := "GET / HTTP/1.1\r\nX-Odd-Case:   spaced value \t\r\nhOsT:a\r\nEmpty:\r\n\r\n"
	h, err := NewReader(strings.NewReader(in), Limits{}).ReadRequestHead()
	if err != nil {
		t.Fatal(err)
	}
	want := []Header{{"X-Odd-Case", "spaced value"}, {"hOsT", "a"}, {"Empty", ""}}
	if len(h.Headers) != len(want) {
		t.Fatalf("headers = %q", h.Headers)
	}
	for i := range want {
		if h.Headers[i] != want[i] {
			t.Errorf("header %d = %q, want %q", i, h.Headers[i], want[i])
		}
	}
	if v, ok := h.Get("x-odd-case"); !ok || v != "spaced value" {
		t.Errorf("Get = %q %v", v, ok)
	}
	if _, ok := h.Get("missing"); ok {
		t.Error("Get found a missing header")
	}
}

func TestManyHeadersBeyondInline(t *testing.T) {
	in := "GET / HTTP/1.1\r\n" + strings.Repeat("X: y\r\n", 40) + "Last: z\r\n\r\n"
	h, err := NewReader(strings.NewReader(in), Limits{}).ReadRequestHead()
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Headers) != 41 || h.Headers[40] != (Header{"Last", "z"}) {
		t.Fatalf("got %d headers, last %q", len(h.Headers), h.Headers[len(h.Headers)-1])
	}
}

func TestReadResponseHead(t *testing.T) {
	tests := []struct {
		name    string
		method  string // of the request answered
		in      string
		body    string
		status  int
		reason  string
		framing framingOf
		err     error
	}{
		{name: "content-length", method: "POST", in: "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", body: "ok", status: 200, reason: "OK", framing: framingOf{CL: 2}},
		{name: "chunked sse", method: "GET", in: "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n7\r\ndata: a\r\n7\r\ndata: b\r\n0\r\n\r\n", body: "7\r\ndata: a\r\n7\r\ndata: b\r\n0\r\n\r\n", status: 200, reason: "OK", framing: framingOf{CL: -1, Chunked: true}},
		{name: "close-delimited", method: "GET", in: "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\nevent: endpoint\ndata: /m\n\n", body: "event: endpoint\ndata: /m\n\n", status: 200, reason: "OK", framing: framingOf{CL: -1, CloseDelim: true, Close: true}},
		{name: "non-chunked transfer coding is close-delimited", method: "GET", in: "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\nxyz", body: "xyz", status: 200, reason: "OK", framing: framingOf{CL: -1, CloseDelim: true, Close: true}},
		// Issue 29: Go reads an HTTP/1.0 body with Transfer-Encoding to close, undici de-chunks it.
		{name: "http/1.0 chunked", method: "GET", in: "HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", err: errMalformed},
		{name: "http/1.0 non-chunked coding", method: "GET", in: "HTTP/1.0 200 OK\r\nTransfer-Encoding: gzip\r\n\r\nxyz", err: errMalformed},
		{name: "http/1.0 keep-alive chunked", method: "GET", in: "HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", err: errMalformed},
		{name: "http/1.0 204 with transfer-encoding", method: "GET", in: "HTTP/1.0 204 No Content\r\nTransfer-Encoding: chunked\r\n\r\n", err: errMalformed},
		{name: "chunked upper case", method: "GET", in: "HTTP/1.1 200 OK\r\nTransfer-Encoding: CHUNKED\r\n\r\n0\r\n\r\n", body: "0\r\n\r\n", status: 200, reason: "OK", framing: framingOf{CL: -1, Chunked: true}},
		{name: "codings with spaces", method: "GET", in: "HTTP/1.1 200 OK\r\nTransfer-Encoding:  gzip ,  chunked  \r\n\r\n0\r\n\r\n", body: "0\r\n\r\n", status: 200, reason: "OK", framing: framingOf{CL: -1, Chunked: true}},
		{name: "codings over two lines", method: "GET", in: "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", body: "0\r\n\r\n", status: 200, reason: "OK", framing: framingOf{CL: -1, Chunked: true}},
		// Issue 29: values undici and Go read differently (undici: "chunked," is not chunked,
		// ",chunked" is; a trailing tab is not trimmed).
		{name: "chunked trailing comma", method: "GET", in: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked,\r\n\r\n", err: errMalformed},
		{name: "chunked trailing comma space", method: "GET", in: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, \r\n\r\n", err: errMalformed},
		{name: "leading comma", method: "GET", in: "HTTP/1.1 200 OK\r\nTransfer-Encoding: , chunked\r\n\r\n", err: errMalformed},
		{name: "double comma", method: "GET", in: "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip,,chunked\r\n\r\n", err: errMalformed},
		{name: "empty transfer-encoding", method: "GET", in: "HTTP/1.1 200 OK\r\nTransfer-Encoding: \r\n\r\n", err: errMalformed},
		{name: "empty transfer-encoding line beside chunked", method: "GET", in: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding:\r\n\r\n", err: errMalformed},
		{name: "chunked trailing tab", method: "GET", in: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\t\r\n\r\n", err: errMalformed},
		{name: "tab before chunked", method: "GET", in: "HTTP/1.1 200 OK\r\nTransfer-Encoding:\tchunked\r\n\r\n", err: errMalformed},
		{name: "chunked with parameter", method: "GET", in: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked;q=1\r\n\r\n", err: errMalformed},
		{name: "quoted chunked", method: "GET", in: "HTTP/1.1 200 OK\r\nTransfer-Encoding: \"chunked\"\r\n\r\n", err: errMalformed},
		{name: "two words", method: "GET", in: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked x\r\n\r\n", err: errMalformed},
		{name: "obs-text after chunked", method: "GET", in: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\xc2\xa0\r\n\r\n", err: errMalformed},
		{name: "obs-fold in transfer-encoding", method: "GET", in: "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip,\r\n chunked\r\n\r\n", err: errMalformed},
		{name: "obs-fold opening transfer-encoding", method: "GET", in: "HTTP/1.1 200 OK\r\nTransfer-Encoding:\r\n chunked\r\n\r\n", err: errMalformed},
		{name: "obs-fold in content-length", method: "GET", in: "HTTP/1.1 200 OK\r\nContent-Length:\r\n 2\r\n\r\nok", err: errMalformed},
		{name: "head response", method: "HEAD", in: "HTTP/1.1 200 OK\r\nContent-Length: 1234\r\n\r\n", status: 200, reason: "OK", framing: framingOf{CL: 1234, NoBody: true}},
		{name: "204", method: "POST", in: "HTTP/1.1 204 No Content\r\n\r\n", status: 204, reason: "No Content", framing: framingOf{CL: -1, NoBody: true}},
		{name: "304 with content-length", method: "GET", in: "HTTP/1.1 304 Not Modified\r\nContent-Length: 99\r\n\r\n", status: 304, reason: "Not Modified", framing: framingOf{CL: 99, NoBody: true}},
		{name: "100 continue", method: "POST", in: "HTTP/1.1 100 Continue\r\n\r\n", status: 100, reason: "Continue", framing: framingOf{CL: -1, NoBody: true}},
		{name: "101 switching", method: "GET", in: "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n", status: 101, reason: "Switching Protocols", framing: framingOf{CL: -1, NoBody: true, Upgrade: true}},
		{name: "connect 200 turns opaque", method: "CONNECT", in: "HTTP/1.1 200 Connection established\r\n\r\n", status: 200, reason: "Connection established", framing: framingOf{CL: -1, NoBody: true, Upgrade: true}},
		{name: "connect 403 is a normal response", method: "CONNECT", in: "HTTP/1.1 403 Forbidden\r\nContent-Length: 1\r\n\r\nx", body: "x", status: 403, reason: "Forbidden", framing: framingOf{CL: 1}},
		{name: "no reason phrase", method: "GET", in: "HTTP/1.1 200\r\nContent-Length: 0\r\n\r\n", status: 200, framing: framingOf{CL: 0}},
		{name: "empty reason phrase", method: "GET", in: "HTTP/1.1 200 \r\nContent-Length: 0\r\n\r\n", status: 200, framing: framingOf{CL: 0}},
		{name: "connection close", method: "GET", in: "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n", status: 200, reason: "OK", framing: framingOf{CL: 0, Close: true}},
		{name: "obs-fold in response forwarded", method: "GET", in: "HTTP/1.1 200 OK\r\nX-Long: a\r\n  b\r\nContent-Length: 0\r\n\r\n", status: 200, reason: "OK", framing: framingOf{CL: 0}},
		{name: "content-length with transfer-encoding", method: "GET", in: "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n", err: errMalformed},
		{name: "differing content-length", method: "GET", in: "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n", err: errMalformed},
		{name: "bad status code", method: "GET", in: "HTTP/1.1 2x0 OK\r\n\r\n", err: errMalformed},
		{name: "status below 100", method: "GET", in: "HTTP/1.1 099 Huh\r\n\r\n", err: errMalformed},
		{name: "no space after status", method: "GET", in: "HTTP/1.1 200OK\r\n\r\n", err: errMalformed},
		{name: "not http", method: "GET", in: "SSH-2.0-OpenSSH\r\n\r\n", err: errMalformed},
		{name: "truncated", method: "GET", in: "HTTP/1.1 200 OK\r\nContent-", err: io.ErrUnexpectedEOF},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := NewReader(strings.NewReader(tt.in), Limits{})
			h, err := r.ReadResponseHead(tt.method)
			checkErr(t, err, tt.err)
			if err != nil {
				return
			}
			if want := tt.in[:len(tt.in)-len(tt.body)]; string(h.Raw) != want {
				t.Errorf("Raw = %q, want %q", h.Raw, want)
			}
			if h.Status != tt.status || h.Reason != tt.reason {
				t.Errorf("status = %d %q, want %d %q", h.Status, h.Reason, tt.status, tt.reason)
			}
			if got := fr(h); got != tt.framing {
				t.Errorf("framing = %+v, want %+v", got, tt.framing)
			}
			var out bytes.Buffer
			if _, err := r.CopyBody(&out, h); err != nil {
				t.Fatalf("CopyBody: %v", err)
			}
			if out.String() != tt.body {
				t.Errorf("body = %q, want %q", out.String(), tt.body)
			}
		})
	}
}

func TestObsFoldValue(t *testing.T) {
	h, err := NewReader(strings.NewReader("HTTP/1.1 200 OK\r\nX-Long: a\r\n  b\r\n\tc\r\n\r\n"), Limits{}).ReadResponseHead("GET")
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := h.Get("X-Long"); v != "a b c" {
		t.Errorf("folded value = %q", v)
	}
}

func TestCopyBodyErrors(t *testing.T) {
	tests := []struct {
		name   string
		resp   bool
		in     string
		copied string // raw bytes forwarded before the error
		err    error
	}{
		{name: "bad chunk size", in: "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", err: errMalformed},
		{name: "empty chunk size", in: "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n\r\n", err: errMalformed},
		{name: "chunk size with prefix", in: "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0x5\r\nhello\r\n", err: errMalformed},
		{name: "chunk size overflow", in: "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n8000000000000000\r\n", err: errMalformed},
		{name: "chunk size negative", in: "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n-1\r\n", err: errMalformed},
		{name: "ctl in chunk extension", in: "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1;a\x00\r\nx\r\n", err: errMalformed},
		{name: "bare cr after chunk size", in: "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1\rx\r\n", err: errMalformed},
		{name: "chunk data longer than size", in: "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nxy\r\n0\r\n\r\n", err: errMalformed},
		{name: "chunk line too long", in: "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1;" + strings.Repeat("a", 5000) + "\r\n", err: errMalformed},
		{name: "chunk line too long without newline", in: "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n" + strings.Repeat("0", 5000), err: errMalformed},
		{name: "bad trailer", in: "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nnot a trailer\r\n\r\n", err: errMalformed},
		{name: "truncated chunk data", in: "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel", copied: "5\r\nhel", err: io.ErrUnexpectedEOF},
		{name: "truncated before last chunk", in: "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n", copied: "5\r\nhello\r\n", err: io.ErrUnexpectedEOF},
		{name: "truncated content-length", in: "POST / HTTP/1.1\r\nContent-Length: 10\r\n\r\nabc", copied: "abc", err: io.ErrUnexpectedEOF},
		{name: "truncated response", resp: true, in: "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", copied: "abc", err: io.ErrUnexpectedEOF},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := NewReader(strings.NewReader(tt.in), Limits{})
			var h *Head
			var err error
			if tt.resp {
				h, err = r.ReadResponseHead("GET")
			} else {
				h, err = r.ReadRequestHead()
			}
			if err != nil {
				t.Fatalf("head: %v", err)
			}
			var out bytes.Buffer
			_, err = r.CopyBody(&out, h)
			checkErr(t, err, tt.err)
			if out.String() != tt.copied {
				t.Errorf("forwarded %q before the error, want %q", out.String(), tt.copied)
			}
		})
	}
}

// TestSequences reads whole connections' worth of messages and checks that heads plus copied
// bodies reproduce the input byte for byte.
func TestSequences(t *testing.T) {
	tests := []struct {
		name     string
		requests bool
		methods  []string // request methods, for response sequences
		in       string
		heads    int
		rest     string // bytes left buffered (after an upgrade)
	}{
		{
			name:     "pipelined requests",
			requests: true,
			in: "POST /mcp HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc" +
				"GET /mcp HTTP/1.1\r\n\r\n" +
				"POST /mcp HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nxyz\r\n0\r\n\r\n" +
				"DELETE /mcp HTTP/1.1\r\nMcp-Session-Id: s\r\n\r\n",
			heads: 4,
		},
		{
			name:     "keep-alive many requests",
			requests: true,
			in:       strings.Repeat("POST /mcp HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n\r\n{}", 500),
			heads:    500,
		},
		{
			name:    "100-continue then final response",
			methods: []string{"POST", "POST"},
			in:      "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
			heads:   2,
		},
		{
			name:    "head then get",
			methods: []string{"HEAD", "GET"},
			in:      "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
			heads:   2,
		},
		{
			name:    "204 and 304 then chunked",
			methods: []string{"POST", "GET", "GET"},
			in:      "HTTP/1.1 204 No Content\r\n\r\nHTTP/1.1 304 Not Modified\r\nContent-Length: 7\r\n\r\nHTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2;e=1\r\nhi\r\n0\r\nT: v\r\n\r\n",
			heads:   3,
		},
		{
			name:    "101 leaves the new protocol buffered",
			methods: []string{"GET"},
			in:      "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n\x81\x05hello",
			heads:   1,
			rest:    "\x81\x05hello",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := NewReader(strings.NewReader(tt.in), Limits{})
			var out bytes.Buffer
			heads := 0
			for i := 0; ; i++ {
				var h *Head
				var err error
				if tt.requests {
					h, err = r.ReadRequestHead()
				} else {
					if i == len(tt.methods) {
						break
					}
					h, err = r.ReadResponseHead(tt.methods[i])
				}
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatalf("head %d: %v", i, err)
				}
				heads++
				out.Write(h.Raw)
				if _, err := r.CopyBody(&out, h); err != nil {
					t.Fatalf("body %d: %v", i, err)
				}
				if h.Upgrade {
					break
				}
			}
			if heads != tt.heads {
				t.Errorf("read %d heads, want %d", heads, tt.heads)
			}
			rest, _ := r.BufioReader().Peek(r.Buffered())
			if string(rest) != tt.rest {
				t.Errorf("left %q, want %q", rest, tt.rest)
			}
			if got := out.String() + string(rest); got != tt.in {
				t.Errorf("forwarded bytes differ from input:\n got %q\nwant %q", got, tt.in)
			}
		})
	}
}

// segmentReader returns its segments one per Read, like a socket receiving separate writes.
type segmentReader struct{ segs []string }

func (s *segmentReader) Read(p []byte) (int, error) {
	if len(s.segs) == 0 {
		return 0, io.EOF
	}
	n := copy(p, s.segs[0])
	if n < len(s.segs[0]) {
		s.segs[0] = s.segs[0][n:]
	} else {
		s.segs = s.segs[1:]
	}
	return n, nil
}

type recordingWriter struct{ writes []string }

func (w *recordingWriter) Write(p []byte) (int, error) {
	w.writes = append(w.writes, string(p))
	return len(p), nil
}

// TestCopyBodyWritesEachReadAlone is the rule the Node SDK 1.x client depends on: what arrives in
// one read leaves in one write, never merged with the next read and never held back.
func TestCopyBodyWritesEachReadAlone(t *testing.T) {
	tests := []struct {
		name   string
		head   string
		segs   []string // body as it arrives, read by read
		writes []string // writes expected
	}{
		{
			name:   "chunked sse events",
			head:   "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
			segs:   []string{"1a\r\nevent: progress\ndata: 1\n\n\r\n", "18\r\nevent: result\ndata: 2\n\n\r\n", "0\r\n\r\n"},
			writes: []string{"1a\r\nevent: progress\ndata: 1\n\n\r\n", "18\r\nevent: result\ndata: 2\n\n\r\n", "0\r\n\r\n"},
		},
		{
			name:   "chunk data split across reads is written as it comes",
			head:   "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
			segs:   []string{"a\r\n01234", "56789\r\n", "0\r\n\r\n"},
			writes: []string{"a\r\n01234", "56789\r\n", "0\r\n\r\n"},
		},
		{
			name:   "a partial size line waits for the rest of itself only",
			head:   "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
			segs:   []string{"2\r\nab\r\n1", "0\r\n0123456789abcdef\r\n0\r\n\r\n"},
			writes: []string{"2\r\nab\r\n", "10\r\n0123456789abcdef\r\n0\r\n\r\n"},
		},
		{
			name:   "close-delimited sse",
			head:   "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n",
			segs:   []string{"event: endpoint\ndata: /messages?sessionId=1\n\n", "data: {}\n\n", "data: {}\n\n"},
			writes: []string{"event: endpoint\ndata: /messages?sessionId=1\n\n", "data: {}\n\n", "data: {}\n\n"},
		},
		{
			name:   "content-length",
			head:   "HTTP/1.1 200 OK\r\nContent-Length: 12\r\n\r\n",
			segs:   []string{"hello ", "world!"},
			writes: []string{"hello ", "world!"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := &segmentReader{segs: append([]string{tt.head}, tt.segs...)}
			r := NewReader(src, Limits{})
			h, err := r.ReadResponseHead("GET")
			if err != nil {
				t.Fatal(err)
			}
			var w recordingWriter
			if _, err := r.CopyBody(&w, h); err != nil {
				t.Fatal(err)
			}
			if strings.Join(w.writes, "|") != strings.Join(tt.writes, "|") {
				t.Errorf("writes:\n got %q\nwant %q", w.writes, tt.writes)
			}
		})
	}
}

// TestReadHeadOneByteAtATime checks that no parser state is lost across short reads.
func TestReadHeadOneByteAtATime(t *testing.T) {
	in := "POST /mcp HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\nabc\r\n0\r\nT: 1\r\n\r\nGET / HTTP/1.1\r\n\r\n"
	r := NewReader(iotest.OneByteReader(strings.NewReader(in)), Limits{})
	var out bytes.Buffer
	for {
		h, err := r.ReadRequestHead()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		out.Write(h.Raw)
		if _, err := r.CopyBody(&out, h); err != nil {
			t.Fatal(err)
		}
	}
	if out.String() != in {
		t.Errorf("got %q", out.String())
	}
}

func TestReadBodyAndReframe(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		body    string
		chunked bool
		want    string // Reframe(h, "NEW BODY", chunked)
	}{
		{
			name:    "content-length replaced in place",
			in:      "POST /mcp HTTP/1.1\r\nHost: a\r\ncontent-length: 2\r\nX-After: 1\r\n\r\n{}",
			body:    "{}",
			want:    "POST /mcp HTTP/1.1\r\nHost: a\r\ncontent-length: 8\r\nX-After: 1\r\n\r\nNEW BODY",
			chunked: false,
		},
		{
			name:    "chunked to content-length",
			in:      "POST /mcp HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nX-After: 1\r\n\r\n2;ext\r\n{}\r\n1\r\n \r\n0\r\nT: v\r\n\r\n",
			body:    "{} ",
			want:    "POST /mcp HTTP/1.1\r\nHost: a\r\nContent-Length: 8\r\nX-After: 1\r\n\r\nNEW BODY",
			chunked: false,
		},
		{
			name:    "content-length to chunked",
			in:      "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-After: 1\r\n\r\nok",
			body:    "ok",
			want:    "HTTP/1.1 200 OK\r\nX-After: 1\r\nTransfer-Encoding: chunked\r\n\r\n8\r\nNEW BODY\r\n0\r\n\r\n",
			chunked: true,
		},
		{
			name:    "chunked stays chunked",
			in:      "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n",
			body:    "ok",
			want:    "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n8\r\nNEW BODY\r\n0\r\n\r\n",
			chunked: true,
		},
		{
			name:    "no framing header gets content-length",
			in:      "HTTP/1.1 200 OK\r\nX: 1\r\n\r\nto close",
			body:    "to close",
			want:    "HTTP/1.1 200 OK\r\nX: 1\r\nContent-Length: 8\r\n\r\nNEW BODY",
			chunked: false,
		},
		{
			name:    "lf only head keeps lf",
			in:      "POST / HTTP/1.1\nContent-Length: 1\n\nx",
			body:    "x",
			want:    "POST / HTTP/1.1\nContent-Length: 8\n\nNEW BODY",
			chunked: false,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := NewReader(strings.NewReader(tt.in), Limits{})
			var h *Head
			var err error
			if strings.HasPrefix(tt.in, "HTTP/") {
				h, err = r.ReadResponseHead("GET")
			} else {
				h, err = r.ReadRequestHead()
			}
			if err != nil {
				t.Fatal(err)
			}
			body, err := r.ReadBody(h, 1<<20)
			if err != nil {
				t.Fatal(err)
			}
			if string(body) != tt.body {
				t.Errorf("body = %q, want %q", body, tt.body)
			}
			out := Reframe(h, []byte("NEW BODY"), tt.chunked)
			if string(out) != tt.want {
				t.Errorf("Reframe:\n got %q\nwant %q", out, tt.want)
			}
			// The result must parse back to the same body with the same parser.
			r2 := NewReader(bytes.NewReader(out), Limits{})
			var h2 *Head
			if strings.HasPrefix(tt.in, "HTTP/") {
				h2, err = r2.ReadResponseHead("GET")
			} else {
				h2, err = r2.ReadRequestHead()
			}
			if err != nil {
				t.Fatal(err)
			}
			if b2, err := r2.ReadBody(h2, 1<<20); err != nil || string(b2) != "NEW BODY" {
				t.Errorf("reparsed body = %q, %v", b2, err)
			}
		})
	}
}

func TestReadBodyLimits(t *testing.T) {
	tests := []struct {
		name string
		in   string
		max  int64
		err  error
	}{
		{name: "content-length over max", in: "POST / HTTP/1.1\r\nContent-Length: 10\r\n\r\n0123456789", max: 9, err: ErrBodyTooLarge},
		{name: "content-length at max", in: "POST / HTTP/1.1\r\nContent-Length: 10\r\n\r\n0123456789", max: 10},
		{name: "chunked over max", in: "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n01234\r\n5\r\n56789\r\n0\r\n\r\n", max: 9, err: ErrBodyTooLarge},
		{name: "chunked huge size", in: "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n7fffffffffffffff\r\n", max: 1 << 20, err: ErrBodyTooLarge},
		{name: "close-delimited over max", in: "HTTP/1.1 200 OK\r\n\r\n0123456789", max: 9, err: ErrBodyTooLarge},
		{name: "truncated chunked", in: "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n01", max: 100, err: io.ErrUnexpectedEOF},
		{name: "chunk without crlf", in: "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1\r\n01\r\n", max: 100, err: errMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := NewReader(strings.NewReader(tt.in), Limits{})
			var h *Head
			var err error
			if strings.HasPrefix(tt.in, "HTTP/") {
				h, err = r.ReadResponseHead("GET")
			} else {
				h, err = r.ReadRequestHead()
			}
			if err != nil {
				t.Fatal(err)
			}
			_, err = r.ReadBody(h, tt.max)
			checkErr(t, err, tt.err)
		})
	}
}

// notifyWriter reports each write on a channel.
type notifyWriter struct{ writes chan string }

func (w *notifyWriter) Write(p []byte) (int, error) {
	w.writes <- string(p)
	return len(p), nil
}

// TestForwardNeverHoldsTheHead: forward may send a head together with body bytes that came with
// it, but when none did, the head goes out alone before the reader waits for the body.
func TestForwardNeverHoldsTheHead(t *testing.T) {
	const head = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
	pr, pw := io.Pipe()
	r := NewReader(pr, Limits{})
	go pw.Write([]byte(head))
	h, err := r.ReadResponseHead("GET")
	if err != nil {
		t.Fatal(err)
	}
	w := &notifyWriter{writes: make(chan string, 10)}
	done := make(chan error, 1)
	go func() {
		n, err := r.forward(w, h, h.Raw, nil)
		if err == nil && n != int64(len(head)+len("3\r\nabc\r\n0\r\n\r\n")) {
			err = errors.New("wrong count")
		}
		done <- err
	}()
	select {
	case got := <-w.writes:
		if got != head {
			t.Fatalf("first write %q", got)
		}
	case <-time.After(testTimeout):
		t.Fatal("head held back until the body arrives")
	}
	pw.Write([]byte("3\r\nabc\r\n0\r\n\r\n"))
	if got := <-w.writes; got != "3\r\nabc\r\n0\r\n\r\n" {
		t.Fatalf("second write %q", got)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// ReplaceInResponseHeaders' edit keeps every field in place (two fields of a name stay two),
// replaces inside values, continuations and the reason phrase, and leaves framing fields alone.
func TestEditHeadReplace(t *testing.T) {
	raw := []byte("HTTP/1.1 401 bad SECRET\r\nSet-Cookie: a=1\r\nSet-Cookie: b=SECRET\r\nX-Long: one\r\n two SECRET\r\nContent-Length: 0\r\n\r\n")
	got := string(editHead(raw, []headerEdit{{replace: true, old: "SECRET", value: "[x]"}}))
	want := "HTTP/1.1 401 bad [x]\r\nSet-Cookie: a=1\r\nSet-Cookie: b=[x]\r\nX-Long: one\r\n two [x]\r\nContent-Length: 0\r\n\r\n"
	if got != want {
		t.Fatalf("got %q\nwant %q", got, want)
	}
}
