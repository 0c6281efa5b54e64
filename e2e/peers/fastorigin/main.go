// Command fastorigin is the fast origin of the benchmark: an HTTP/1.1 server
// that answers every request with the same 1 KiB JSON-RPC result
// (Content-Type: application/json, Content-Length) in microseconds, so that
// what a benchmark row measures is the path in front of it, not the server.
// It is not an MCP server: it reads the request head, skips a Content-Length
// or chunked body and writes the fixed response in one write. Keep-alive
// unless the request says Connection: close.
//
// Once every listener is bound it prints "READY <addr>" per listener.
//
//	fastorigin -listen 10.200.2.2:8080,10.200.2.2:8081 [-tls-cert F -tls-key F] [-size 1024]
package main

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
)

func main() {
	listen := flag.String("listen", "", "comma-separated listen addresses (required)")
	certFile := flag.String("tls-cert", "", "PEM certificate: serve TLS (with -tls-key)")
	keyFile := flag.String("tls-key", "", "PEM private key")
	size := flag.Int("size", 1024, "approximate size of the JSON-RPC response body in bytes")
	flag.Parse()
	if *listen == "" {
		fmt.Fprintln(os.Stderr, "fastorigin: -listen is required")
		os.Exit(2)
	}
	var tlsConf *tls.Config
	if *certFile != "" || *keyFile != "" {
		cert, err := tls.LoadX509KeyPair(*certFile, *keyFile)
		if err != nil {
			fmt.Fprintf(os.Stderr, "fastorigin: %v\n", err)
			os.Exit(2)
		}
		tlsConf = &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"http/1.1"}}
	}
	resp := response(*size)
	var lns []net.Listener
	for a := range strings.SplitSeq(*listen, ",") {
		if a = strings.TrimSpace(a); a == "" {
			continue
		}
		ln, err := net.Listen("tcp", a)
		if err != nil {
			fmt.Fprintf(os.Stderr, "fastorigin: %v\n", err)
			os.Exit(1)
		}
		lns = append(lns, ln)
	}
	for _, ln := range lns {
		go serve(ln, tlsConf, resp)
		fmt.Printf("READY %s\n", ln.Addr())
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	<-sig
}

// response is the whole HTTP response: head and a JSON-RPC result for id 1
// whose body is about size bytes.
func response(size int) []byte {
	const head = `{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"`
	const tail = `"}],"isError":false}}`
	body := head + strings.Repeat("x", max(size-len(head)-len(tail), 1)) + tail
	return []byte("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " +
		strconv.Itoa(len(body)) + "\r\n\r\n" + body)
}

func serve(ln net.Listener, tlsConf *tls.Config, resp []byte) {
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		if tc, ok := c.(*net.TCPConn); ok {
			tc.SetNoDelay(true)
		}
		if tlsConf != nil {
			c = tls.Server(c, tlsConf)
		}
		go handle(c, resp)
	}
}

var errBad = errors.New("bad request")

func handle(c net.Conn, resp []byte) {
	defer c.Close()
	br := bufio.NewReaderSize(c, 32<<10)
	for {
		keep, err := readRequest(br)
		if err != nil {
			if errors.Is(err, errBad) {
				c.Write([]byte("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"))
			}
			return
		}
		if _, err := c.Write(resp); err != nil || !keep {
			return
		}
	}
}

// readRequest consumes one request (head and body) and reports whether the
// connection stays open after the response.
func readRequest(br *bufio.Reader) (keep bool, err error) {
	line, err := br.ReadSlice('\n')
	if err != nil {
		return false, err
	}
	keep = !bytes.Contains(line, []byte("HTTP/1.0"))
	cl := int64(0)
	chunked := false
	for {
		h, err := br.ReadSlice('\n')
		if err != nil {
			if errors.Is(err, bufio.ErrBufferFull) {
				return false, errBad
			}
			return false, err
		}
		h = bytes.TrimRight(h, "\r\n")
		if len(h) == 0 {
			break
		}
		k, v, ok := bytes.Cut(h, []byte(":"))
		if !ok {
			return false, errBad
		}
		v = bytes.TrimSpace(v)
		switch {
		case len(k) == 14 && bytes.EqualFold(k, []byte("Content-Length")):
			cl, err = strconv.ParseInt(string(v), 10, 64)
			if err != nil || cl < 0 {
				return false, errBad
			}
		case bytes.EqualFold(k, []byte("Transfer-Encoding")):
			chunked = bytes.Contains(bytes.ToLower(v), []byte("chunked"))
		case bytes.EqualFold(k, []byte("Connection")):
			lv := bytes.ToLower(v)
			if bytes.Contains(lv, []byte("close")) {
				keep = false
			} else if bytes.Contains(lv, []byte("keep-alive")) {
				keep = true
			}
		}
	}
	if chunked {
		return keep, skipChunked(br)
	}
	if _, err := br.Discard(int(cl)); err != nil {
		return false, err
	}
	return keep, nil
}

func skipChunked(br *bufio.Reader) error {
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return err
		}
		sz, _, _ := bytes.Cut(bytes.TrimRight(line, "\r\n"), []byte(";"))
		n, err := strconv.ParseInt(string(bytes.TrimSpace(sz)), 16, 64)
		if err != nil || n < 0 {
			return errBad
		}
		if n == 0 {
			for { // trailers, then the empty line
				t, err := br.ReadSlice('\n')
				if err != nil {
					return err
				}
				if len(bytes.TrimRight(t, "\r\n")) == 0 {
					return nil
				}
			}
		}
		if _, err := br.Discard(int(n)); err != nil {
			return err
		}
		if _, err := io.ReadFull(br, make([]byte, 2)); err != nil {
			return err
		}
	}
}
