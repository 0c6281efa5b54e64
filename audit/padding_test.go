package audit

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// waitFilled waits until the filler of s has zero-filled at least n bytes of
// the active segment (a deadline only bounds a hung test).
func waitFilled(t *testing.T, s *Store, n int64) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(5 * time.Millisecond) {
		s.w.fill.mu.Lock()
		end := s.w.fill.end
		s.w.fill.mu.Unlock()
		if end >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the filler reached %d bytes, want %d", end, n)
		}
	}
}

// crashImage copies the directory of a running store, as a crash would
// leave it (nothing is synced that was not already).
func crashImage(t *testing.T, s *Store) string {
	t.Helper()
	dir := t.TempDir()
	copyDir(t, s.cfg.Dir, dir)
	return dir
}

// paddedLog returns the crash image of a store holding 5 records whose
// segment is zero-filled ahead, and the segment's path and record bytes.
func paddedLog(t *testing.T) (dir, seg string, records int64) {
	t.Helper()
	s := openStore(t, Config{})
	appendN(t, s, 0, 5)
	waitFilled(t, s, fillPiece)
	dir = crashImage(t, s)
	seg = filepath.Join(dir, segmentName(1))
	data, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	records = int64(bytes.IndexByte(data, 0))
	if records <= 0 || bytes.Count(data[:records], []byte("\n")) != 5 || len(bytes.Trim(data[records:], "\x00")) != 0 {
		t.Fatalf("segment of %d bytes: records end at %d; want 5 lines followed by NULs", len(data), records)
	}
	return dir, seg, records
}

func writeAt(t *testing.T, path string, b []byte, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

func queryAll(t *testing.T, dir string) int {
	t.Helper()
	n := 0
	for _, err := range Query(dir, Filter{}) {
		if err != nil {
			t.Fatalf("Query: %v", err)
		}
		n++
	}
	return n
}

// The padding is not data: verify and query stop at it, a restart continues
// after the last record, and Close cuts the padding off.
func TestPaddingIsNotData(t *testing.T) {
	dir, seg, records := paddedLog(t)
	if rep := mustVerify(t, dir, VerifyOptions{}); rep.Records != 5 || rep.TornBytes != 0 || rep.StrayBytes != 0 {
		t.Fatalf("report %+v", rep)
	}
	if n := queryAll(t, dir); n != 5 {
		t.Fatalf("query returned %d records, want 5", n)
	}
	s := openStore(t, Config{Dir: dir})
	appendN(t, s, 5, 2)
	closeStore(t, s)
	data, _ := os.ReadFile(seg)
	if bytes.IndexByte(data, 0) >= 0 || bytes.Count(data, []byte("\n")) != 7 || int64(len(data)) <= records {
		t.Fatalf("closed segment of %d bytes holds NULs or not 7 lines", len(data))
	}
	if rep := mustVerify(t, dir, VerifyOptions{}); rep.Records != 7 {
		t.Fatalf("report %+v", rep)
	}
	if aside, _ := filepath.Glob(seg + ".torn-*"); len(aside) != 0 {
		t.Fatalf("a restart after a clean padding saved %v", aside)
	}
}

// A crash that tore the last write inside the padding: the torn line, and
// pages of the write that reached the disk without the ones before them, are
// never acknowledged. Verify reads them as torn; recovery saves them aside
// and restores the padding.
func TestTornWriteInsidePadding(t *testing.T) {
	tests := []struct {
		name        string
		at          int64 // past the last record
		bytes       string
		torn, stray bool
	}{
		{"torn line", 0, `{"args_hash":"sha2`, true, false},
		{"later page only", 3000, `ord":"x"}` + "\n" + `{"args_hash"`, false, true},
		{"both", 0, `{"args`, true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir, seg, records := paddedLog(t)
			writeAt(t, seg, []byte(tt.bytes), records+tt.at)
			if tt.name == "both" {
				writeAt(t, seg, []byte("stray"), records+5000)
			}
			rep := mustVerify(t, dir, VerifyOptions{})
			if rep.Records != 5 || (rep.TornBytes > 0) != tt.torn || (rep.StrayBytes > 0) != tt.stray {
				t.Fatalf("report %+v", rep)
			}
			if n := queryAll(t, dir); n != 5 {
				t.Fatalf("query returned %d records, want 5", n)
			}
			before, _ := os.ReadFile(seg)
			s := openStore(t, Config{Dir: dir})
			aside, _ := filepath.Glob(seg + ".torn-*")
			if len(aside) != 1 {
				t.Fatalf("saved aside: %v, want one file", aside)
			}
			saved, _ := os.ReadFile(aside[0])
			if want := bytes.TrimRight(before[records:], "\x00"); !bytes.Equal(saved, want) {
				t.Fatalf("saved %q, want %q", saved, want)
			}
			after, _ := os.ReadFile(seg)
			if len(after) < len(before) || len(bytes.Trim(after[records:], "\x00")) != 0 {
				t.Fatalf("after recovery the segment is %d bytes (was %d) and its padding holds %q", len(after), len(before), bytes.Trim(after[records:], "\x00"))
			}
			appendN(t, s, 5, 1)
			closeStore(t, s)
			if rep := mustVerify(t, dir, VerifyOptions{}); rep.Records != 6 || rep.TornBytes != 0 || rep.StrayBytes != 0 {
				t.Fatalf("after reopen: %+v", rep)
			}
		})
	}
}

