package audit

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	tlog "github.com/transparency-dev/formats/log"
	"golang.org/x/mod/sumdb/note"
)

// startLog writes 30 records across several small segments and closes the
// store, so its last checkpoint covers all 30; it returns the directory, the
// public key and that checkpoint, as an operator would have shipped them off
// the box.
func startLog(t *testing.T) (dir, pub string, shipped []byte) {
	t.Helper()
	dir = t.TempDir()
	s := openStore(t, Config{Dir: dir, SegmentBytes: 1500})
	appendN(t, s, 0, 30)
	closeStore(t, s)
	shipped, err := os.ReadFile(filepath.Join(dir, checkpointFile))
	if err != nil {
		t.Fatal(err)
	}
	segs, err := listSegments(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(segs) < 4 {
		t.Fatalf("%d segments, want at least 4", len(segs))
	}
	return dir, s.PublicKey(), shipped
}

// Issue 29 item 10: deleting the oldest segments and checkpoints.log must not
// verify against an off-box checkpoint that covered the deleted records.
func TestVerifyDetectsDeletedStart(t *testing.T) {
	tests := []struct {
		name    string
		remove  int  // oldest segments deleted
		cpFile  bool // also delete the checkpoint file on the box
		shipped bool // verify against the off-box checkpoint
	}{
		{name: "first two segments and checkpoints.log, off-box checkpoint", remove: 2, shipped: true},
		{name: "first segment and every checkpoint on the box, off-box checkpoint", remove: 1, cpFile: true, shipped: true},
		{name: "first two segments and checkpoints.log, on-box checkpoint only", remove: 2},
		{name: "first segment and every checkpoint on the box, nothing signed left", remove: 1, cpFile: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir, pub, shipped := startLog(t)
			segs, _ := listSegments(dir)
			for _, seg := range segs[:tt.remove] {
				if err := os.Remove(filepath.Join(dir, seg.name)); err != nil {
					t.Fatal(err)
				}
			}
			os.Remove(filepath.Join(dir, checkpointsLog))
			if tt.cpFile {
				os.Remove(filepath.Join(dir, checkpointFile))
			}
			opts := VerifyOptions{PublicKey: pub}
			if tt.shipped {
				opts.Checkpoint = shipped
			}
			rep, err := Verify(dir, opts)
			if err != nil {
				t.Fatalf("Verify: %v", err)
			}
			if rep.Problem == nil {
				t.Fatalf("Verify passed a log whose first %d segment(s) were deleted: %d records (seq %d to %d)",
					tt.remove, rep.Records, rep.Start, rep.End)
			}
			t.Logf("Verify: %s", rep.Problem)
			if rep.Problem.Kind != Deleted || rep.Problem.Seq != 1 {
				t.Fatalf("Verify found %s; want records from seq 1 deleted", rep.Problem)
			}
			// The store refuses to continue such a log: appending would have
			// it sign a checkpoint for the shortened start.
			if _, err := Open(Config{Dir: dir, SegmentBytes: 1500}, nil); err == nil || !strings.Contains(err.Error(), "removed") {
				t.Fatalf("Open of a log whose first records were deleted: %v", err)
			}
		})
	}
}

