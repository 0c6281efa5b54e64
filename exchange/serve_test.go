package exchange

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

const testTimeout = 5 * time.Second

func tcpPair(t testing.TB) (*net.TCPConn, *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			accepted <- nil
			return
		}
		accepted <- c
	}()
	a, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b := <-accepted
	if b == nil {
		t.Fatal("accept failed")
	}
	return a.(*net.TCPConn), b.(*net.TCPConn)
}

// denyName answers 403 to requests whose Mcp-Name starts with prefix: a header-only stage.
type denyName string

func (d denyName) RequestHead(_ context.Context, x *Exchange) Result {
	if name, _ := x.Req.Get("Mcp-Name"); strings.HasPrefix(name, string(d)) {
		x.Answer(http.StatusForbidden, PlainTextHeaders, PlainText("denied"), Verdict{Decision: "deny", Rule: "test"})
		return Stop
	}
	return Continue
}
func (denyName) RequestBody(context.Context, *Exchange) Result   { return Continue }
func (denyName) ResponseHead(context.Context, *Exchange) Result  { return Continue }
func (denyName) ResponseBody(context.Context, *Exchange) Result  { return Continue }
func (denyName) Event(context.Context, *Exchange, *Event) Result { return Continue }
func (denyName) Done(*Exchange)                                  {}

// doneFunc is a stage that only sees exchanges end.
type doneFunc func(*Exchange)

func (doneFunc) RequestHead(context.Context, *Exchange) Result   { return Continue }
func (doneFunc) RequestBody(context.Context, *Exchange) Result   { return Continue }
func (doneFunc) ResponseHead(context.Context, *Exchange) Result  { return Continue }
func (doneFunc) ResponseBody(context.Context, *Exchange) Result  { return Continue }
func (doneFunc) Event(context.Context, *Exchange, *Event) Result { return Continue }
func (f doneFunc) Done(x *Exchange)                              { f(x) }

// record is what a test keeps of an ended exchange.
type record struct {
	path               string
	status             int
	decision           string
	err, uninspected   string
	bytesUp, bytesDown int64
}

type recorder struct {
	mu   sync.Mutex
	recs []record
}

func (r *recorder) stage() Stage {
	return doneFunc(func(x *Exchange) {
		rec := record{status: x.Status, decision: string(x.Verdict.Decision), err: x.Err,
			uninspected: x.Uninspected, bytesUp: x.BytesUp, bytesDown: x.BytesDown}
		if x.Req != nil {
			rec.path = x.Req.Target
		}
		r.mu.Lock()
		r.recs = append(r.recs, rec)
		r.mu.Unlock()
	})
}

func (r *recorder) all() []record {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]record(nil), r.recs...)
}

// writeLog is a net.Conn wrapper (as the engine's are: no writev, no SyscallConn) that keeps
// every Write it is given.
type writeLog struct {
	net.Conn
	n         atomic.Int64
	countOnly bool // count only
	mu        sync.Mutex
	writes    [][]byte
}

func (w *writeLog) Write(b []byte) (int, error) {
	w.n.Add(1)
	if !w.countOnly {
		w.mu.Lock()
		w.writes = append(w.writes, bytes.Clone(b))
		w.mu.Unlock()
	}
	return w.Conn.Write(b)
}

func (w *writeLog) CloseWrite() error { return w.Conn.(*net.TCPConn).CloseWrite() }

func (w *writeLog) all() [][]byte {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([][]byte(nil), w.writes...)
}

func (w *writeLog) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.writes)
}

// env is one client connection through Serve to a test server, on loopback TCP. toClient and
// toServer log what Serve writes each way.
type env struct {
	client, server     *net.TCPConn
	toClient, toServer *writeLog
	rec                *recorder
	finished           chan struct{}
	err                error
}

