package exchange

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
)

// judgedEvents counts the SSE events a stage was shown that carry a sampling request.
type judgedEvents struct {
	Base
	sampling *atomic.Int32
}

func (judgedEvents) ResponseHead(_ context.Context, x *Exchange) Result {
	x.WantEvents(0)
	return Continue
}

func (j judgedEvents) Event(_ context.Context, _ *Exchange, ev *Event) Result {
	if ev.HasData && strings.Contains(ev.Data, "sampling/createMessage") {
		j.sampling.Add(1)
	}
	return Continue
}

// TestServeRefusesAmbiguousResponseFraming: a response whose framing clients read differently
// (issue 29) is not forwarded at all: the client gets no byte of it, the connection closes as for
// any malformed upstream response (never a made-up 502), and the record says why. Each body hides
// a sampling request from a reader that frames it the other way. Before, every one was forwarded:
// the HTTP/1.0 one whole, its sampling request never shown to the event stage (chunk-size lines
// split it) though undici de-chunks it; the others re-chunked by the event path (trailers dropped),
// while undici read them raw, to close.
func TestServeRefusesAmbiguousResponseFraming(t *testing.T) {
	const event = "data: {\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"sampling/createMessage\",\"params\":{}}\n\n"
	// De-chunked this is the event; read to close, the chunk-size lines split "da" from "ta:".
	split := "2\r\nda\r\n" + "4c\r\n" + event[2:] + "\r\n0\r\n\r\n"
	// Read to close this is the event (a trailer line, then the empty line ending the trailers);
	// de-chunked it is one newline.
	trailer := "1\r\n\n\r\n0\r\n" + strings.TrimSuffix(event, "\n\n") + "\r\n\r\n"
	if len(event[2:]) != 0x4c {
		t.Fatalf("chunk size: %d bytes", len(event[2:]))
	}
	const sse = "Content-Type: text/event-stream\r\n"
	tests := []struct{ name, resp string }{
		{"http/1.0 chunked", "HTTP/1.0 200 OK\r\n" + sse + "Transfer-Encoding: chunked\r\n\r\n" + split},
		{"chunked trailing comma", "HTTP/1.1 200 OK\r\n" + sse + "Transfer-Encoding: chunked,\r\n\r\n" + trailer},
		{"chunked trailing tab", "HTTP/1.1 200 OK\r\n" + sse + "Transfer-Encoding: chunked\t\r\n\r\n" + trailer},
		{"folded codings", "HTTP/1.1 200 OK\r\n" + sse + "Transfer-Encoding: gzip,\r\n chunked\r\n\r\n" + trailer},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var judged atomic.Int32
			e := newEnv(t, Options{}, judgedEvents{sampling: &judged})
			req := "GET /sse HTTP/1.1\r\nHost: s\r\nAccept: text/event-stream\r\n\r\n"
			send(t, e.client, req)
			readN(t, e.server, len(req))
			send(t, e.server, tt.resp)
			e.server.CloseWrite()
			deadline(e.client)
			got, _ := readAllConn(e.client)
			<-e.finished
			if len(got) != 0 {
				t.Errorf("the client got %q; the stage judged %d sampling requests", got, judged.Load())
			}
			recs := e.rec.all()
			if len(recs) != 1 || !strings.Contains(recs[0].err, "malformed upstream response") {
				t.Errorf("records = %+v, want one with a malformed upstream response", recs)
			}
		})
	}
}

// readAllConn reads until EOF or the deadline, returning what came.
func readAllConn(c interface{ Read([]byte) (int, error) }) ([]byte, error) {
	var out []byte
	buf := make([]byte, 4096)
	for {
		n, err := c.Read(buf)
		out = append(out, buf[:n]...)
		if err != nil {
			return out, err
		}
	}
}
