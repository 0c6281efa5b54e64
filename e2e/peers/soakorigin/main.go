//go:build linux

// Command soakorigin is the faulty upstream of the fault soak (scripts/soak.sh, e2e/peers/soak):
// a TLS front, with the lab server certificate, for an MCP server that listens in plaintext
// beside it (the e2e mcpserver with -call-log, which records every call it executed). What the
// appliance dials is this front; the soak switches its behaviour at run time by lines on stdin:
//
//	normal   bytes are relayed both ways
//	reset    every response is cut: the first bytes the server answers are relayed up to half,
//	         then both connections are reset (SO_LINGER 0): the call was executed, its answer
//	         never completes
//	hang     a new connection is accepted and never answered (not even its TLS handshake); on
//	         a connection already open, the next request is swallowed and never answered. When
//	         the mode changes again, those connections are reset.
//
// Each accepted mode is acknowledged with "MODE <name>" on stdout; "READY <addr>" once listening.
//
//	soakorigin -listen 10.200.2.2:3030 -backend 127.0.0.1:3100 -tls-cert F -tls-key F
package main

import (
	"bufio"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"time"
)

type mode int

const (
	normal mode = iota
	reset
	hang
)

var modeNames = map[string]mode{"normal": normal, "reset": reset, "hang": hang}

// state is the current mode and a channel closed when it changes.
type state struct {
	mu      sync.Mutex
	m       mode
	changed chan struct{}
}

func (s *state) get() (mode, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m, s.changed
}

func (s *state) set(m mode) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m = m
	close(s.changed)
	s.changed = make(chan struct{})
}

func main() {
	listen := flag.String("listen", "", "address to listen on (TLS)")
	backend := flag.String("backend", "", "the plaintext MCP server to relay to")
	certFile := flag.String("tls-cert", "", "PEM certificate")
	keyFile := flag.String("tls-key", "", "PEM private key")
	flag.Parse()
	if *listen == "" || *backend == "" || *certFile == "" || *keyFile == "" {
		fmt.Fprintln(os.Stderr, "soakorigin: -listen, -backend, -tls-cert and -tls-key are required")
		os.Exit(2)
	}
	cert, err := tls.LoadX509KeyPair(*certFile, *keyFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, "soakorigin:", err)
		os.Exit(2)
	}
	conf := &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"http/1.1"}}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintln(os.Stderr, "soakorigin:", err)
		os.Exit(1)
	}
	st := &state{changed: make(chan struct{})}
	go control(os.Stdin, st)
	fmt.Printf("READY %s\n", ln.Addr())
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		go serve(c.(*net.TCPConn), conf, *backend, st)
	}
}

// control reads modes from r; at its end the process exits (its driver is gone).
func control(r io.Reader, st *state) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		name := strings.TrimSpace(sc.Text())
		m, ok := modeNames[name]
		if !ok {
			fmt.Fprintf(os.Stderr, "soakorigin: unknown mode %q\n", name)
			continue
		}
		st.set(m)
		fmt.Printf("MODE %s\n", name)
	}
	os.Exit(0)
}

// abort resets c: SO_LINGER 0 makes Close send RST instead of FIN.
func abort(c *net.TCPConn) {
	c.SetLinger(0)
	c.Close()
}

func serve(raw *net.TCPConn, conf *tls.Config, backend string, st *state) {
	if m, changed := st.get(); m == hang {
		<-changed
		abort(raw)
		return
	}
	client := tls.Server(raw, conf)
	client.SetDeadline(time.Now().Add(10 * time.Second))
	if err := client.Handshake(); err != nil {
		abort(raw)
		return
	}
	client.SetDeadline(time.Time{})
	b, err := net.DialTimeout("tcp", backend, 5*time.Second)
	if err != nil {
		abort(raw)
		return
	}
	server := b.(*net.TCPConn)
	var once sync.Once
	kill := func() { once.Do(func() { abort(raw); abort(server) }) }
	defer kill()

	// Up: requests, swallowed from the first one that arrives in hang mode.
	go func() {
		defer kill()
		buf := make([]byte, 32<<10)
		for {
			n, err := client.Read(buf)
			if n > 0 {
				if m, changed := st.get(); m == hang {
					<-changed
					return
				}
				if _, werr := server.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	// Down: responses, cut halfway in reset mode.
	buf := make([]byte, 32<<10)
	for {
		n, err := server.Read(buf)
		if n > 0 {
			if m, _ := st.get(); m == reset {
				client.Write(buf[:(n+1)/2])
				return
			}
			if _, werr := client.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			// The server closed: close the client side the same way (close_notify, FIN).
			client.Close()
			return
		}
	}
}