func newEnv(t testing.TB, o Options, stages ...Stage) *env {
	t.Helper()
	c, pc := tcpPair(t)
	pu, s := tcpPair(t)
	e := &env{client: c, server: s, toClient: &writeLog{Conn: pc}, toServer: &writeLog{Conn: pu},
		rec: &recorder{}, finished: make(chan struct{})}
	stages = append(stages, e.rec.stage())
	log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
	go func() {
		defer close(e.finished)
		e.err = Serve(t.Context(), e.toClient, e.toServer, stages, o, log)
	}()
	t.Cleanup(func() {
		c.Close()
		s.Close()
		select {
		case <-e.finished:
		case <-time.After(testTimeout):
			t.Error("Serve did not return")
		}
	})
	return e
}

func deadline(c net.Conn) { c.SetDeadline(time.Now().Add(testTimeout)) }

func readN(t *testing.T, c net.Conn, n int) []byte {
	t.Helper()
	deadline(c)
	b := make([]byte, n)
	if _, err := io.ReadFull(c, b); err != nil {
		t.Fatalf("read %d bytes: %v (got %q)", n, err, b)
	}
	return b
}

func send(t *testing.T, c net.Conn, s string) {
	t.Helper()
	deadline(c)
	if _, err := io.WriteString(c, s); err != nil {
		t.Fatalf("write: %v", err)
	}
}

func expectEOF(t *testing.T, c net.Conn) {
	t.Helper()
	deadline(c)
	b, err := io.ReadAll(c)
	if err != nil || len(b) != 0 {
		t.Fatalf("want EOF, got %q, %v", b, err)
	}
}

func post(path, body string) string {
	return "POST " + path + " HTTP/1.1\r\nHost: s\r\nContent-Type: application/json\r\nContent-Length: " +
		strconv.Itoa(len(body)) + "\r\n\r\n" + body
}

func okResponse(body string) string {
	return "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
}

func readResponse(t *testing.T, br *bufio.Reader, c net.Conn, method string) (*http.Response, string) {
	t.Helper()
	deadline(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: method})
	if err != nil {
		t.Fatalf("read response: %v", err)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read body: %v", err)
	}
	return resp, string(b)
}

// ---- the seam: two stages that touch no framing code ----

// upperEvents upper-cases the data of every SSE event of every response.
type upperEvents struct{ Base }

func (upperEvents) ResponseHead(_ context.Context, x *Exchange) Result {
	x.WantEvents(0)
	return Continue
}

func (upperEvents) Event(_ context.Context, _ *Exchange, ev *Event) Result {
	if ev.HasData {
		e := *ev
		e.Data = strings.ToUpper(e.Data)
		ev.Replace(EncodeEvent(e))
	}
	return Continue
}

// answerLocal answers every request for /local itself, remembering the request's id on the
// exchange for Done.
type answerLocal struct {
	Base
	mu       sync.Mutex
	answered []string
}

type idKey struct{}

func (a *answerLocal) RequestHead(_ context.Context, x *Exchange) Result {
	id, _ := x.Req.Get("X-Id")
	x.Set(idKey{}, id)
	if strings.HasPrefix(x.Req.Target, "/local") {
		x.Answer(http.StatusOK, []Header{{Name: "Content-Type", Value: "application/json"}},
			[]byte(`{"local":"`+id+`"}`), Verdict{Decision: "deny", Rule: "local", Reason: "answered here"})
		return Stop
	}
	return Continue
}

func (a *answerLocal) Done(x *Exchange) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if x.Status == http.StatusOK && x.Resp == nil {
		a.answered = append(a.answered, x.Get(idKey{}).(string))
	}
}

