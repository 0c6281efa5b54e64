package exchange

import (
	"bytes"
	"errors"
	"io"
	"mcpintercept/exchange/httptok"
	"strings"
	"testing"
)

// fuzzLimits are small so the fuzzer reaches every bound.
var fuzzLimits = Limits{MaxHeaderBytes: 2048, MaxHeaders: 16, MaxChunkLine: 128}

var requestSeeds = []string{
	"GET / HTTP/1.1\r\nHost: a\r\n\r\n",
	"POST /mcp HTTP/1.1\r\nContent-Length: 5\r\nMcp-Method: tools/call\r\nMcp-Name: =?base64?5aSp5rCX?=\r\n\r\nhelloGET / HTTP/1.1\r\n\r\n",
	"POST /mcp HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5;a=b\r\nhello\r\n0\r\nT: 1\r\n\r\n",
	"POST /x HTTP/1.1\nTransfer-Encoding: chunked\n\n2\nok\n0\n\n",
	"\r\nGET /sse HTTP/1.0\r\nAccept: text/event-stream\r\nConnection: keep-alive\r\n\r\n",
	"GET /ws HTTP/1.1\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n\x81\x00",
	"POST /message?sessionId=1 HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}",
	"POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx",
	"POST / HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
	"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffff\r\n",
	"GET / HTTP/1.1\r\nX: a\r\n b\r\n\r\n",
}

var responseSeeds = []struct{ method, data string }{
	{"GET", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"},
	{"POST", "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n7\r\ndata: a\r\n0\r\n\r\n"},
	{"GET", "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\nevent: endpoint\ndata: /m\n\n"},
	{"HEAD", "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n"},
	{"GET", "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n\x81\x05hello"},
	{"CONNECT", "HTTP/1.1 200 Connection established\r\n\r\nopaque"},
	{"GET", "HTTP/1.0 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\nxyz"},
	{"GET", "HTTP/1.1 304 Not Modified\r\nContent-Length: 9\r\n\r\nHTTP/1.1 200\r\nX: a\r\n\tb\r\nContent-Length: 0\r\n\r\n"},
}

// knownReadError reports errors a reader is allowed to return on arbitrary input.
func knownReadError(err error) bool {
	var me *MalformedError
	return errors.As(err, &me) || errors.Is(err, ErrHeaderTooLarge) || err == io.EOF || err == io.ErrUnexpectedEOF
}

// checkStream reads messages from data until an error and requires that the heads and copied
// bodies are exactly a prefix of data: the reader never invents, drops or reorders a byte.
func checkStream(t *testing.T, data []byte, read func(r *Reader, i int) (*Head, error)) {
	r := NewReader(bytes.NewReader(data), fuzzLimits)
	consumed := 0
	// Every message consumes at least one byte, so this bounds the loop.
	for i := 0; i <= len(data); i++ {
		h, err := read(r, i)
		if err != nil {
			if !knownReadError(err) {
				t.Fatalf("message %d: unexpected error %v", i, err)
			}
			return
		}
		if len(h.Raw) == 0 || len(h.Raw) > fuzzLimits.MaxHeaderBytes || len(h.Headers) > fuzzLimits.MaxHeaders {
			t.Fatalf("head of %d bytes, %d headers: beyond limits", len(h.Raw), len(h.Headers))
		}
		if !bytes.HasPrefix(data[consumed:], h.Raw) {
			t.Fatalf("Raw %q is not the input at %d", h.Raw, consumed)
		}
		consumed += len(h.Raw)
		if h.Method != "" {
			h.UpgradeProtocols()
		}
		var body bytes.Buffer
		n, err := r.CopyBody(&body, h)
		if n != int64(body.Len()) || !bytes.HasPrefix(data[consumed:], body.Bytes()) {
			t.Fatalf("body %q (n=%d) is not the input at %d", body.Bytes(), n, consumed)
		}
		consumed += body.Len()
		if err != nil {
			if !knownReadError(err) {
				t.Fatalf("body %d: unexpected error %v", i, err)
			}
			return
		}
		if h.Upgrade && h.Method == "" {
			rest, _ := r.BufioReader().Peek(r.Buffered())
			if !bytes.HasPrefix(data[consumed:], rest) {
				t.Fatal("bytes after the switch are not the input")
			}
			return
		}
	}
	t.Fatal("reader did not terminate")
}

// checkReframe decodes the first message's body and re-frames it both ways: the same parser must
// read back the same body (what Level 2 relies on to change a body safely).
func checkReframe(t *testing.T, data []byte, request bool, method string) {
	read := func(r *Reader) (*Head, error) {
		if request {
			return r.ReadRequestHead()
		}
		return r.ReadResponseHead(method)
	}
	r := NewReader(bytes.NewReader(data), fuzzLimits)
	h, err := read(r)
	if err != nil || h.NoBody || h.Upgrade || h.Status/100 == 1 {
		return
	}
	body, err := r.ReadBody(h, 1<<16)
	if err != nil {
		if !knownReadError(err) && !errors.Is(err, ErrBodyTooLarge) {
			t.Fatalf("ReadBody: %v", err)
		}
		return
	}
	for _, chunked := range []bool{false, true} {
		if chunked && h.Proto == "HTTP/1.0" {
			continue
		}
		out := Reframe(h, body, chunked)
		r2 := NewReader(bytes.NewReader(out), Limits{MaxHeaderBytes: 1 << 20, MaxHeaders: 1000})
		h2, err := read(r2)
		if err != nil {
			t.Fatalf("reframed (chunked=%v) %q: %v", chunked, out, err)
		}
		if h2.CloseDelimited {
			continue // a non-chunked transfer coding stays; the body then runs to close
		}
		b2, err := r2.ReadBody(h2, 1<<17)
		if err != nil || !bytes.Equal(b2, body) {
			t.Fatalf("reframed (chunked=%v) %q: body %q, %v; want %q", chunked, out, b2, err, body)
		}
	}
}

func FuzzReadRequestHead(f *testing.F) {
	for _, s := range requestSeeds {
		f.Add([]byte(s))
	}
	// Every framing of the differential (issue 29: Transfer-Encoding variants, HTTP/1.0, folds).
	for _, c := range requestFramings() {
		f.Add([]byte(c.raw))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkStream(t, data, func(r *Reader, _ int) (*Head, error) {
			h, err := r.ReadRequestHead()
			if err == nil {
				// What Serve asks of every head must take any head (level1's FuzzGuards runs the
				// Level 1 checks).
				if protos, asked := h.UpgradeProtocols(); !asked && len(protos) > 0 {
					t.Fatalf("protocols %q without an upgrade asked", protos)
				}
			}
			return h, err
		})
		checkReframe(t, data, true, "")
	})
}

