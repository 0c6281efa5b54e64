package exchange

import (
	"io"
	"syscall"
	"unsafe"
)

// waiter waits for a socket to become readable without reading from it; made once per Reader so
// a wait allocates nothing.
type waiter struct {
	rc      syscall.RawConn
	one     [1]byte
	peekErr error
	fn      func(fd uintptr) bool
}

func newWaiter(rc syscall.RawConn) *waiter {
	w := &waiter{rc: rc}
	w.fn = w.peek
	return w
}

// peek is a recv with MSG_PEEK: true once there are bytes, an end or an error.
func (w *waiter) peek(fd uintptr) bool {
	for {
		n, _, errno := syscall.Syscall6(syscall.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&w.one[0])), 1,
			syscall.MSG_PEEK|syscall.MSG_DONTWAIT, 0, 0)
		switch {
		case errno == syscall.EINTR:
			continue
		case errno == syscall.EAGAIN:
			return false
		case errno != 0:
			w.peekErr = errno
		case n == 0:
			w.peekErr = io.EOF
		}
		return true
	}
}

// wait blocks until the socket has bytes to read (or an end, or an error) without reading them;
// the runtime poller does the waiting, so the connection's read deadline applies. An error the
// peek consumed (a reset) is returned, since the read after it would only see a plain end.
func (w *waiter) wait() error {
	w.peekErr = nil
	if err := w.rc.Read(w.fn); err != nil {
		return err
	}
	if w.peekErr == io.EOF {
		return nil // the read that follows reports the end
	}
	return w.peekErr
}
