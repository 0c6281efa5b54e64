// Command bytepump checks that a TCP path (such as the appliance's opaque or
// passthrough forwarding) delivers every byte unchanged, in order, in both
// directions, and honours half-close.
//
// The server reads each connection to EOF, and only after the client's FIN
// has arrived writes its reply and closes: a reply that reaches the client
// proves the proxy passed the half-close on instead of closing the whole
// connection. Both sides write pseudo-random bytes in random write sizes (a
// few tiny writes, the rest 1 byte to 256 KiB) and print SHA-256 digests of
// what they sent and received, one JSON line per connection, for a test to
// compare.
//
//	bytepump serve -listen ADDR[,ADDR...] -reply-bytes N [-seed S] [-count C]
//	bytepump send -addr HOST:PORT -bytes N [-seed S] [-expect-bytes M]
package main

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"hash"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

const maxWrite = 256 << 10

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "serve":
		err = serve(os.Args[2:])
	case "send":
		err = send(os.Args[2:])
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "bytepump %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: bytepump serve -listen ADDR[,ADDR...] -reply-bytes N [-seed S] [-count C]")
	fmt.Fprintln(os.Stderr, "       bytepump send -addr HOST:PORT -bytes N [-seed S] [-expect-bytes M]")
	os.Exit(2)
}

// stream produces the pseudo-random payload and the write sizes. The
// payload comes from ChaCha8 (fast enough for 64 MiB in well under a second);
// the sizes from a separate PCG so that both are reproducible from one seed.
type stream struct {
	data  *rand.ChaCha8
	sizes *rand.Rand
	n     int // writes so far
}

func newStream(seed uint64, role string) *stream {
	var key [32]byte
	binary.LittleEndian.PutUint64(key[:8], seed)
	copy(key[8:], role)
	return &stream{
		data:  rand.NewChaCha8(key),
		sizes: rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15^uint64(len(role)))),
	}
}

// nextSize starts with a few tiny writes (the segmentations a parser most
// often gets wrong), then mixes more tiny ones into sizes of 1 byte..256 KiB.
func (s *stream) nextSize() int {
	s.n++
	switch {
	case s.n <= 3:
		return []int{1, 2, 7}[s.n-1]
	case s.sizes.IntN(16) == 0:
		return 1 + s.sizes.IntN(16)
	default:
		return 1 + s.sizes.IntN(maxWrite)
	}
}

// pump writes total bytes to w and returns their SHA-256.
func (s *stream) pump(w io.Writer, total int64) (int64, string, error) {
	h := sha256.New()
	buf := make([]byte, maxWrite)
	var sent int64
	for sent < total {
		n := int(min(int64(s.nextSize()), total-sent))
		p := buf[:n]
		s.data.Read(p)
		h.Write(p)
		m, err := w.Write(p)
		sent += int64(m)
		if err != nil {
			return sent, hexSum(h), fmt.Errorf("write after %d bytes: %w", sent, err)
		}
	}
	return sent, hexSum(h), nil
}

// drain reads r to EOF and returns the byte count and SHA-256.
func drain(r io.Reader) (int64, string, error) {
	h := sha256.New()
	n, err := io.CopyBuffer(h, r, make([]byte, maxWrite))
	if err != nil {
		return n, hexSum(h), fmt.Errorf("read after %d bytes: %w", n, err)
	}
	return n, hexSum(h), nil
}

func hexSum(h hash.Hash) string { return hex.EncodeToString(h.Sum(nil)) }

type connReport struct {
	Remote         string `json:"remote,omitempty"`
	SentBytes      int64  `json:"sent_bytes"`
	SentSHA256     string `json:"sent_sha256"`
	ReceivedBytes  int64  `json:"received_bytes"`
	ReceivedSHA256 string `json:"received_sha256"`
	Error          string `json:"error,omitempty"`
}

var stdoutMu sync.Mutex

func printJSON(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	stdoutMu.Lock()
	defer stdoutMu.Unlock()
	_, err = fmt.Printf("%s\n", b)
	return err
}

type listenFlag []string

func (l *listenFlag) String() string { return strings.Join(*l, ",") }

func (l *listenFlag) Set(v string) error {
	for a := range strings.SplitSeq(v, ",") {
		if a = strings.TrimSpace(a); a != "" {
			*l = append(*l, a)
		}
	}
	return nil
}