// Issue 29 item 11: a record whose newline was cut is not a crash's torn
// line when a checkpoint covers it.
func TestVerifyDetectsCutNewline(t *testing.T) {
	tests := []struct {
		name    string
		shipped bool // verify against the off-box checkpoint, with the checkpoint files on the box deleted
	}{
		{name: "checkpoints on the box"},
		{name: "off-box checkpoint only", shipped: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir, pub, shipped := startLog(t)
			segs, _ := listSegments(dir)
			last := filepath.Join(dir, segs[len(segs)-1].name)
			data, err := os.ReadFile(last)
			if err != nil {
				t.Fatal(err)
			}
			cut := bytes.TrimSuffix(data, []byte("\n"))
			if err := os.WriteFile(last, cut, 0o600); err != nil {
				t.Fatal(err)
			}
			opts := VerifyOptions{PublicKey: pub}
			if tt.shipped {
				os.Remove(filepath.Join(dir, checkpointsLog))
				os.Remove(filepath.Join(dir, checkpointFile))
				opts.Checkpoint = shipped
			}
			rep, err := Verify(dir, opts)
			if err != nil {
				t.Fatalf("Verify: %v", err)
			}
			if rep.Problem == nil {
				t.Fatalf("Verify passed a log whose last record lost its newline: %d records, torn %d bytes", rep.Records, rep.TornBytes)
			}
			t.Logf("Verify: %s", rep.Problem)
			if rep.Problem.Seq != 30 || !strings.Contains(rep.Problem.Detail, "newline") {
				t.Fatalf("Verify found %s; want the cut newline of seq 30", rep.Problem)
			}
			if !tt.shipped {
				// The next start sees the checkpoint covering the record: it
				// neither deletes the record nor goes on.
				if _, err := Open(Config{Dir: dir, SegmentBytes: 1500}, nil); err == nil || !strings.Contains(err.Error(), "newline") {
					t.Fatalf("Open of a log whose covered last record lost its newline: %v", err)
				}
				if after, _ := os.ReadFile(last); !bytes.Equal(after, cut) {
					t.Fatalf("Open changed the segment: %d bytes, was %d", len(after), len(cut))
				}
				return
			}
			// With every checkpoint on the box gone too, the store cannot tell
			// the cut from a crash: it goes on, but keeps the line beside the
			// segment, and the shipped checkpoint still shows the cut.
			s, err := Open(Config{Dir: dir, SegmentBytes: 1500}, nil)
			if err != nil {
				t.Fatal(err)
			}
			closeStore(t, s)
			aside, _ := filepath.Glob(last + ".torn-*")
			if len(aside) != 1 {
				t.Fatalf("torn line saved in %v, want one file", aside)
			}
			if saved, _ := os.ReadFile(aside[0]); !bytes.Equal(saved, cut[bytes.LastIndexByte(cut, '\n')+1:]) {
				t.Fatalf("saved %q", saved)
			}
			rep, err = Verify(dir, opts)
			if err != nil || rep.Problem == nil || rep.Problem.Kind != Truncated || rep.Problem.Seq != 30 {
				t.Fatalf("Verify after the restart: %v, %+v", err, rep.Problem)
			}
		})
	}
}

