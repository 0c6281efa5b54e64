//go:build linux

// Command gorelay is the benchmark's floor for a transparent relay written in
// Go: the smallest program that does what mcpintercept's level 0 path does and
// nothing else. It accepts on an IP_TRANSPARENT listener (TPROXY delivers the
// flows, so the accepted socket's local address is the original destination),
// dials that destination with the bypass mark (SO_MARK, so the dial is not
// steered again), and copies both ways until both directions are done,
// propagating half-closes.
//
//	-mode splice  io.Copy between the two *net.TCPConn (Go splices on Linux)
//	-mode buffer  io.CopyBuffer through a 32 KiB buffer per direction (no splice)
//
// It installs no steering: scripts/bench.sh installs the TPROXY rules (the same
// ones mcpintercept's nftables-tproxy mechanism installs) and points them at it.
// Once listening it prints "READY <addr>" per listener.
//
//	gorelay -listen 127.0.0.1:15002 [-mode splice|buffer] [-bypass-mark 0x4d500000]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:15002", "comma-separated transparent listen addresses")
	mode := flag.String("mode", "splice", "splice or buffer")
	markFlag := flag.String("bypass-mark", "0x4d500000", "SO_MARK of upstream dials")
	flag.Parse()
	if *mode != "splice" && *mode != "buffer" {
		fmt.Fprintln(os.Stderr, "gorelay: -mode must be splice or buffer")
		os.Exit(2)
	}
	mark, err := strconv.ParseUint(*markFlag, 0, 32)
	if err != nil {
		fmt.Fprintf(os.Stderr, "gorelay: -bypass-mark: %v\n", err)
		os.Exit(2)
	}
	lc := net.ListenConfig{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) {
			if serr = unix.SetsockoptInt(int(fd), unix.SOL_IP, unix.IP_TRANSPARENT, 1); serr != nil {
				return
			}
			serr = unix.SetsockoptInt(int(fd), unix.SOL_IPV6, unix.IPV6_TRANSPARENT, 1)
			if errors.Is(serr, unix.ENOPROTOOPT) || errors.Is(serr, unix.EINVAL) {
				serr = nil // an IPv4-only socket
			}
		})
		if err != nil {
			return err
		}
		return serr
	}}
	d := &net.Dialer{Timeout: 5 * time.Second, Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		if err := rc.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_MARK, int(mark)) }); err != nil {
			return err
		}
		return serr
	}}
	var lns []net.Listener
	for a := range strings.SplitSeq(*listen, ",") {
		if a = strings.TrimSpace(a); a == "" {
			continue
		}
		ln, err := lc.Listen(context.Background(), "tcp", a)
		if err != nil {
			fmt.Fprintf(os.Stderr, "gorelay: listen %s: %v\n", a, err)
			os.Exit(1)
		}
		lns = append(lns, ln)
	}
	for _, ln := range lns {
		go serve(ln, d, *mode == "splice")
		fmt.Printf("READY %s\n", ln.Addr())
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	<-sig
}

func serve(ln net.Listener, d *net.Dialer, splice bool) {
	self := ln.Addr().(*net.TCPAddr).AddrPort()
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		go relay(c.(*net.TCPConn), d, splice, self)
	}
}

func relay(client *net.TCPConn, d *net.Dialer, splice bool, self netip.AddrPort) {
	defer client.Close()
	dst := client.LocalAddr().(*net.TCPAddr).AddrPort()
	if dst == self {
		return // not steered: someone connected to the listener itself
	}
	uc, err := d.Dial("tcp", dst.String())
	if err != nil {
		client.SetLinger(0)
		return
	}
	up := uc.(*net.TCPConn)
	defer up.Close()
	var wg sync.WaitGroup
	wg.Go(func() { pipe(up, client, splice) })
	pipe(client, up, splice)
	wg.Wait()
}

// pipe copies src to dst until EOF or an error, then half-closes dst.
func pipe(dst, src *net.TCPConn, splice bool) {
	if splice {
		io.Copy(dst, src)
	} else {
		buf := make([]byte, 32<<10)
		// The wrappers hide ReadFrom/WriteTo, so no splice and no sendfile.
		io.CopyBuffer(struct{ io.Writer }{dst}, struct{ io.Reader }{src}, buf)
	}
	dst.CloseWrite()
}
