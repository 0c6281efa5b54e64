package audit

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

func openStore(t *testing.T, cfg Config) *Store {
	t.Helper()
	if cfg.Dir == "" {
		cfg.Dir = t.TempDir()
	}
	s, err := Open(cfg, nil)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	return s
}

func sample(i int) *Record {
	return &Record{
		Kind: KindAuthorization, Flow: uint64(i/4 + 1), Exchange: uint64(i%4 + 1),
		Client: fmt.Sprintf("10.0.0.%d:4%04d", i%3+1, i), Destination: "192.0.2.1:443",
		Server: "mcp.example", Level: 2, Method: "tools/call", Direction: "client_to_server",
		ID: fmt.Sprint(i), Tool: fmt.Sprintf("tool%d", i%5), Rule: "default", Decision: Allow,
		ArgsHash: "sha256:00", Identity: &Identity{PID: 42, UID: 1000, Comm: "agent", Exe: "/usr/bin/agent", Cgroup: 7},
	}
}

func appendN(t *testing.T, s *Store, from, n int) {
	t.Helper()
	for i := from; i < from+n; i++ {
		if _, err := s.Append(context.Background(), sample(i)); err != nil {
			t.Fatalf("Append %d: %v", i, err)
		}
	}
}

func closeStore(t *testing.T, s *Store) {
	t.Helper()
	if err := s.Close(context.Background()); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

func mustVerify(t *testing.T, dir string, opts VerifyOptions) Report {
	t.Helper()
	rep, err := Verify(dir, opts)
	if err != nil {
		t.Fatalf("Verify: %v", err)
	}
	if rep.Problem != nil {
		t.Fatalf("Verify found %s", rep.Problem)
	}
	return rep
}

func TestAppendVerifyQuery(t *testing.T) {
	s := openStore(t, Config{})
	dir := s.cfg.Dir
	r := sample(0)
	r.Arguments = json.RawMessage(`{ "b": 1, "a": "x" }`)
	rc, err := s.Append(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	if rc.Seq != 1 || r.Seq != 1 || r.Prev != fmt.Sprintf("%064d", 0) || r.Time.IsZero() {
		t.Fatalf("receipt %+v, record seq %d prev %q time %v", rc, r.Seq, r.Prev, r.Time)
	}
	appendN(t, s, 1, 9)
	closeStore(t, s)

	rep := mustVerify(t, dir, VerifyOptions{})
	if rep.Start != 1 || rep.End != 10 || rep.Records != 10 || rep.Checkpoints == 0 {
		t.Fatalf("report %+v", rep)
	}
	var got []*Record
	for r, err := range Query(dir, Filter{}) {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, r)
	}
	if len(got) != 10 {
		t.Fatalf("query returned %d records, want 10", len(got))
	}
	if string(got[0].Arguments) != `{"a":"x","b":1}` || *got[0].Identity != *sample(0).Identity || got[0].Tool != "tool0" {
		t.Fatalf("first record read back as %+v", got[0])
	}
	n := 0
	for r, err := range Query(dir, Filter{Tool: "tool1", Client: "10.0.0.2"}) {
		if err != nil || r.Tool != "tool1" {
			t.Fatalf("filtered query gave %+v, %v", r, err)
		}
		n++
	}
	if n != 1 { // i = 1 and 6 have tool1; only i = 1 has client 10.0.0.2
		t.Fatalf("filtered query returned %d records, want 1", n)
	}
}

func TestConcurrentAppendsFormOneChain(t *testing.T) {
	s := openStore(t, Config{})
	const writers, each = 32, 25
	concurrentAppends(t, s, writers, each)
	closeStore(t, s)
	if rep := mustVerify(t, s.cfg.Dir, VerifyOptions{}); rep.Records != writers*each {
		t.Fatalf("verified %d records, want %d", rep.Records, writers*each)
	}
}

// concurrentAppends appends each records from each of
// writers goroutines and checks no seq is handed out twice.
func concurrentAppends(t *testing.T, s *Store, writers, each int) {
	t.Helper()
	seqs := make(chan uint64, writers*each)
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				rc, err := s.Append(context.Background(), sample(w*each+i))
				if err != nil {
					t.Error(err)
					return
				}
				seqs <- rc.Seq
			}
		})
	}
	wg.Wait()
	close(seqs)
	seen := map[uint64]bool{}
	for q := range seqs {
		if seen[q] {
			t.Fatalf("seq %d handed out twice", q)
		}
		seen[q] = true
	}
}

func TestReopenContinuesChain(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, Config{Dir: dir})
	appendN(t, s, 0, 5)
	pub := s.PublicKey()
	closeStore(t, s)
	s = openStore(t, Config{Dir: dir})
	if s.PublicKey() != pub {
		t.Fatal("the key changed across a reopen")
	}
	rc, err := s.Append(context.Background(), sample(5))
	if err != nil || rc.Seq != 6 {
		t.Fatalf("first append after reopen: %+v, %v", rc, err)
	}
	closeStore(t, s)
	rep := mustVerify(t, dir, VerifyOptions{PublicKey: pub})
	if rep.Records != 6 || rep.Segments != 1 {
		t.Fatalf("report %+v", rep)
	}
	for _, f := range []struct {
		name string
		perm os.FileMode
	}{{keyFile, 0o600}, {pubFile, 0o644}} {
		fi, err := os.Stat(filepath.Join(dir, f.name))
		if err != nil || fi.Mode().Perm() != f.perm {
			t.Fatalf("%s: %v, mode %v, want %v", f.name, err, fi.Mode().Perm(), f.perm)
		}
	}
}