// Stray bytes that no crash explains: inside the padding of a segment
// another one follows, or after records a checkpoint covers.
func TestStrayBytesInPadding(t *testing.T) {
	t.Run("before the next segment", func(t *testing.T) {
		dir := t.TempDir()
		s := openStore(t, Config{Dir: dir, SegmentBytes: 1500})
		appendN(t, s, 0, 12)
		closeStore(t, s)
		segs, _ := listSegments(dir)
		if len(segs) < 2 {
			t.Fatalf("%d segments", len(segs))
		}
		first := filepath.Join(dir, segs[0].name)
		fi, _ := os.Stat(first)
		// Padding alone (a crash before rotation cut it off) is no problem.
		writeAt(t, first, make([]byte, 4096), fi.Size())
		mustVerify(t, dir, VerifyOptions{})
		writeAt(t, first, []byte("x"), fi.Size()+100)
		rep, err := Verify(dir, VerifyOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p := rep.Problem; p == nil || p.Kind != Changed || p.Segment != segs[0].name || !strings.Contains(p.Detail, "other than NUL") {
			t.Fatalf("Verify: %v", rep.Problem)
		}
	})
	t.Run("covered by a checkpoint", func(t *testing.T) {
		dir, seg, lines := tamperLog(t)
		// The last two records are overwritten with NULs but for a few
		// bytes: a crash cannot do that to records a checkpoint covers.
		last := append(bytes.Repeat([]byte{0}, len(lines[8])+len(lines[9])-3), "x}\n"...)
		writeLines(t, seg, append(lines[:8:8], last))
		rep, err := Verify(dir, VerifyOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p := rep.Problem; p == nil || p.Kind != Truncated || p.Seq != 9 || !strings.Contains(p.Detail, "other than NUL") {
			t.Fatalf("Verify: %v", rep.Problem)
		}
		if _, err := Open(Config{Dir: dir}, nil); err == nil || !strings.Contains(err.Error(), "covers 10") {
			t.Fatalf("Open: %v", err)
		}
	})
}

// A failed sync cuts the segment back to its last acknowledged record; the
// filler zero-fills again from there and records go on.
func TestFailedSyncCutsBackPadding(t *testing.T) {
	s := openStore(t, Config{})
	appendN(t, s, 0, 3)
	waitFilled(t, s, fillPiece)
	fail := errors.New("injected sync failure")
	s.beforeSync = func() error { return fail }
	if _, err := s.Append(context.Background(), sample(3)); !errors.Is(err, fail) || !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Append with a failing sync: %v", err)
	}
	data, _ := os.ReadFile(filepath.Join(s.cfg.Dir, segmentName(1)))
	if i := bytes.IndexByte(data, 0); i >= 0 {
		if len(bytes.Trim(data[i:], "\x00")) != 0 {
			t.Fatal("bytes other than NUL after the cut")
		}
		data = data[:i]
	}
	if bytes.Count(data, []byte("\n")) != 3 || !bytes.HasSuffix(data, []byte("\n")) {
		t.Fatalf("after the failed sync the segment holds %q", data)
	}
	s.beforeSync = nil
	appendN(t, s, 4, 2)
	waitFilled(t, s, fillPiece)
	if err := s.Ready(); err != nil {
		t.Fatalf("Ready after a successful write: %v", err)
	}
	closeStore(t, s)
	if rep := mustVerify(t, s.cfg.Dir, VerifyOptions{}); rep.Records != 5 {
		t.Fatalf("report %+v", rep)
	}
}

// Many records across rotations while the filler runs: the writer and the
// filler never write the same bytes (go test -race checks the rest).
func TestFillerAndRotation(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, Config{Dir: dir, SegmentBytes: 3 * fillPiece})
	concurrentAppends(t, s, 16, 150)
	closeStore(t, s)
	segs, _ := listSegments(dir)
	if len(segs) < 2 {
		t.Fatalf("%d segments, want rotations", len(segs))
	}
	for _, seg := range segs {
		data, _ := os.ReadFile(filepath.Join(dir, seg.name))
		if bytes.IndexByte(data, 0) >= 0 {
			t.Fatalf("%s keeps padding after rotation or Close", seg.name)
		}
	}
	mustVerify(t, dir, VerifyOptions{})
}