// TestSeamUpperCaseEvents: a stage that upper-cases every event's data gets each event as soon as
// it is complete; each goes to the client as its own write, in order, and an event it did not
// change (a keepalive comment) goes out byte for byte.
func TestSeamUpperCaseEvents(t *testing.T) {
	for _, chunked := range []bool{true, false} {
		t.Run("chunked="+strconv.FormatBool(chunked), func(t *testing.T) {
			e := newEnv(t, Options{}, upperEvents{})
			send(t, e.client, "GET /sse HTTP/1.1\r\nHost: s\r\nAccept: text/event-stream\r\n\r\n")
			readN(t, e.server, len("GET /sse HTTP/1.1\r\nHost: s\r\nAccept: text/event-stream\r\n\r\n"))
			head := "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
			if chunked {
				head += "Transfer-Encoding: chunked\r\n\r\n"
			} else {
				head += "Connection: close\r\n\r\n"
			}
			send(t, e.server, head)
			frame := func(s string) string {
				if !chunked {
					return s
				}
				return strconv.FormatInt(int64(len(s)), 16) + "\r\n" + s + "\r\n"
			}
			events := []struct{ in, out string }{
				{"event: message\ndata: progress one\n\n", "event: message\ndata: PROGRESS ONE\n\n"},
				{": keepalive\n\n", ": keepalive\n\n"},
				{"id: 7\ndata: a\ndata: b\n\n", "id: 7\ndata: A\ndata: B\n\n"},
			}
			got := readN(t, e.client, len(head))
			if string(got) != head {
				t.Fatalf("head %q", got)
			}
			for i, ev := range events {
				// Each event goes out before the server sends the next: never held back.
				send(t, e.server, frame(ev.in))
				want := frame(ev.out)
				if got := readN(t, e.client, len(want)); string(got) != want {
					t.Fatalf("event %d: %q, want %q", i, got, want)
				}
			}
			// Two events in one read still go out as two writes.
			send(t, e.server, frame("data: x\n\ndata: y\n\n"))
			want := frame("data: X\n\n") + frame("data: Y\n\n")
			if got := readN(t, e.client, len(want)); string(got) != want {
				t.Fatalf("pair: %q, want %q", got, want)
			}
			if chunked {
				send(t, e.server, "0\r\n\r\n")
				readN(t, e.client, 5)
			} else {
				e.server.CloseWrite()
				expectEOF(t, e.client)
			}
			writes := e.toClient.all()
			wantWrites := []string{head}
			for _, ev := range events {
				wantWrites = append(wantWrites, frame(ev.out))
			}
			wantWrites = append(wantWrites, frame("data: X\n\n"), frame("data: Y\n\n"))
			if chunked {
				wantWrites = append(wantWrites, "0\r\n\r\n")
			}
			if len(writes) != len(wantWrites) {
				t.Fatalf("%d writes %q, want %d", len(writes), writes, len(wantWrites))
			}
			for i := range writes {
				if string(writes[i]) != wantWrites[i] {
					t.Fatalf("write %d: %q, want %q", i, writes[i], wantWrites[i])
				}
			}
		})
	}
}

// TestSeamAnswerLocally: a stage answers /local itself, in its turn: the pipelined requests
// around it reach the server, the local one never does, and the client reads the three answers
// in the order it asked.
func TestSeamAnswerLocally(t *testing.T) {
	st := &answerLocal{}
	e := newEnv(t, Options{}, st)
	req := func(path, id string) string {
		return "GET " + path + " HTTP/1.1\r\nHost: s\r\nX-Id: " + id + "\r\n\r\n"
	}
	send(t, e.client, req("/a", "1")+req("/local", "2")+req("/b", "3"))
	want := req("/a", "1") + req("/b", "3")
	if got := readN(t, e.server, len(want)); string(got) != want {
		t.Fatalf("server got %q", got)
	}
	send(t, e.server, okResponse("one")+okResponse("three"))
	br := bufio.NewReader(e.client)
	for _, w := range []string{"one", `{"local":"2"}`, "three"} {
		if resp, body := readResponse(t, br, e.client, "GET"); resp.StatusCode != 200 || body != w {
			t.Fatalf("got %d %q, want %q", resp.StatusCode, body, w)
		}
	}
	e.client.Close()
	<-e.finished
	st.mu.Lock()
	defer st.mu.Unlock()
	if len(st.answered) != 1 || st.answered[0] != "2" {
		t.Fatalf("answered %q", st.answered)
	}
	recs := e.rec.all()
	if len(recs) != 3 || recs[1].path != "/local" || recs[1].decision != "deny" {
		t.Fatalf("records %+v", recs)
	}
}

