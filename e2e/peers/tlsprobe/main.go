// Command tlsprobe is a TLS client for the lab tests that a browser or SDK cannot imitate: it
// can split its ClientHello into 1-byte TCP writes, send a ClientHello larger than one TLS record,
// and pin the TLS version. After the handshake it sends one HTTP request and prints one JSON line
// with what it saw (version, ALPN, the peer certificate's SHA-256 fingerprint and issuer, the HTTP
// status).
//
//	tlsprobe -addr 10.200.2.2:8443 [-sni mcp.lab.test] [-ca FILE] [-tls-max 1.2|1.3] [-one-byte-writes] [-big-hello]
package main

import (
	"bufio"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"
)

// oneByteConn writes every byte in its own write; with TCP_NODELAY each becomes its own segment.
type oneByteConn struct{ net.Conn }

func (c oneByteConn) Write(b []byte) (int, error) {
	for i := range b {
		if _, err := c.Conn.Write(b[i : i+1]); err != nil {
			return i, err
		}
	}
	return len(b), nil
}

func main() {
	addr := flag.String("addr", "", "HOST:PORT to connect to")
	sni := flag.String("sni", "", "server name (SNI and verification); default: the host of -addr")
	caFile := flag.String("ca", "", "PEM file of trusted roots (default: system roots)")
	insecure := flag.Bool("insecure", false, "do not verify (to read a certificate that does not verify)")
	tlsMax := flag.String("tls-max", "1.3", "highest TLS version: 1.2 or 1.3")
	oneByte := flag.Bool("one-byte-writes", false, "write the ClientHello one byte per TCP segment")
	bigHello := flag.Bool("big-hello", false, "send a ClientHello larger than one TLS record (20 KiB of ALPN)")
	path := flag.String("path", "/mcp", "HTTP path of the request sent after the handshake")
	timeout := flag.Duration("timeout", 15*time.Second, "overall timeout")
	flag.Parse()
	if *addr == "" {
		fail("-addr is required")
	}
	host, _, err := net.SplitHostPort(*addr)
	if err != nil {
		fail("bad -addr: %v", err)
	}
	name := *sni
	if name == "" {
		name = host
	}
	cfg := &tls.Config{ServerName: name, NextProtos: []string{"http/1.1"}, InsecureSkipVerify: *insecure}
	if *caFile != "" {
		pem, err := os.ReadFile(*caFile)
		if err != nil {
			fail("%v", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			fail("no certificate in %s", *caFile)
		}
		cfg.RootCAs = pool
	}
	switch *tlsMax {
	case "1.2":
		cfg.MaxVersion = tls.VersionTLS12
	case "1.3":
		cfg.MaxVersion = tls.VersionTLS13
	default:
		fail("-tls-max must be 1.2 or 1.3")
	}
	if *bigHello {
		// Go fragments a handshake message larger than 16 KiB into several records.
		for i := 0; i < 100; i++ {
			cfg.NextProtos = append(cfg.NextProtos, fmt.Sprintf("x-%03d-%s", i, strings.Repeat("p", 190)))
		}
	}
	began := time.Now()
	raw, err := net.DialTimeout("tcp", *addr, *timeout)
	if err != nil {
		fail("dial: %v", err)
	}
	raw.SetDeadline(time.Now().Add(*timeout))
	var conn net.Conn = raw
	if *oneByte {
		raw.(*net.TCPConn).SetNoDelay(true)
		conn = oneByteConn{raw}
	}
	tc := tls.Client(conn, cfg)
	if err := tc.Handshake(); err != nil {
		fail("handshake: %v", err)
	}
	handshake := time.Since(began)
	st := tc.ConnectionState()
	leaf := st.PeerCertificates[0]
	sum := sha256.Sum256(leaf.Raw)
	out := map[string]any{
		"version":        tls.VersionName(st.Version),
		"alpn":           st.NegotiatedProtocol,
		"peer_sha256":    hex.EncodeToString(sum[:]),
		"peer_issuer":    leaf.Issuer.CommonName,
		"peer_subject":   leaf.Subject.CommonName,
		"hello_big":      *bigHello,
		"hello_one_byte": *oneByte,
		"handshake_us":   handshake.Microseconds(), // TCP connect + TLS handshake
	}
	// One real HTTP request, written in one piece, over the established session.
	req := "POST " + *path + " HTTP/1.1\r\nHost: " + name + "\r\nContent-Type: application/json\r\n" +
		"Accept: application/json, text/event-stream\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}"
	if _, err := tc.Write([]byte(req)); err != nil {
		fail("write request: %v", err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
	if err != nil {
		fail("read response: %v", err)
	}
	resp.Body.Close()
	out["status"] = resp.StatusCode
	json.NewEncoder(os.Stdout).Encode(out)
}

func fail(f string, a ...any) {
	fmt.Fprintf(os.Stderr, "tlsprobe: "+f+"\n", a...)
	os.Exit(1)
}