func serve(args []string) error {
	fs := flag.NewFlagSet("serve", flag.ExitOnError)
	var listen listenFlag
	fs.Var(&listen, "listen", "address to listen on, repeatable or comma-separated")
	replyBytes := fs.Int64("reply-bytes", 0, "bytes to send back on each connection after the client's FIN")
	seed := fs.Uint64("seed", 1, "seed of the reply stream; connection i uses seed+i")
	count := fs.Int("count", 0, "exit after this many connections (0: serve until SIGINT/SIGTERM)")
	connTimeout := fs.Duration("conn-timeout", 5*time.Minute, "deadline for one whole connection")
	fs.Parse(args)
	if len(listen) == 0 {
		return errors.New("-listen is required")
	}
	if *replyBytes < 0 || *count < 0 {
		return errors.New("-reply-bytes and -count must not be negative")
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	var lns []net.Listener
	closeAll := func() {
		for _, ln := range lns {
			ln.Close()
		}
	}
	defer closeAll()
	for _, a := range listen {
		ln, err := net.Listen("tcp", a)
		if err != nil {
			return fmt.Errorf("listen %s: %w", a, err)
		}
		lns = append(lns, ln)
	}
	for _, ln := range lns {
		fmt.Printf("READY %s\n", ln.Addr())
	}

	var (
		accepted atomic.Int64 // connections claimed, for seeds and -count
		failed   atomic.Int64
		conns    sync.WaitGroup
		loops    sync.WaitGroup
		doneOnce sync.Once
		done     = make(chan struct{})
	)
	finish := func() { doneOnce.Do(func() { close(done) }) }
	for _, ln := range lns {
		loops.Go(func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					select {
					case <-done:
					default:
						fmt.Fprintf(os.Stderr, "bytepump serve: accept on %s: %v\n", ln.Addr(), err)
						finish()
					}
					return
				}
				i := accepted.Add(1)
				if *count > 0 && i > int64(*count) {
					c.Close()
					continue
				}
				conns.Go(func() {
					if !handle(c, *seed+uint64(i-1), *replyBytes, *connTimeout) {
						failed.Add(1)
					}
					if *count > 0 && i == int64(*count) {
						finish()
					}
				})
			}
		})
	}

	select {
	case <-ctx.Done():
	case <-done:
	}
	finish()
	closeAll()
	loops.Wait()
	conns.Wait()
	if n := failed.Load(); n > 0 {
		return fmt.Errorf("%d connection(s) failed", n)
	}
	return nil
}

// handle serves one connection and reports whether it went without error.
func handle(c net.Conn, seed uint64, replyBytes int64, timeout time.Duration) bool {
	defer c.Close()
	rep := connReport{Remote: c.RemoteAddr().String()}
	c.SetDeadline(time.Now().Add(timeout))
	var err error
	rep.ReceivedBytes, rep.ReceivedSHA256, err = drain(c)
	if err == nil {
		// Only now, after the client's FIN, does the reply start.
		rep.SentBytes, rep.SentSHA256, err = newStream(seed, "serve").pump(c, replyBytes)
	}
	if err != nil {
		rep.Error = err.Error()
	}
	if perr := printJSON(rep); perr != nil {
		fmt.Fprintf(os.Stderr, "bytepump serve: %v\n", perr)
	}
	return err == nil
}

func send(args []string) error {
	fs := flag.NewFlagSet("send", flag.ExitOnError)
	addr := fs.String("addr", "", "HOST:PORT to connect to")
	total := fs.Int64("bytes", 0, "bytes to send before half-closing")
	seed := fs.Uint64("seed", 1, "seed of the sent stream and its write sizes")
	expect := fs.Int64("expect-bytes", -1, "fail unless exactly this many bytes come back (-1: no check)")
	timeout := fs.Duration("timeout", 2*time.Minute, "deadline for the whole exchange")
	fs.Parse(args)
	if *addr == "" {
		return errors.New("-addr is required")
	}
	if *total < 0 {
		return errors.New("-bytes must not be negative")
	}

	c, err := net.DialTimeout("tcp", *addr, 10*time.Second)
	if err != nil {
		return fmt.Errorf("dial %s: %w", *addr, err)
	}
	defer c.Close()
	hc, ok := c.(interface{ CloseWrite() error })
	if !ok {
		return errors.New("connection cannot half-close")
	}
	c.SetDeadline(time.Now().Add(*timeout))

	// Read concurrently: nothing should arrive before the half-close, but a
	// reader that waits could hide a peer that answers early.
	type result struct {
		n   int64
		sum string
		err error
	}
	recv := make(chan result, 1)
	go func() {
		n, sum, err := drain(c)
		recv <- result{n, sum, err}
	}()

	var rep connReport
	rep.SentBytes, rep.SentSHA256, err = newStream(*seed, "send").pump(c, *total)
	if err == nil {
		if err = hc.CloseWrite(); err != nil {
			err = fmt.Errorf("half-close: %w", err)
		}
	}
	if err != nil {
		c.Close() // unblocks the reader
		<-recv
		return err
	}
	r := <-recv
	rep.ReceivedBytes, rep.ReceivedSHA256 = r.n, r.sum
	if r.err != nil {
		rep.Error = r.err.Error()
	}
	if err := printJSON(rep); err != nil {
		return err
	}
	if r.err != nil {
		return r.err
	}
	if *expect >= 0 && r.n != *expect {
		return fmt.Errorf("received %d bytes, want %d", r.n, *expect)
	}
	return nil
}