// ---- bodies ----

// bodies asks for request and response bodies and can replace them.
type bodies struct {
	Base
	reqMax, respMax int64
	overflow        Overflow
	reqReplace      func([]byte) []byte
	seen            [][]byte
}

func (b *bodies) RequestHead(_ context.Context, x *Exchange) Result {
	if b.reqMax >= 0 {
		x.WantRequestBody(b.reqMax)
	}
	return Continue
}

func (b *bodies) RequestBody(_ context.Context, x *Exchange) Result {
	b.seen = append(b.seen, bytes.Clone(x.RequestBody()))
	if b.reqReplace != nil {
		x.SetRequestBody(b.reqReplace(x.RequestBody()))
	}
	return Continue
}

func (b *bodies) ResponseHead(_ context.Context, x *Exchange) Result {
	if b.respMax >= 0 {
		x.WantResponseBody(b.respMax, b.overflow)
	}
	return Continue
}

func chunked(parts ...string) string {
	var b strings.Builder
	for _, p := range parts {
		b.WriteString(strconv.FormatInt(int64(len(p)), 16) + "\r\n" + p + "\r\n")
	}
	return b.String() + "0\r\n\r\n"
}

// TestRequestBodyOverBound: a body over the bound a stage asked for is answered 413 in its turn,
// never forwarded, and the connection stays usable (Content-Length known up front, or a chunked
// body found too long halfway).
func TestRequestBodyOverBound(t *testing.T) {
	for _, tt := range []struct{ name, req string }{
		{"content-length", post("/mcp", strings.Repeat("x", 40))},
		{"chunked", "POST /mcp HTTP/1.1\r\nHost: s\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked("0123456789", "0123456789", "0123456789")},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, Options{}, &bodies{reqMax: 16, respMax: -1})
			send(t, e.client, tt.req)
			br := bufio.NewReader(e.client)
			resp, body := readResponse(t, br, e.client, "POST")
			if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(body, "over 16 bytes") || resp.Close {
				t.Fatalf("got %d %q close=%v", resp.StatusCode, body, resp.Close)
			}
			next := post("/next", "{}")
			send(t, e.client, next)
			if got := readN(t, e.server, len(next)); string(got) != next {
				t.Fatalf("server got %q, want only the next request", got)
			}
			send(t, e.server, okResponse("ok"))
			if resp, body := readResponse(t, br, e.client, "POST"); resp.StatusCode != 200 || body != "ok" {
				t.Fatalf("next: %d %q", resp.StatusCode, body)
			}
			if recs := e.rec.all(); len(recs) < 1 || recs[0].status != 413 || recs[0].decision != "deny" {
				t.Fatalf("records %+v", recs)
			}
		})
	}
}

// TestRequestBodyReplaced: a replaced body is re-framed with Content-Length (chunked in,
// Content-Length out), every other header line kept.
func TestRequestBodyReplaced(t *testing.T) {
	st := &bodies{reqMax: 1 << 20, respMax: -1, reqReplace: bytes.ToUpper}
	e := newEnv(t, Options{}, st)
	send(t, e.client, "POST /mcp HTTP/1.1\r\nHost: s\r\nTransfer-Encoding: chunked\r\nX-A: 1\r\n\r\n"+chunked("hello ", "world"))
	want := "POST /mcp HTTP/1.1\r\nHost: s\r\nContent-Length: 11\r\nX-A: 1\r\n\r\nHELLO WORLD"
	if got := readN(t, e.server, len(want)); string(got) != want {
		t.Fatalf("server got %q, want %q", got, want)
	}
	if len(st.seen) != 1 || string(st.seen[0]) != "hello world" {
		t.Fatalf("stage saw %q", st.seen)
	}
	send(t, e.server, okResponse("ok"))
	if resp, body := readResponse(t, bufio.NewReader(e.client), e.client, "POST"); resp.StatusCode != 200 || body != "ok" {
		t.Fatalf("%d %q", resp.StatusCode, body)
	}
	if n := e.toServer.count(); n != 1 {
		t.Fatalf("%d writes upstream for one request, want 1", n)
	}
}

