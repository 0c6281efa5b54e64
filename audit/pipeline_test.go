package audit

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
)

// pipelined starts a store whose syncs each wait for a value on the gate it
// returns (the sync's result), and whose writer reports each batch written.
func pipelined(t *testing.T) (s *Store, gate chan error, written chan struct{}, syncs *atomic.Int32) {
	s = openStore(t, Config{})
	gate, written, syncs = make(chan error), make(chan struct{}, 16), new(atomic.Int32)
	s.beforeSync = func() error { syncs.Add(1); return <-gate }
	s.afterBatch = func() { written <- struct{}{} }
	return s, gate, written, syncs
}

type appended struct {
	rc  Receipt
	err error
}

func appendAsync(s *Store, i int) chan appended {
	ch := make(chan appended, 1)
	go func() {
		rc, err := s.Append(context.Background(), sample(i))
		ch <- appended{rc, err}
	}()
	return ch
}

func none(t *testing.T, what string, chs ...chan appended) {
	t.Helper()
	for i, ch := range chs {
		select {
		case r := <-ch:
			t.Fatalf("%s: Append %d returned (%+v) before the sync that covers it ended", what, i, r)
		default:
		}
	}
}

// Batches written while a sync runs are acknowledged only after a later
// sync, and one sync covers all of them.
func TestPipelineAcksAfterCoveringSync(t *testing.T) {
	s, gate, written, syncs := pipelined(t)
	a := appendAsync(s, 0)
	<-written // a is written and its sync waits
	b := appendAsync(s, 1)
	<-written
	c := appendAsync(s, 2)
	<-written // b and c are written while a's sync runs
	none(t, "a's sync under way", a, b, c)
	gate <- nil
	if r := <-a; r.err != nil || r.rc.Seq != 1 {
		t.Fatalf("a: %+v", r)
	}
	// The second sync, covering b and c, is waiting now.
	none(t, "the second sync under way", b, c)
	gate <- nil
	for i, ch := range []chan appended{b, c} {
		if r := <-ch; r.err != nil || r.rc.Seq != uint64(i+2) {
			t.Fatalf("Append %d: %+v", i+1, r)
		}
	}
	if n := syncs.Load(); n != 2 {
		t.Fatalf("%d syncs, want 2 (one for a, one covering b and c)", n)
	}
	s.beforeSync, s.afterBatch = nil, nil
	closeStore(t, s)
	if rep := mustVerify(t, s.cfg.Dir, VerifyOptions{}); rep.Records != 3 {
		t.Fatalf("report %+v", rep)
	}
}

// A failed sync fails every batch not yet durable, including those written
// after it began; the chain goes on from the last durable record.
func TestPipelineFailedSyncFailsAllPending(t *testing.T) {
	for _, firstOK := range []bool{false, true} {
		name := "first sync fails"
		if firstOK {
			name = "second sync fails"
		}
		t.Run(name, func(t *testing.T) {
			s, gate, written, _ := pipelined(t)
			fail := errors.New("injected sync failure")
			a := appendAsync(s, 0)
			<-written
			b := appendAsync(s, 1)
			<-written
			c := appendAsync(s, 2)
			<-written
			none(t, "a's sync under way", a, b, c)
			failed := []chan appended{a, b, c}
			if firstOK {
				gate <- nil
				if r := <-a; r.err != nil || r.rc.Seq != 1 {
					t.Fatalf("a: %+v", r)
				}
				failed = failed[1:]
			}
			gate <- fail
			for i, ch := range failed {
				if r := <-ch; !errors.Is(r.err, fail) || !errors.Is(r.err, ErrUnavailable) {
					t.Fatalf("Append %d after the failed sync: %+v", i, r)
				}
			}
			if s.Ready() == nil {
				t.Fatal("Ready is nil after a failed sync")
			}
			s.beforeSync, s.afterBatch = nil, nil
			want := uint64(1)
			if firstOK {
				want = 2
			}
			rc, err := s.Append(context.Background(), sample(3))
			if err != nil || rc.Seq != want {
				t.Fatalf("Append after the failure: %+v, %v; want seq %d", rc, err, want)
			}
			closeStore(t, s)
			if rep := mustVerify(t, s.cfg.Dir, VerifyOptions{}); rep.Records != want {
				t.Fatalf("report %+v", rep)
			}
		})
	}
}

// Requests are recycled: Appends that give up (a cancelled context) mixed
// with ones that succeed never receive another's result.
func TestRecycledRequestsKeepTheirResults(t *testing.T) {
	s := openStore(t, Config{})
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	type got struct {
		seq  uint64
		tool string
	}
	results := make(chan got, 16*40)
	done := make(chan struct{})
	for w := range 16 {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := range 40 {
				ctx := context.Background()
				if i%3 == 0 {
					ctx = cancelled
				}
				r := sample(w*40 + i)
				r.Tool = fmt.Sprintf("w%d-%d", w, i)
				rc, err := s.Append(ctx, r)
				if err != nil {
					continue
				}
				if rc.Seq != r.Seq {
					t.Errorf("receipt seq %d, record seq %d", rc.Seq, r.Seq)
				}
				results <- got{rc.Seq, r.Tool}
			}
		}()
	}
	for range 16 {
		<-done
	}
	close(results)
	closeStore(t, s)
	bySeq := map[uint64]string{}
	for r, err := range Query(s.cfg.Dir, Filter{}) {
		if err != nil {
			t.Fatal(err)
		}
		bySeq[r.Seq] = r.Tool
	}
	n := 0
	for g := range results {
		n++
		if bySeq[g.seq] != g.tool {
			t.Fatalf("Append of %s was told seq %d, which holds %s", g.tool, g.seq, bySeq[g.seq])
		}
	}
	if n < 16*26 {
		t.Fatalf("only %d Appends succeeded", n)
	}
	mustVerify(t, s.cfg.Dir, VerifyOptions{})
}
