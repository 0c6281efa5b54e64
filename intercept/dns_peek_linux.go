package intercept

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"mcpintercept/tlsmitm"
)

// peekReader reads a TCP connection with MSG_PEEK: nothing is consumed, so the engine later
// reads the same bytes from the start. Each Read returns the bytes after those it returned
// before; it waits (within the connection's read deadline) for more when there are none.
type peekReader struct {
	c   *net.TCPConn
	off int
	buf []byte
}

func (p *peekReader) Read(b []byte) (int, error) {
	rc, err := p.c.SyscallConn()
	if err != nil {
		return 0, err
	}
	want := p.off + len(b)
	if cap(p.buf) < want {
		p.buf = make([]byte, want)
	}
	p.buf = p.buf[:want]
	var n int
	var rerr error
	err = rc.Read(func(fd uintptr) bool {
		n, _, rerr = unix.Recvfrom(int(fd), p.buf, unix.MSG_PEEK|unix.MSG_DONTWAIT)
		if errors.Is(rerr, unix.EAGAIN) || errors.Is(rerr, unix.EINTR) {
			return false // wait until readable
		}
		if rerr == nil && n > 0 && n <= p.off {
			// Nothing new yet: the edge-triggered poller wakes us when more arrives.
			return false
		}
		return true
	})
	if err != nil {
		return 0, err
	}
	if rerr != nil {
		return 0, rerr
	}
	if n == 0 {
		return 0, io.EOF
	}
	c := copy(b, p.buf[p.off:n])
	p.off += c
	return c, nil
}

// SNIMismatchError refuses a TLS flow to a VIP whose server name is not the name behind it.
type SNIMismatchError struct {
	VIP  string
	Name string // the name behind the VIP
	SNI  string // what the client sent ("" when it sent none)
}

func (e *SNIMismatchError) Error() string {
	if e.SNI == "" {
		return fmt.Sprintf("TLS to VIP %s (%s) carries no SNI; it must name %s", e.VIP, e.Name, e.Name)
	}
	return fmt.Sprintf("TLS SNI %q differs from the name %s behind VIP %s (a client cannot reach one host under another's name)", e.SNI, e.Name, e.VIP)
}

// RefuseReason names the refusal for a flow record.
func (e *SNIMismatchError) RefuseReason() string { return "sni_mismatch" }

// checkSNI peeks at the client's first bytes without consuming them. A TLS ClientHello must name
// want (case-insensitively, a trailing dot ignored); anything else (plaintext, a client that
// waits for the server, a hello that does not parse) passes: the engine judges those bytes by
// the route, and on HTTP the Host check is the engine's (intercept does not parse HTTP).
func checkSNI(c *net.TCPConn, vip, want string, timeout time.Duration, maxHello int) error {
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	c.SetReadDeadline(time.Now().Add(timeout))
	defer c.SetReadDeadline(time.Time{})
	h, _, err := tlsmitm.Peek(&peekReader{c: c}, maxHello)
	if h == nil {
		var te *tlsmitm.Error
		if errors.As(err, &te) && te.Kind == tlsmitm.KindRead && !errors.Is(err, os.ErrDeadlineExceeded) {
			return fmt.Errorf("peek at the client's first bytes: %w", err)
		}
		return nil
	}
	if canonicalName(h.SNI) != want {
		return &SNIMismatchError{VIP: vip, Name: want, SNI: strings.ToValidUTF8(h.SNI, "?")}
	}
	return nil
}
