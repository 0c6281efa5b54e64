package stage

import (
	"sync"
	"testing"
)

// Shared makes a connection's value once, even when stages ask for it at once, and mk may
// register an OnEnd hook (the audit writer does): no deadlock, and the hooks run in order, once.
func TestSharedAndEnd(t *testing.T) {
	var c Conn
	var ends []string
	made := 0
	mk := func() any {
		made++
		c.OnEnd(func(reason string) { ends = append(ends, "a:"+reason) })
		return &made
	}
	var wg sync.WaitGroup
	vals := make([]any, 8)
	for i := range vals {
		wg.Add(1)
		go func() { defer wg.Done(); vals[i] = c.Shared("k", mk) }()
	}
	wg.Wait()
	for _, v := range vals {
		if v != vals[0] {
			t.Fatalf("Shared returned two values: %v %v", v, vals[0])
		}
	}
	if made != 1 {
		t.Fatalf("mk ran %d times", made)
	}
	c.OnEnd(func(reason string) { ends = append(ends, "b:"+reason) })
	c.End("closed")
	c.End("again")
	if len(ends) != 2 || ends[0] != "a:closed" || ends[1] != "b:closed" {
		t.Fatalf("ends %q, want a:closed then b:closed, once", ends)
	}
}

// Get reads a stage's own options type; another type under its name panics (a stage never goes
// off in silence because its options were built wrong).
func TestGet(t *testing.T) {
	type mine struct{ on bool }
	o := Options{"mine": &mine{on: true}, "other": 3}
	if m, ok := Get[*mine](o, "mine"); !ok || !m.on {
		t.Fatalf("Get mine = %v %v", m, ok)
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("Get of another type did not panic")
			}
		}()
		Get[*mine](o, "other")
	}()
	if _, ok := Get[*mine](nil, "mine"); ok {
		t.Fatal("Get on nil options")
	}
}