// TestRequestBodyUnchangedExact: a stage that reads a chunked body and leaves it goes out byte
// for byte, chunk sizes, extensions and trailers included.
func TestRequestBodyUnchangedExact(t *testing.T) {
	st := &bodies{reqMax: 1 << 20, respMax: 1 << 20}
	e := newEnv(t, Options{}, st)
	req := "POST /mcp HTTP/1.1\r\nHost: s\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n1\n \r\n5\r\nworld\r\n0\r\nX-Trailer: t\r\n\r\n"
	send(t, e.client, req)
	if got := readN(t, e.server, len(req)); string(got) != req {
		t.Fatalf("server got %q, want %q", got, req)
	}
	if len(st.seen) != 1 || string(st.seen[0]) != "hello world" {
		t.Fatalf("stage saw %q", st.seen)
	}
	resp := "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked("o", "k")
	send(t, e.server, resp)
	if got := readN(t, e.client, len(resp)); string(got) != resp {
		t.Fatalf("client got %q, want %q", got, resp)
	}
}

// TestResponseOverBound: a response body over the bound closes the connection (the client gets
// nothing of it) or, when the stage says so, goes out uninspected and byte for byte.
func TestResponseOverBound(t *testing.T) {
	resp := "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked(strings.Repeat("a", 30), strings.Repeat("b", 30))
	t.Run("close", func(t *testing.T) {
		e := newEnv(t, Options{}, &bodies{reqMax: -1, respMax: 40, overflow: OverflowClose})
		send(t, e.client, "GET / HTTP/1.1\r\nHost: s\r\n\r\n")
		readN(t, e.server, len("GET / HTTP/1.1\r\nHost: s\r\n\r\n"))
		send(t, e.server, resp)
		expectEOF(t, e.client)
		<-e.finished
		if recs := e.rec.all(); len(recs) != 1 || !strings.Contains(recs[0].err, "over 40 bytes") {
			t.Fatalf("records %+v", recs)
		}
	})
	t.Run("forward", func(t *testing.T) {
		e := newEnv(t, Options{}, &bodies{reqMax: -1, respMax: 40, overflow: OverflowForward})
		send(t, e.client, "GET / HTTP/1.1\r\nHost: s\r\n\r\n")
		readN(t, e.server, len("GET / HTTP/1.1\r\nHost: s\r\n\r\n"))
		send(t, e.server, resp)
		if got := readN(t, e.client, len(resp)); string(got) != resp {
			t.Fatalf("client got %q", got)
		}
		e.client.Close()
		<-e.finished
		if recs := e.rec.all(); len(recs) != 1 || !strings.Contains(recs[0].uninspected, "over 40 bytes") || recs[0].err != "" {
			t.Fatalf("records %+v", recs)
		}
	})
}

// ---- events ----

// events records the events a stage saw.
type events struct {
	Base
	mu  sync.Mutex
	got []Event
}

func (s *events) ResponseHead(_ context.Context, x *Exchange) Result {
	x.WantEvents(0)
	return Continue
}

func (s *events) Event(_ context.Context, _ *Exchange, ev *Event) Result {
	s.mu.Lock()
	s.got = append(s.got, *ev)
	s.mu.Unlock()
	return Continue
}

func (s *events) all() []Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Event(nil), s.got...)
}

