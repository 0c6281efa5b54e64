package audit

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
	if err := os.WriteFile(last, bytes.TrimSuffix(data, []byte("\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	rep = mustVerify(t, dir, VerifyOptions{PublicKey: pub, Checkpoint: shipped})
	if rep.Records != 34 || rep.Uncovered != 4 || rep.TornBytes == 0 {
		t.Fatalf("report %+v: want 34 records, 4 uncovered, a torn line", rep)
	}
}