func FuzzReadResponseHead(f *testing.F) {
	for _, s := range responseSeeds {
		f.Add(s.method, []byte(s.data))
	}
	for _, c := range responseFramings() {
		f.Add("GET", []byte(c.raw))
	}
	f.Fuzz(func(t *testing.T, method string, data []byte) {
		checkStream(t, data, func(r *Reader, _ int) (*Head, error) { return r.ReadResponseHead(method) })
		checkReframe(t, data, false, method)
	})
}

// FuzzTransferCodings: a Transfer-Encoding value scanCodings accepts is one every list reader
// splits alike: no empty element, no tab, every element a token, chunked (when present) only last
// and reported as such.
func FuzzTransferCodings(f *testing.F) {
	for _, s := range []string{"chunked", "Chunked", "gzip, chunked", "gzip ,chunked", "chunked,", ",chunked", "chunked, ",
		"chunked, chunked", "gzip,,chunked", "\"chunked\"", "chunked;q=1", "  chunked ", "chunked\t", "", "chunked x", "chunked\xc2\xa0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		var last bool
		if err := scanCodings(v, &last); err != nil {
			var me *MalformedError
			if !errors.As(err, &me) {
				t.Fatalf("error %v is not a *MalformedError", err)
			}
			return
		}
		var toks []string
		httptok.ForEachToken(v, func(s string) { toks = append(toks, s) })
		if len(toks) == 0 || strings.Count(v, ",")+1 != len(toks) || strings.IndexByte(v, '\t') >= 0 {
			t.Fatalf("accepted %q: elements %q", v, toks)
		}
		for i, tk := range toks {
			if !validTokenString(tk) || (equalFold(tk, "chunked") && i != len(toks)-1) {
				t.Fatalf("accepted %q: element %q", v, tk)
			}
		}
		if last != equalFold(toks[len(toks)-1], "chunked") {
			t.Fatalf("accepted %q: chunkedLast = %v", v, last)
		}
	})
}
