package exchange

import (
	"errors"
	"io"
	"syscall"
)

// waiter fills a Reader's buffer from a plain socket without holding a buffer while the socket
// is quiet; made once per Reader so that a fill allocates nothing.
//
// It used to wait with a recv(MSG_PEEK) and then read through the connection: three system calls
// per message (the peek that finds nothing, the peek that finds bytes, the read), against two for
// a plain Go read. Now the raw read itself is the readiness test: the buffer is taken from the
// pool just before the read and given back when the read finds nothing, so a parked reader still
// holds none, and a message costs the same two reads (one when its bytes are already there).
type waiter struct {
	rc syscall.RawConn
	r  *Reader
	// called is set once fn ran: a connection with bytes of its own to replay (flowconn's
	// prefix) returns from rc.Read without calling it, and is then read the ordinary way.
	called bool
	err    error
	fn     func(fd uintptr) bool
}

func newWaiter(rc syscall.RawConn) *waiter {
	w := &waiter{rc: rc}
	w.fn = w.read
	return w
}

// errWouldBlock is what the raw source returns when the socket has nothing to read yet.
var errWouldBlock = errors.New("exchange: would block")

// read is rc.Read's callback: one non-blocking read into the Reader's buffer. On EAGAIN it gives
// the (empty) buffer back and asks the poller to wait.
func (w *waiter) read(fd uintptr) bool {
	w.called = true
	r := w.r
	br := r.b()
	r.src.fd, r.src.raw = int(fd), true
	_, err := br.Peek(1)
	r.src.raw = false
	if err == errWouldBlock {
		r.release() // nothing was read: the Reset in release also clears the error
		return false
	}
	w.err = err
	return true
}

// fill blocks until the Reader holds at least one byte (or an end, or an error), reading
// whatever arrived in one read; the runtime poller does the waiting, so the connection's read
// deadline applies. The Reader holds no buffer on entry.
func (w *waiter) fill() error {
	w.called, w.err = false, nil
	if err := w.rc.Read(w.fn); err != nil {
		return err
	}
	if !w.called {
		_, err := w.r.b().Peek(1)
		return err
	}
	return w.err
}

// rawRead is source.Read while the waiter reads: one read(2) on the socket, reported the way
// the connection's own Read would report it (an end as io.EOF, a reset as ECONNRESET).
func (s *source) rawRead(p []byte) (int, error) {
	for {
		n, err := syscall.Read(s.fd, p)
		switch {
		case err == syscall.EINTR:
			continue
		case err == syscall.EAGAIN:
			return 0, errWouldBlock
		case err != nil:
			return 0, err
		case n == 0:
			return 0, io.EOF
		}
		if s.touch != nil {
			s.touch(n)
		}
		return n, nil
	}
}
