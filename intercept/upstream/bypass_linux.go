package upstream

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"mcpintercept/origin"
)

// BypassDialer dials upstream with SO_MARK set to mark: every steering rule skips that mark, so the
// appliance's own connections are never steered back into it (loop avoidance).
func BypassDialer(mark uint32, timeout time.Duration) *net.Dialer {
	return &net.Dialer{
		Timeout: timeout,
		Control: func(network, address string, rc syscall.RawConn) error {
			var serr error
			if err := rc.Control(func(fd uintptr) {
				serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_MARK, int(mark))
			}); err != nil {
				return err
			}
			if serr != nil {
				return fmt.Errorf("set SO_MARK %#x (needs CAP_NET_ADMIN): %w", mark, serr)
			}
			return nil
		},
	}
}

// TransparentDialer dials Sidecar mode's co-located server from the client's own address (the
// flow's, which the engine puts on the dial's context: origin.WithSource): IP_TRANSPARENT /
// IPV6_TRANSPARENT lets the socket bind a foreign address, mark (the bypass mark) keeps the
// egress steering off it and lets the inbound table tag the connection so that the server's
// replies come back to this socket. The port is the kernel's choice; one that equals the client's
// own port (the tuple of the client's connection, which conntrack already holds) is dialled
// again.
func TransparentDialer(mark uint32, timeout time.Duration) ContextDialer {
	return transparentDialer{mark: mark, timeout: timeout}
}

type transparentDialer struct {
	mark    uint32
	timeout time.Duration
}

func (t transparentDialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	src, ok := origin.SourceOf(ctx)
	if !ok {
		return nil, fmt.Errorf("inbound dial %s: no client address to dial from", address)
	}
	src = netip.AddrPortFrom(src.Addr().Unmap(), src.Port())
	network = "tcp4"
	if src.Addr().Is6() {
		network = "tcp6"
	}
	d := &net.Dialer{
		Timeout:   t.timeout,
		LocalAddr: &net.TCPAddr{IP: src.Addr().AsSlice()},
		Control: func(network, address string, rc syscall.RawConn) error {
			var serr error
			if err := rc.Control(func(fd uintptr) {
				if network == "tcp6" {
					serr = unix.SetsockoptInt(int(fd), unix.SOL_IPV6, unix.IPV6_TRANSPARENT, 1)
				} else {
					serr = unix.SetsockoptInt(int(fd), unix.SOL_IP, unix.IP_TRANSPARENT, 1)
				}
				if serr == nil {
					serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_MARK, int(t.mark))
				}
			}); err != nil {
				return err
			}
			if serr != nil {
				return fmt.Errorf("transparent socket (needs CAP_NET_ADMIN): %w", serr)
			}
			return nil
		},
	}
	for range 3 {
		c, err := d.DialContext(ctx, network, address)
		if err != nil {
			return nil, err
		}
		if la, ok := c.LocalAddr().(*net.TCPAddr); ok && la.Port == int(src.Port()) {
			c.Close()
			continue
		}
		return c, nil
	}
	return nil, fmt.Errorf("inbound dial %s from %s: no free port", address, src.Addr())
}
