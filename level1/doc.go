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
// credential (a URI-shaped Mcp-Name loses its userinfo, query and fragment: RedactURI). Its MCP
// fields are the client's claim: servers before MinTrustedMCPVersion do not check them against
// the body, which is why Options.StrictMCPHeaders refuses older versions.
//
// Proxy serves one connection: a request goroutine reads, decides and forwards, and a response
// goroutine answers in order, interleaving local refusals in their turn. Before the Decider, it
// refuses what no policy should have to judge: a protocol switch (Upgrade, CONNECT, h2c) the route
// does not allow (403; after a switch nothing can be judged), a Host other than the connection's
// (421), and on strict routes requests whose MCP headers cannot be trusted (400). Level 1 never
// writes a JSON-RPC body, never opens a circuit breaker, and passes upstream transport errors on
// as they happened. Read buffers come from a pool and go back to it whenever a connection waits
// with nothing buffered, so an idle keep-alive flow holds none.
package level1
