// Package flowconn is the one wrapper the appliance puts around a connection it cannot splice
// (Level 1/2 HTTP, TLS on either side): bytes already read replayed first, an activity time for
// the idle watch, and a half-close or a reset that still reaches the TCP socket when TLS runs
// over it. It is a leaf: tlsmitm, exchange's callers and the engine share it.
package flowconn

import (
	"crypto/tls"
	"errors"
	"net"
	"sync/atomic"
	"syscall"
	"time"
)

// Options say what a Conn adds to the connection it wraps.
type Options struct {
	// TCP is the socket underneath when the wrapped connection is not it (TLS over TCP); a
	// *net.TCPConn, or a *Conn around one, is found by itself.
	TCP *net.TCPConn
	// Prefix is replayed before the connection's own bytes (what a peek consumed), and let go of
	// once read: whoever reads the Conn keeps it for the life of the flow, and an idle flow
	// should not pin a ClientHello.
	Prefix []byte
	// Activity, when set, gets the time (UnixNano) of every read or write that moved bytes.
	Activity *atomic.Int64
}

// Conn is a net.Conn with Options' additions. It embeds the net.Conn interface, not
// *net.TCPConn, so io.Copy cannot reach TCPConn.ReadFrom/WriteTo past the prefix or the
// activity count. Read is called by one goroutine at a time, as for any net.Conn.
type Conn struct {
	net.Conn
	tcp    *net.TCPConn
	prefix []byte
	last   *atomic.Int64
	reset  atomic.Bool // SetLinger(0) was asked: Close resets
}

// Wrap returns c with o's additions.
func Wrap(c net.Conn, o Options) *Conn {
	tcp := o.TCP
	if tcp == nil {
		tcp = tcpOf(c)
	}
	if len(o.Prefix) == 0 {
		o.Prefix = nil
	}
	return &Conn{Conn: c, tcp: tcp, prefix: o.Prefix, last: o.Activity}
}

func tcpOf(c net.Conn) *net.TCPConn {
	switch t := c.(type) {
	case *net.TCPConn:
		return t
	case *Conn:
		return t.tcp
	}
	return nil
}

// TCP is the socket underneath, nil when there is none (a pipe in tests).
func (c *Conn) TCP() *net.TCPConn { return c.tcp }

func (c *Conn) Read(b []byte) (int, error) {
	if c.prefix != nil {
		n := copy(b, c.prefix)
		if c.prefix = c.prefix[n:]; len(c.prefix) == 0 {
			c.prefix = nil
		}
		c.touch(n)
		return n, nil
	}
	n, err := c.Conn.Read(b)
	c.touch(n)
	return n, err
}

func (c *Conn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.touch(n)
	return n, err
}

// Touch records n bytes read past Read, straight from the socket SyscallConn gives (exchange
// fills its buffer that way); Conns wrapped inside c are told too, as their Read would have been.
func (c *Conn) Touch(n int) {
	c.touch(n)
	if in, ok := c.Conn.(*Conn); ok {
		in.Touch(n)
	}
}

func (c *Conn) touch(n int) {
	if n > 0 && c.last != nil {
		c.last.Store(time.Now().UnixNano())
	}
}

// CloseWrite passes a half-close on: over TLS a close_notify and then the TCP FIN (tls.Conn's own
// CloseWrite sends only the alert), on a plain socket the FIN.
func (c *Conn) CloseWrite() error {
	cw, ok := c.Conn.(interface{ CloseWrite() error })
	if !ok {
		return errors.ErrUnsupported
	}
	err := cw.CloseWrite()
	if _, isTLS := c.Conn.(*tls.Conn); isTLS && c.tcp != nil {
		if err2 := c.tcp.CloseWrite(); err == nil {
			err = err2
		}
	}
	return err
}

// SetLinger reaches the TCP socket, so that a reset is passed on as a reset under TLS too.
func (c *Conn) SetLinger(sec int) error {
	if c.tcp != nil {
		c.reset.Store(sec == 0)
		return c.tcp.SetLinger(sec)
	}
	if l, ok := c.Conn.(interface{ SetLinger(int) error }); ok {
		return l.SetLinger(sec)
	}
	return errors.ErrUnsupported
}

// Close closes the connection. After SetLinger(0) it closes the socket first: over TLS an
// orderly close_notify would reach the peer ahead of the reset, which it would read as a clean
// end.
func (c *Conn) Close() error {
	if c.reset.Load() && c.tcp != nil {
		err := c.tcp.Close()
		c.Conn.Close() // releases what TLS holds; its alert fails on the closed socket
		return err
	}
	return c.Conn.Close()
}

// errNotSocket: the bytes read from this Conn are not the socket's (TLS decrypts them), so
// waiting on the socket would wait for the wrong thing.
var errNotSocket = errors.New("flowconn: not a plain socket")

// SyscallConn gives the socket's raw connection when the Conn reads the socket itself (no TLS in
// between), so a reader can wait for readability without holding a buffer (exchange's waiter on
// a quiet SSE stream). While a prefix is left to replay the connection counts as readable.
func (c *Conn) SyscallConn() (syscall.RawConn, error) {
	if c.tcp == nil || tcpOf(c.Conn) != c.tcp || !plain(c.Conn) {
		return nil, errNotSocket
	}
	rc, err := c.tcp.SyscallConn()
	if err != nil {
		return nil, err
	}
	return &rawConn{RawConn: rc, c: c}, nil
}

// plain reports whether reading c reads its socket's bytes as they are.
func plain(c net.Conn) bool {
	switch t := c.(type) {
	case *net.TCPConn:
		return true
	case *Conn:
		return plain(t.Conn)
	}
	return false
}

type rawConn struct {
	syscall.RawConn
	c *Conn
}

// Read calls f when the socket is readable, unless prefix bytes are waiting: those are readable
// now, and the socket may stay quiet until they are answered.
func (r *rawConn) Read(f func(fd uintptr) bool) error {
	if r.c.pending() {
		return nil
	}
	return r.RawConn.Read(f)
}

func (c *Conn) pending() bool {
	if c.prefix != nil {
		return true
	}
	if in, ok := c.Conn.(*Conn); ok {
		return in.pending()
	}
	return false
}
