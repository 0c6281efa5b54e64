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

	"mcpintercept/intercept/dns"
	"mcpintercept/origin"
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

// ReasonSNIMismatch is the flow record's reason for a TLS flow to a VIP whose server name is
// not the name behind it.
const ReasonSNIMismatch = "sni_mismatch"

// sniMismatch refuses a TLS flow to vip whose SNI is not name ("" when it sent none).
func sniMismatch(vip, name, sni string) error {
	if sni == "" {
		return origin.Refuse(ReasonSNIMismatch, fmt.Errorf("TLS to VIP %s (%s) carries no SNI; it must name %s", vip, name, name))
	}
	return origin.Refuse(ReasonSNIMismatch, fmt.Errorf("TLS SNI %q differs from the name %s behind VIP %s (a client cannot reach one host under another's name)", sni, name, vip))
}

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
	if dns.CanonicalName(h.SNI) != want {
		return sniMismatch(vip, want, strings.ToValidUTF8(h.SNI, "?"))
	}
	return nil
}
