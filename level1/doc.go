// Package level1 implements awareness Level 1 of the draft's Transparent mode: it frames HTTP/1.x
// in both directions, extracts MCP metadata from headers only, applies header policy and rate
// limits, and forwards every byte unmodified.
//
// Reader parses heads without normalising them: a Head keeps the exact bytes received, and
// CopyBody forwards bodies exactly as framed, one write per read, so SSE events are never held back
// or merged. Framing the reader cannot read unambiguously (Content-Length with Transfer-Encoding,
// differing lengths, bad chunk sizes, control characters) is refused rather than guessed at,
// because a proxy that parses a message differently from the server behind it lets requests be
// smuggled past its policy.
//
// Classify turns a request head into a RequestInfo for policy and logs; it never holds a
// credential. Proxy serves one connection: a request goroutine reads, decides and forwards, and a
// response goroutine answers in order, interleaving local refusals (403/429/400) in their turn.
// Level 1 never writes a JSON-RPC body, never opens a circuit breaker, and passes upstream
// transport errors on as they happened.
package level1
