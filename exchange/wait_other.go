//go:build !linux

package exchange

import "syscall"

// waiter is Linux-only; elsewhere a reader keeps its buffer while a body is in progress.
type waiter struct{ r *Reader }

func newWaiter(syscall.RawConn) *waiter { return nil }

func (w *waiter) fill() error { panic("unreachable") }

func (s *source) rawRead(p []byte) (int, error) { panic("unreachable") }
