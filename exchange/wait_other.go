//go:build !linux

package exchange

import "syscall"

// waiter is Linux-only; elsewhere a reader keeps its buffer while a body is in progress.
type waiter struct{}

func newWaiter(syscall.RawConn) *waiter { return nil }

func (w *waiter) wait() error { panic("unreachable") }