// Records after the newest checkpoint are reported, since a cut among them
// cannot be told from a crash.
func TestVerifyReportsUncovered(t *testing.T) {
	dir, pub, shipped := startLog(t)
	s := openStore(t, Config{Dir: dir, SegmentBytes: 1500, CheckpointEvery: 1 << 40})
	appendN(t, s, 30, 5)
	// Crash: the store is never closed, so no checkpoint covers 31 to 35.
	rep := mustVerify(t, dir, VerifyOptions{PublicKey: pub, Checkpoint: shipped})
	if rep.Records != 35 || rep.Covered != 30 || rep.Uncovered != 5 || rep.GivenCovers != 30 {
		t.Fatalf("report %+v: want 35 records, 30 covered, 5 uncovered", rep)
	}
	// A cut newline of an uncovered record stays a torn line: a crash leaves
	// the same bytes.
	segs, _ := listSegments(dir)
	last := filepath.Join(dir, segs[len(segs)-1].name)
	data, _ := os.ReadFile(last)
	data = bytes.TrimRight(data, "\x00") // the running store's padding
	if err := os.WriteFile(last, bytes.TrimSuffix(data, []byte("\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	rep = mustVerify(t, dir, VerifyOptions{PublicKey: pub, Checkpoint: shipped})
	if rep.Records != 34 || rep.Uncovered != 4 || rep.TornBytes == 0 {
		t.Fatalf("report %+v: want 34 records, 4 uncovered, a torn line", rep)
	}
}

// retainedLog writes 30 records with retention keeping 3 segments; shipped
// is the checkpoint after the first 4 records, before retention removed
// anything, and the store's last one is in the checkpoint file.
func retainedLog(t *testing.T) (dir, pub string, early []byte) {
	t.Helper()
	dir = t.TempDir()
	s := openStore(t, Config{Dir: dir, SegmentBytes: 1500, RetainSegments: 3, CheckpointEvery: 1 << 40})
	appendN(t, s, 0, 4)
	if err := s.checkpoint(); err != nil {
		t.Fatal(err)
	}
	early = s.Checkpoint()
	appendN(t, s, 4, 26)
	closeStore(t, s)
	return dir, s.PublicKey(), early
}

func TestRetentionSignsTheStart(t *testing.T) {
	dir, pub, early := retainedLog(t)
	late, err := os.ReadFile(filepath.Join(dir, checkpointFile))
	if err != nil {
		t.Fatal(err)
	}
	segs, _ := listSegments(dir)
	if len(segs) != 3 || segs[0].first == 1 {
		t.Fatalf("segments %v: want 3 after retention", segs)
	}
	first := segs[0].first
	cp, err := OpenCheckpoint(late, pub)
	if err != nil || cp.Start != first || cp.Size != 30 {
		t.Fatalf("last checkpoint %+v, %v: want start %d, 30 records", cp, err, first)
	}

	t.Run("verifies on the box and against a checkpoint shipped after retention", func(t *testing.T) {
		for _, opts := range []VerifyOptions{{PublicKey: pub}, {PublicKey: pub, Checkpoint: late}} {
			rep := mustVerify(t, dir, opts)
			if rep.Start != first || rep.From != first || rep.Uncovered != 0 || rep.Covered != 30 {
				t.Fatalf("report %+v: want the log proven from %d", rep, first)
			}
		}
	})
	t.Run("a checkpoint shipped before retention still commits to seq 1", func(t *testing.T) {
		rep, err := Verify(dir, VerifyOptions{PublicKey: pub, Checkpoint: early})
		if err != nil {
			t.Fatal(err)
		}
		if rep.Problem == nil || rep.Problem.Kind != Deleted || rep.Problem.Seq != 1 ||
			!strings.Contains(rep.Problem.Detail, "on the box names seq") {
			t.Fatalf("Verify against the early checkpoint: %v", rep.Problem)
		}
	})
	t.Run("a segment deleted beyond retention", func(t *testing.T) {
		dir2 := t.TempDir()
		copyDir(t, dir, dir2)
		os.Remove(filepath.Join(dir2, segs[0].name))
		for _, opts := range []VerifyOptions{{PublicKey: pub}, {PublicKey: pub, Checkpoint: late}} {
			rep, err := Verify(dir2, opts)
			if err != nil {
				t.Fatal(err)
			}
			if rep.Problem == nil || rep.Problem.Kind != Deleted || rep.Problem.Seq != first {
				t.Fatalf("Verify: %v; want records from %d deleted", rep.Problem, first)
			}
		}
		if _, err := Open(Config{Dir: dir2, SegmentBytes: 1500, RetainSegments: 3}, nil); err == nil || !strings.Contains(err.Error(), "outside retention") {
			t.Fatalf("Open: %v", err)
		}
	})
	t.Run("a changed anchor", func(t *testing.T) {
		dir2 := t.TempDir()
		copyDir(t, dir, dir2)
		path := filepath.Join(dir2, segs[0].name)
		data, _ := os.ReadFile(path)
		flipHexDigit(data, bytes.Index(data, []byte(`"prev":"`))+len(`"prev":"`))
		os.WriteFile(path, data, 0o600)
		rep, err := Verify(dir2, VerifyOptions{PublicKey: pub, Checkpoint: late})
		if err != nil {
			t.Fatal(err)
		}
		if rep.Problem == nil || rep.Problem.Kind != Changed || rep.Problem.Seq != first {
			t.Fatalf("Verify: %v", rep.Problem)
		}
	})
}

// A checkpoint an older version wrote names no start: it commits to the log
// from seq 1, and Open takes the log's first record as the start once.
func TestOldFormatCheckpoint(t *testing.T) {
	tests := []struct {
		name     string
		retain   int
		verifies bool // against the old checkpoint kept off the box
	}{
		{name: "log from seq 1", verifies: true},
		{name: "log cut by retention", retain: 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			s := openStore(t, Config{Dir: dir, SegmentBytes: 1500, RetainSegments: tt.retain})
			appendN(t, s, 0, 30)
			closeStore(t, s)
			cur, err := OpenCheckpoint(s.Checkpoint(), s.PublicKey())
			if err != nil {
				t.Fatal(err)
			}
			old := oldCheckpoint(t, s.signer, head{seq: cur.Size, hash: cur.Head})
			os.WriteFile(filepath.Join(dir, checkpointFile), old, 0o644)
			os.WriteFile(filepath.Join(dir, checkpointsLog), append(old, '\n'), 0o644)
			if c, err := OpenCheckpoint(old, s.PublicKey()); err != nil || c.Start != 0 {
				t.Fatalf("old checkpoint: %+v, %v", c, err)
			}

			rep, err := Verify(dir, VerifyOptions{PublicKey: s.PublicKey(), Checkpoint: old})
			if err != nil {
				t.Fatal(err)
			}
			if tt.verifies != (rep.Problem == nil) {
				t.Fatalf("Verify against the old checkpoint: %v", rep.Problem)
			}
			if !tt.verifies && !strings.Contains(rep.Problem.Detail, "older format") {
				t.Fatalf("Verify: %v; want the old format named", rep.Problem)
			}
			// The new version takes the log as it is and signs its start.
			s2 := openStore(t, Config{Dir: dir, SegmentBytes: 1500, RetainSegments: tt.retain})
			closeStore(t, s2)
			now, err := OpenCheckpoint(s2.Checkpoint(), s.PublicKey())
			segs, _ := listSegments(dir)
			if err != nil || now.Start != segs[0].first || now.Size != 30 {
				t.Fatalf("checkpoint after the upgrade %+v, %v: want start %d", now, err, segs[0].first)
			}
			for _, opts := range []VerifyOptions{{PublicKey: s.PublicKey()}, {PublicKey: s.PublicKey(), Checkpoint: s2.Checkpoint()}} {
				if rep := mustVerify(t, dir, opts); rep.From != segs[0].first {
					t.Fatalf("report %+v", rep)
				}
			}
		})
	}
}

// oldCheckpoint signs h as the version before start lines did.
func oldCheckpoint(t *testing.T, signer note.Signer, h head) []byte {
	t.Helper()
	body := tlog.Checkpoint{Origin: signer.Name(), Size: h.seq, Hash: h.hash[:]}.Marshal()
	body = append(body, timeExtension...)
	body = time.Now().UTC().AppendFormat(body, timeLayout)
	body = append(body, '\n')
	msg, err := note.Sign(&note.Note{Text: string(body)}, signer)
	if err != nil {
		t.Fatal(err)
	}
	return msg
}

// Retention may remove every record when the segment after them is created
// and a crash comes before its first record: the checkpoint it signed holds
// the head, and Open continues the chain from it.
func TestOpenAfterRetentionRemovedEveryRecord(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, Config{Dir: dir})
	appendN(t, s, 0, 5)
	closeStore(t, s)
	h := s.w.head
	msg, err := signCheckpoint(s.signer, h, base{seq: h.seq + 1, anchor: h.hash}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, checkpointFile), msg, 0o644)
	os.Remove(filepath.Join(dir, segmentName(1)))
	os.WriteFile(filepath.Join(dir, segmentName(6)), nil, 0o600)
	rep := mustVerify(t, dir, VerifyOptions{Checkpoint: msg})
	if rep.Records != 0 || rep.From != 6 {
		t.Fatalf("report %+v", rep)
	}
	s = openStore(t, Config{Dir: dir})
	appendN(t, s, 5, 2)
	closeStore(t, s)
	rep = mustVerify(t, dir, VerifyOptions{Checkpoint: msg})
	if rep.Start != 6 || rep.End != 7 || rep.From != 6 {
		t.Fatalf("report %+v", rep)
	}
}

