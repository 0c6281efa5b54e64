package main

import (
	"strings"
	"sync"
	"time"
)

// notifyBuffer is a process's output, read while it runs: waitFor wakes on every write instead of
// polling with sleeps, so a slow scheduler makes it slower, never wrong.
type notifyBuffer struct {
	mu      sync.Mutex
	b       strings.Builder
	changed chan struct{} // closed (and replaced) by every write
}

func newNotifyBuffer() *notifyBuffer { return &notifyBuffer{changed: make(chan struct{})} }

func (w *notifyBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.b.Write(p)
	close(w.changed)
	w.changed = make(chan struct{})
	return len(p), nil
}

func (w *notifyBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// snapshot is the text so far and the channel the next write closes.
func (w *notifyBuffer) snapshot() (string, <-chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String(), w.changed
}

// waitFor reports whether s was written before done closed. hang is a guard against a test that
// would otherwise never end, not a speed expectation: make it minutes.
func (w *notifyBuffer) waitFor(s string, done <-chan struct{}, hang time.Duration) bool {
	guard := time.NewTimer(hang)
	defer guard.Stop()
	for {
		text, changed := w.snapshot()
		if strings.Contains(text, s) {
			return true
		}
		select {
		case <-changed:
		case <-done:
			text, _ := w.snapshot()
			return strings.Contains(text, s)
		case <-guard.C:
			return false
		}
	}
}
