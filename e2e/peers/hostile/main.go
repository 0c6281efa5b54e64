// Command hostile is the scripted MCP server of the differential end-to-end tests (issue 16): a
// raw HTTP/1.1 server that speaks just enough Streamable HTTP (and the 2024-11-05 HTTP+SSE
// transport) for the Go SDK client to connect, then answers with the tricks an attacker's server
// would play on a Level 2 intermediary. It writes every response by hand, byte for byte, so that
// the framing under test (an SSE value after a vertical tab, an empty chunked body, bytes before
// any request) is exactly what goes on the wire; nothing is left to net/http's server.
//
// The trick is chosen by the first path segment of the endpoint URL (see scenario):
//
//	/plain                 a well-behaved server (tools echo and denied_delete)
//	/json-sampling         tools/call answered 200 application/json with a sampling/createMessage
//	                       request as the body; the call's result follows on the GET stream once
//	                       the client answered the request
//	/json-batch            the same request in a JSON batch beside the call's real response
//	/sse/WS/PAYLOAD        tools/call answered as SSE whose data value starts with WS (vt: \v,
//	                       ff: \f, nbsp: U+00A0, cr: "data:\r"), PAYLOAD sampling (a server
//	                       request, then the result once answered) or canary (the result itself)
//	/legacy/PAYLOAD        2024-11-05 HTTP+SSE (GET opens the stream, POSTs to the endpoint are
//	                       answered on it); tools/call gets a second endpoint event whose data is
//	                       PAYLOAD: a sampling request or the call's result with the canary
//	/respell               responses to tools/list and tools/call carry the request's numeric id
//	                       re-spelled N.0; the list has denied_delete, the call's result the canary
//	/schema                tools/list advertises a recursive $ref schema and nested anyOf 19 deep
//	/empty/202, /empty/200 every POST answered 202 Accepted (chunked, empty) or 200 with an empty
//	                       JSON body
//
// A listener given as ADDR=early-sampling or ADDR=early-canary, once a session sent
// notifications/initialized, writes a whole HTTP response on the next connection it accepts before
// reading anything from it (bytes while no request is outstanding), then serves it as /plain.
//
// Every request is logged on stderr ("REQ ..."), every answer the client gives to a request of
// this server ("ANSWER id=... result|error ..."), and every early write ("EARLY ..."), so that a
// test can tell what reached the server. Once every listener is bound it prints "READY ADDR" per
// listener on stdout.
//
//	hostile -listen 10.200.2.2:3031,10.200.2.2:3032=early-sampling [-canary CANARY-x]
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

func main() {
	listen := flag.String("listen", "", "comma-separated ADDR or ADDR=early-sampling|early-canary (required)")
	canary := flag.String("canary", "CANARY-hostile0secret", "the secret this server leaks in results")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(*listen, *canary, log); err != nil {
		fmt.Fprintf(os.Stderr, "hostile: %v\n", err)
		os.Exit(1)
	}
}

func run(listen, canary string, log *slog.Logger) error {
	if listen == "" {
		return errors.New("-listen is required")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	srv := newServer(canary, log)
	var lns []net.Listener
	for spec := range strings.SplitSeq(listen, ",") {
		addr, early, _ := strings.Cut(strings.TrimSpace(spec), "=")
		if early != "" && early != "early-sampling" && early != "early-canary" {
			return fmt.Errorf("listener %q: unknown mode %q", addr, early)
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return fmt.Errorf("listen %s: %w", addr, err)
		}
		lns = append(lns, ln)
		go srv.accept(ln, early)
	}
	for _, ln := range lns {
		fmt.Printf("READY %s\n", ln.Addr())
	}
	<-ctx.Done()
	for _, ln := range lns {
		ln.Close()
	}
	return nil
}

func (s *server) accept(ln net.Listener, early string) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go s.serveConn(c, early)
	}
}

// serveConn serves one connection: the early write first when the listener is armed, then one
// request after another (keep-alive) until the client closes or a handler takes the connection
// over (a stream).
func (s *server) serveConn(c net.Conn, early string) {
	defer c.Close()
	if early != "" && s.disarm(early) {
		b := s.earlyResponse(early)
		fmt.Fprintf(os.Stderr, "EARLY %s %d bytes on a connection from %s\n", early, len(b), c.RemoteAddr())
		if _, err := c.Write(b); err != nil {
			return
		}
		earlyConns.Store(c, true)
	}
	br := bufio.NewReader(c)
	for {
		req, err := readRequest(br)
		if err != nil {
			return
		}
		if !s.handle(c, br, early, req) {
			return
		}
	}
}