// TestEventsAcrossReads: an event that arrives a few bytes at a time, and CR-only line ends, are
// parsed as the same events; each unchanged event is written as it came, once complete.
func TestEventsAcrossReads(t *testing.T) {
	for _, tt := range []struct {
		name   string
		stream string
		data   []string
	}{
		{"LF split", "event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n\n", []string{`{"jsonrpc":"2.0","id":1,"result":{}}`}},
		{"CR only", "data: a\rdata: b\r\r: keepalive\r\rdata: c\r\r", []string{"a\nb", "", "c"}},
		{"CRLF", "data: a\r\n\r\n:\r\n\r\n", []string{"a", ""}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			st := &events{}
			e := newEnv(t, Options{}, st)
			send(t, e.client, "GET /sse HTTP/1.1\r\nHost: s\r\n\r\n")
			readN(t, e.server, len("GET /sse HTTP/1.1\r\nHost: s\r\n\r\n"))
			head := "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream; charset=utf-8\r\n\r\n"
			send(t, e.server, head)
			readN(t, e.client, len(head))
			for i := 0; i < len(tt.stream); i += 3 {
				send(t, e.server, tt.stream[i:min(i+3, len(tt.stream))])
				time.Sleep(time.Millisecond)
			}
			if got := readN(t, e.client, len(tt.stream)); string(got) != tt.stream {
				t.Fatalf("client got %q", got)
			}
			e.server.CloseWrite()
			expectEOF(t, e.client)
			evs := st.all()
			if len(evs) != len(tt.data) {
				t.Fatalf("%d events, want %d: %+v", len(evs), len(tt.data), evs)
			}
			for i, ev := range evs {
				if ev.Data != tt.data[i] {
					t.Fatalf("event %d data %q, want %q", i, ev.Data, tt.data[i])
				}
			}
			// Every write after the head is one whole event, or the LF of a CRLF whose CR ended
			// the event before it (written at once, not held for the next event).
			var eventWrites []string
			for _, w := range e.toClient.all()[1:] {
				if string(w) != "\n" {
					eventWrites = append(eventWrites, string(w))
				}
			}
			if len(eventWrites) != len(evs) {
				t.Fatalf("%d writes for %d events: %q", len(eventWrites), len(evs), eventWrites)
			}
			for i, w := range eventWrites {
				if w != string(evs[i].Raw) {
					t.Fatalf("write %d %q is not event %q", i, w, evs[i].Raw)
				}
			}
		})
	}
}

// TestKeepaliveComments: comment-only blocks pass unchanged, one write each, and a stage sees
// them as comment-only events.
func TestKeepaliveComments(t *testing.T) {
	st := &events{}
	e := newEnv(t, Options{}, st)
	send(t, e.client, "GET /sse HTTP/1.1\r\nHost: s\r\n\r\n")
	readN(t, e.server, len("GET /sse HTTP/1.1\r\nHost: s\r\n\r\n"))
	head := "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
	send(t, e.server, head)
	readN(t, e.client, len(head))
	for i := 0; i < 3; i++ {
		c := chunked(": ping\n\n")
		c = c[:len(c)-5]
		send(t, e.server, c)
		if got := readN(t, e.client, len(c)); string(got) != c {
			t.Fatalf("keepalive %d: %q", i, got)
		}
	}
	for _, ev := range st.all() {
		if !ev.CommentOnly() || string(ev.Raw) != ": ping\n\n" {
			t.Fatalf("event %+v", ev)
		}
	}
	if n := len(st.all()); n != 3 {
		t.Fatalf("%d events", n)
	}
}

// ---- writes ----

// jsonExchange1K is a 1 KiB JSON-RPC request and its 1 KiB result.
var (
	body1K       = `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"s":"` + strings.Repeat("x", 1024-80) + `"}}}`
	request1K    = post("/mcp", body1K)
	response1K   = okResponse(strings.Replace(body1K, `"method":"tools/call","params"`, `"result"`, 1))
	writesStages = map[string][]Stage{
		"copy":    nil,
		"headers": {denyName("deny")},
		"bodies":  {&bodies{reqMax: 1 << 20, respMax: 1 << 20}},
	}
)