func TestRotationAndRetentionKeepVerifying(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, Config{Dir: dir, SegmentBytes: 2000, RetainSegments: 3})
	appendN(t, s, 0, 40)
	// A checkpoint now, while its records exist, and records after it, so
	// verify must check it against a record that retention later keeps.
	if err := s.checkpoint(); err != nil {
		t.Fatal(err)
	}
	appendN(t, s, 40, 60)
	closeStore(t, s)
	segs, err := listSegments(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(segs) != 3 {
		t.Fatalf("%d segments after retention, want 3", len(segs))
	}
	rep := mustVerify(t, dir, VerifyOptions{})
	if rep.Start <= 1 || rep.End != 100 || rep.Records != 100-rep.Start+1 || rep.Segments != 3 {
		t.Fatalf("report %+v", rep)
	}
	// Reopening after rotation continues from the newest segment.
	s = openStore(t, Config{Dir: dir, SegmentBytes: 2000, RetainSegments: 3})
	appendN(t, s, 100, 10)
	closeStore(t, s)
	if rep := mustVerify(t, dir, VerifyOptions{}); rep.End != 110 {
		t.Fatalf("report %+v", rep)
	}
}

func TestTornFinalLine(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, Config{Dir: dir})
	appendN(t, s, 0, 3)
	closeStore(t, s)
	seg := filepath.Join(dir, segmentName(1))
	f, err := os.OpenFile(seg, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(`{"args_hash":"sha2`)
	f.Close()
	if rep := mustVerify(t, dir, VerifyOptions{}); rep.TornBytes == 0 || rep.Records != 3 {
		t.Fatalf("a torn final line: report %+v", rep)
	}
	s = openStore(t, Config{Dir: dir})
	appendN(t, s, 3, 1)
	closeStore(t, s)
	if rep := mustVerify(t, dir, VerifyOptions{}); rep.TornBytes != 0 || rep.Records != 4 {
		t.Fatalf("after reopen: report %+v", rep)
	}
}

func TestAppendTimeoutAndRecovery(t *testing.T) {
	s := openStore(t, Config{Timeout: 1}) // 1ns: nothing is durable within it
	release := make(chan struct{})
	s.beforeSync = func() error { <-release; return nil }
	_, err := s.Append(context.Background(), sample(0))
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Append with a blocked writer: %v, want ErrUnavailable", err)
	}
	if s.Ready() == nil {
		t.Fatal("Ready is nil after a timeout")
	}
	close(release)
	s.cfg.Timeout = DefaultTimeout
	if _, err := s.Append(context.Background(), sample(1)); err != nil {
		t.Fatalf("Append once the writer moves: %v", err)
	}
	if err := s.Ready(); err != nil {
		t.Fatalf("Ready after a successful write: %v", err)
	}
}

func TestAppendAfterClose(t *testing.T) {
	s := openStore(t, Config{})
	closeStore(t, s)
	if _, err := s.Append(context.Background(), sample(0)); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Append after Close: %v, want ErrUnavailable", err)
	}
	if s.Ready() == nil {
		t.Fatal("Ready is nil after Close")
	}
}

func TestAppendRejectsUnknownKind(t *testing.T) {
	s := openStore(t, Config{})
	r := sample(0)
	r.Kind = "other"
	if _, err := s.Append(context.Background(), r); err == nil || errors.Is(err, ErrUnavailable) {
		t.Fatalf("Append of kind %q: %v, want a validation error", r.Kind, err)
	}
}

func TestCheckpointIsSignedAndServed(t *testing.T) {
	s := openStore(t, Config{})
	appendN(t, s, 0, 4)
	if err := s.checkpoint(); err != nil {
		t.Fatal(err)
	}
	cp, err := OpenCheckpoint(s.Checkpoint(), s.PublicKey())
	if err != nil {
		t.Fatal(err)
	}
	if cp.Size != 4 || cp.Time.IsZero() || !bytes.HasPrefix(s.Checkpoint(), []byte("mcpintercept/audit/")) {
		t.Fatalf("checkpoint %+v:\n%s", cp, s.Checkpoint())
	}
	file, err := os.ReadFile(filepath.Join(s.cfg.Dir, checkpointFile))
	if err != nil || !bytes.Equal(file, s.Checkpoint()) {
		t.Fatalf("checkpoint file differs from the served one (%v)", err)
	}
}

func timeNowForTest() time.Time { return time.Now() }

// An outcome record alone still becomes durable (after outcomeDelay, not at the next
// authorization), and one waiting rides with the next authorization's commit, ahead of it.
func TestOutcomeCommittedLazily(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(Config{Dir: dir}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	auth := &Record{Kind: KindAuthorization, Tool: "a", Decision: Allow}
	if _, err := s.Append(ctx, auth); err != nil {
		t.Fatal(err)
	}
	out := &Record{Kind: KindOutcome, Tool: "a", Outcome: "result", Authorization: auth.Seq}
	if _, err := s.Append(ctx, out); err != nil {
		t.Fatalf("a lone outcome: %v", err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := s.Append(ctx, &Record{Kind: KindOutcome, Tool: "b", Outcome: "result", Authorization: auth.Seq})
		done <- err
	}()
	if _, err := s.Append(ctx, &Record{Kind: KindAuthorization, Tool: "c", Decision: Allow}); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	rep, err := Verify(dir, VerifyOptions{})
	if err != nil || rep.Problem != nil || rep.Records != 4 {
		t.Fatalf("verify: %+v, %v", rep, err)
	}
}
