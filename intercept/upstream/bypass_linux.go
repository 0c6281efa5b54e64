package upstream

import (
	"fmt"
	"net"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
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