// TestOneWritePerMessage: through wrapper conns (no writev) a small message goes out in one write
// each way, whether its body is copied or read by a stage.
func TestOneWritePerMessage(t *testing.T) {
	for name, stages := range writesStages {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, Options{}, stages...)
			br := bufio.NewReader(e.client)
			for i := 1; i <= 3; i++ {
				send(t, e.client, request1K)
				if got := readN(t, e.server, len(request1K)); string(got) != request1K {
					t.Fatalf("server got %q", got)
				}
				send(t, e.server, response1K)
				if resp, _ := readResponse(t, br, e.client, "POST"); resp.StatusCode != 200 {
					t.Fatalf("status %d", resp.StatusCode)
				}
				if up, down := e.toServer.count(), e.toClient.count(); up != i || down != i {
					t.Fatalf("after %d exchanges: %d writes up, %d down; want one per message", i, up, down)
				}
			}
		})
	}
}

// BenchmarkWritesPerExchange reports the writes per 1 KiB JSON exchange through wrapper conns:
// 1 each way.
func BenchmarkWritesPerExchange(b *testing.B) {
	for _, name := range []string{"copy", "headers", "bodies"} {
		b.Run(name, func(b *testing.B) {
			c, pc := tcpPair(b)
			pu, s := tcpPair(b)
			up, down := &writeLog{Conn: pu, countOnly: true}, &writeLog{Conn: pc, countOnly: true}
			go serveResponse(s, []byte(response1K))
			done := make(chan struct{})
			go func() {
				defer close(done)
				Serve(context.Background(), down, up, writesStages[name], Options{}, nil)
			}()
			req, resp := []byte(request1K), make([]byte, len(response1K))
			b.ReportAllocs()
			n := 0
			for b.Loop() {
				if _, err := c.Write(req); err != nil {
					b.Fatal(err)
				}
				if _, err := io.ReadFull(c, resp); err != nil {
					b.Fatal(err)
				}
				n++
			}
			b.ReportMetric(float64(up.n.Load())/float64(n), "writes-up/op")
			b.ReportMetric(float64(down.n.Load())/float64(n), "writes-down/op")
			c.Close()
			<-done
			s.Close()
		})
	}
}

// serveResponse answers every request on c with resp.
func serveResponse(c net.Conn, resp []byte) {
	r := NewReader(c, Limits{})
	for {
		h, err := r.ReadRequestHead()
		if err != nil {
			return
		}
		if _, err := r.CopyBody(io.Discard, h); err != nil {
			return
		}
		if _, err := c.Write(resp); err != nil {
			return
		}
	}
}

// TestCloseUnsolicited: with CloseUnsolicited, bytes the upstream sends while no request is
// outstanding (here a whole response written as soon as the connection opened, before the
// client's request was complete) close the connection and never reach the client; without it
// they are passed on as they came (Level 1: a 408 before an idle close).
func TestCloseUnsolicited(t *testing.T) {
	const unsolicited = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 19\r\n\r\n{\"x\":\"CANARY-123\"}\n"
	for _, closeIt := range []bool{true, false} {
		t.Run(strconv.FormatBool(closeIt), func(t *testing.T) {
			client, cs := tcpPair(t)
			up, us := tcpPair(t)
			defer client.Close()
			defer us.Close()
			served := make(chan error, 1)
			go func() {
				served <- Serve(context.Background(), cs, up, nil, Options{CloseUnsolicited: closeIt}, nil)
			}()
			// The client has sent half a head: nothing is outstanding yet.
			io.WriteString(client, "POST /mcp HTTP/1.1\r\nHost: x\r\n")
			io.WriteString(us, unsolicited)
			client.SetReadDeadline(time.Now().Add(testTimeout))
			if !closeIt {
				b := make([]byte, len(unsolicited))
				if _, err := io.ReadFull(client, b); err != nil || string(b) != unsolicited {
					t.Fatalf("forwarded: %q %v", b, err)
				}
				client.Close()
				us.Close()
				<-served
				return
			}
			b, _ := io.ReadAll(client)
			if len(b) != 0 {
				t.Fatalf("the client got %q", b)
			}
			if err := <-served; err != ErrUnsolicited {
				t.Fatalf("Serve returned %v, want ErrUnsolicited", err)
			}
		})
	}
}
