// Package exchange is the HTTP/1.x exchange pipeline: it frames both directions of a connection
// (keep-alive, chunked, pipelining, Upgrade and CONNECT, half-close and reset propagation) and
// runs an ordered list of stages over every request/response exchange. It knows neither MCP nor
// policy: it carries a stage's Verdict (a policy.Action) for the record without interpreting it.
//
// Reader parses heads without normalising them: a Head keeps the exact bytes received, and
// CopyBody forwards bodies exactly as framed, one write per read, so SSE events are never held back
// or merged. Framing the reader cannot read unambiguously (Content-Length with Transfer-Encoding,
// differing lengths, bad chunk sizes, control characters, the HTTP/2 preface) is refused rather
// than guessed at, because a proxy that parses a message differently from the server behind it
// lets requests be smuggled past its policy.
//
// Serve runs one connection: a request goroutine reads heads, runs the stages' request hooks and
// forwards, and a response goroutine answers in order, writing local answers in their turn. A
// stage sees the head, may ask for the whole body (bounded; 413 over it) or for a text/event-stream
// response as events, may replace a body, a header or an event, may answer locally (Answer) or end
// the connection (Abort), and keeps its state on the Exchange (Set/Get) or the connection
// (Conn). With no stage asking for a body the loop is the byte-exact copy path: pooled read
// buffers given back whenever the connection waits, one write per read, and a head written
// together with the body bytes that came with it. A body no stage replaced goes out byte for byte
// in its original framing; a replaced one is re-framed with Content-Length (Reframe). Every
// message small enough goes out in one write per direction, whatever the connection is (a writev
// on a TCP socket, one joined buffer through a TLS or wrapper connection); each SSE event is one
// write of its own.
//
// Upstream transport errors reach the client as they happened: a reset as a reset, a close as a
// close, never a fabricated response. The only answers the package makes itself are plain-text
// refusals of what it cannot forward: 400 (malformed), 408 (header or body timeout), 413 (a body
// over a stage's bound) and 431 (head too large).
package exchange