// An empty segment that a crash left with a torn first line (rotation
// creates a segment with its first write) is not a cut: nothing covers it.
func TestOpenRemovesTornNewSegment(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, Config{Dir: dir})
	appendN(t, s, 0, 3)
	closeStore(t, s)
	torn := filepath.Join(dir, segmentName(4))
	os.WriteFile(torn, []byte(`{"args_hash":"sha`), 0o600)
	if rep := mustVerify(t, dir, VerifyOptions{}); rep.TornBytes == 0 || rep.Uncovered != 0 {
		t.Fatalf("report %+v", rep)
	}
	s = openStore(t, Config{Dir: dir})
	appendN(t, s, 3, 1)
	closeStore(t, s)
	if saved, _ := filepath.Glob(torn + ".torn-*"); len(saved) != 1 {
		t.Fatalf("saved %v", saved)
	}
	if rep := mustVerify(t, dir, VerifyOptions{}); rep.End != 4 || rep.TornBytes != 0 {
		t.Fatalf("report %+v", rep)
	}
}

func copyDir(t *testing.T, from, to string) {
	t.Helper()
	entries, err := os.ReadDir(from)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(from, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(to, e.Name()), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// Open checks the log against the newest of the checkpoint file and the last
// note of checkpoints.log, so deleting the file alone does not let a cut
// tail through.
func TestOpenChecksLastLoggedCheckpoint(t *testing.T) {
	tests := []struct {
		name  string
		notes func(all []byte, last []byte) []byte // checkpoints.log left
	}{
		{name: "whole checkpoints.log", notes: func(all, _ []byte) []byte { return all }},
		{name: "only its last note", notes: func(_, last []byte) []byte { return append(last, '\n') }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir, seg, lines := tamperLog(t)
			all, _ := os.ReadFile(filepath.Join(dir, checkpointsLog))
			last, _ := os.ReadFile(filepath.Join(dir, checkpointFile))
			os.WriteFile(filepath.Join(dir, checkpointsLog), tt.notes(all, last), 0o644)
			os.Remove(filepath.Join(dir, checkpointFile))
			writeLines(t, seg, lines[:8])
			if _, err := Open(Config{Dir: dir}, nil); err == nil || !strings.Contains(err.Error(), "covers 10") {
				t.Fatalf("Open of a cut log: %v", err)
			}
		})
	}
}

// Retention in a running store does not sign over records someone else
// deleted: the start stays, and verify still fails.
func TestRetentionDoesNotLaunderDeletion(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, Config{Dir: dir, SegmentBytes: 1500, RetainSegments: 3})
	appendN(t, s, 0, 10)
	segs, _ := listSegments(dir)
	if segs[0].first != 1 {
		t.Fatalf("segments %v", segs)
	}
	// Deleted while the store runs; rotations and retention follow.
	if err := os.Remove(filepath.Join(dir, segs[0].name)); err != nil {
		t.Fatal(err)
	}
	appendN(t, s, 10, 30)
	closeStore(t, s)
	cp, err := OpenCheckpoint(s.Checkpoint(), s.PublicKey())
	if err != nil || cp.Start != 1 {
		t.Fatalf("checkpoint %+v, %v: want the start kept at 1", cp, err)
	}
	rep, err := Verify(dir, VerifyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Problem == nil || rep.Problem.Kind != Deleted || rep.Problem.Seq != 1 {
		t.Fatalf("Verify: %v", rep.Problem)
	}
}