// FuzzLineReader: lines never hold a newline or a NUL, the data ends at the
// first NUL, and the stray bytes counted are exactly the non-NUL bytes after
// it.
func FuzzLineReader(f *testing.F) {
	f.Add([]byte("{\"a\":1}\n{\"b\":2}\n"))
	f.Add([]byte("{\"a\":1}\n{\"b\"\x00\x00\x00"))
	f.Add([]byte("{\"a\":1}\n\x00\x00x\x00y\n\x00"))
	f.Add(append([]byte("l\n"), make([]byte, 5000)...))
	f.Fuzz(func(t *testing.T, data []byte) {
		lr := newLineReader(bytes.NewReader(data))
		var lines int64
		for {
			l, err := lr.next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return // a line longer than maxLine
			}
			if bytes.IndexByte(l.text, '\n') >= 0 || bytes.IndexByte(l.text, 0) >= 0 || l.offset != lines {
				t.Fatalf("line %q at %d (want %d)", l.text, l.offset, lines)
			}
			lines += int64(len(l.text)) + 1
		}
		end := bytes.IndexByte(data, 0)
		if end < 0 {
			end = len(data)
		}
		stray := 0
		if end < len(data) {
			stray = len(data[end:]) - bytes.Count(data[end:], []byte{0})
		}
		if lines+lr.torn != int64(end) || lr.padded != (end < len(data)) || lr.stray != int64(stray) ||
			lr.size != int64(len(data)) || lr.dataEnd != int64(len(bytes.TrimRight(data, "\x00"))) && stray > 0 {
			t.Fatalf("lines %d torn %d padded %v stray %d size %d dataEnd %d; data ends at %d of %d, stray %d",
				lines, lr.torn, lr.padded, lr.stray, lr.size, lr.dataEnd, end, len(data), stray)
		}
		if _, err := lr.next(); !errors.Is(err, io.EOF) {
			t.Fatalf("next after the end: %v", err)
		}
	})
}
