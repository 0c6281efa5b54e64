package audit

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/mod/sumdb/note"
)

// VerifyOptions says what Verify trusts beyond the directory itself.
type VerifyOptions struct {
	// PublicKey is the verifier key line; empty reads audit.pub from the
	// directory, which only proves the log matches a key stored beside it.
	PublicKey string
	// Checkpoint is a signed checkpoint kept elsewhere; a log cut or
	// rewritten after it was taken fails against it.
	Checkpoint []byte
}

// ProblemKind classifies the first problem Verify finds.
type ProblemKind string

// The problems Verify tells apart.
const (
	Changed      ProblemKind = "changed"       // a record's bytes differ from what the chain or a checkpoint commits to
	Deleted      ProblemKind = "deleted"       // records are missing from the middle of the log
	Reordered    ProblemKind = "reordered"     // records are out of order
	Truncated    ProblemKind = "truncated"     // the log ends before a signed checkpoint's count
	BadSignature ProblemKind = "bad-signature" // a checkpoint is forged, foreign or garbled
)

// Problem locates what is wrong.
type Problem struct {
	Kind    ProblemKind
	Segment string // segment file, when the problem is in one
	Line    int    // 1-based line in Segment, 0 when none
	Seq     uint64 // the record concerned, 0 when none
	Detail  string
}

func (p *Problem) String() string {
	var b strings.Builder
	b.WriteString(string(p.Kind))
	if p.Segment != "" {
		fmt.Fprintf(&b, " at %s", p.Segment)
		if p.Line > 0 {
			fmt.Fprintf(&b, ":%d", p.Line)
		}
	}
	if p.Seq > 0 {
		fmt.Fprintf(&b, " (seq %d)", p.Seq)
	}
	b.WriteString(": ")
	b.WriteString(p.Detail)
	return b.String()
}

// Report is what Verify found. Problem is nil when the log is intact.
type Report struct {
	Start, End  uint64 // first and last seq present; Start > 1 after retention
	Records     uint64
	Head        string // hex hash of the last record
	Segments    int
	Checkpoints int   // signed checkpoints checked against the log
	Skipped     int   // checkpoints older than the oldest retained record
	TornBytes   int64 // an incomplete final line a crash left (never acknowledged)
	Problem     *Problem
}

// OK reports whether the log verified.
func (r *Report) OK() bool { return r.Problem == nil }

// signed is a checkpoint verified by its signature, and where it came from.
type signed struct {
	Checkpoint
	source string
}

// Verify checks the log in dir: every line's canonical form, seq continuity,
// every prev link, and every checkpoint (those in checkpoints.log, the
// checkpoint file, and opts.Checkpoint) for its signature and against the
// record at its count. It reports the first problem in Report.Problem; the
// error is for a log it cannot read at all.
func Verify(dir string, opts VerifyOptions) (Report, error) {
	vkey, err := publicKey(dir, opts.PublicKey)
	if err != nil {
		return Report{}, err
	}
	cps, problem, err := loadCheckpoints(dir, vkey, opts.Checkpoint)
	if err != nil {
		return Report{}, err
	}
	if problem != nil {
		return Report{Problem: problem}, nil
	}
	segs, err := listSegments(dir)
	if err != nil {
		return Report{}, err
	}
	v := &verifier{dir: dir, segs: segs, cps: cps}
	return v.run()
}

func publicKey(dir, given string) (string, error) {
	if given != "" {
		return strings.TrimSpace(given), nil
	}
	data, err := os.ReadFile(filepath.Join(dir, pubFile))
	if err != nil {
		return "", fmt.Errorf("read public key: %w", err)
	}
	return strings.TrimSpace(string(data)), nil
}

// loadCheckpoints verifies every checkpoint it can find and indexes them by
// count.
func loadCheckpoints(dir, vkey string, given []byte) (map[uint64]signed, *Problem, error) {
	type source struct {
		name string
		msg  []byte
	}
	var srcs []source
	logData, err := os.ReadFile(filepath.Join(dir, checkpointsLog))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, nil, fmt.Errorf("read checkpoints: %w", err)
	}
	for i, msg := range splitCheckpoints(logData) {
		srcs = append(srcs, source{fmt.Sprintf("%s note %d", checkpointsLog, i+1), msg})
	}
	latest, err := os.ReadFile(filepath.Join(dir, checkpointFile))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, nil, fmt.Errorf("read checkpoint: %w", err)
	}
	if latest != nil {
		srcs = append(srcs, source{checkpointFile + " file", latest})
	}
	if given != nil {
		srcs = append(srcs, source{"given checkpoint", given})
	}
	if _, err := note.NewVerifier(vkey); err != nil {
		return nil, nil, fmt.Errorf("parse public key: %w", err)
	}
	cps := make(map[uint64]signed)
	for _, src := range srcs {
		cp, err := OpenCheckpoint(src.msg, vkey)
		if err != nil {
			return nil, &Problem{Kind: BadSignature, Detail: fmt.Sprintf("%s: %v", src.name, err)}, nil
		}
		if old, ok := cps[cp.Size]; ok && old.Head != cp.Head {
			return nil, &Problem{Kind: BadSignature, Seq: cp.Size, Detail: fmt.Sprintf(
				"%s and %s are both validly signed for %d records but name different heads (the key signed two histories)",
				old.source, src.name, cp.Size)}, nil
		}
		cps[cp.Size] = signed{cp, src.name}
	}
	return cps, nil, nil
}

// entry is one decoded record and where it is.
type entry struct {
	seg  string
	line int
	seq  uint64
	prev [sha256.Size]byte
	hash [sha256.Size]byte
	// named is the seq in its segment's file name when it is that
	// segment's first record, 0 otherwise.
	named uint64
}

type verifier struct {
	dir  string
	segs []segment
	cps  map[uint64]signed

	segIdx int
	lr     *lineReader
	f      *os.File
	peeked *entry
	rep    Report
}

func (v *verifier) run() (Report, error) {
	defer v.closeFile()
	var last *entry
	for {
		cur, p, err := v.next()
		if err != nil {
			return Report{}, err
		}
		if p != nil {
			return v.fail(p), nil
		}
		if cur == nil {
			break
		}
		if p := v.check(last, cur); p != nil {
			return v.fail(p), nil
		}
		last = cur
		v.rep.End, v.rep.Records = cur.seq, v.rep.Records+1
		v.rep.Head = hex.EncodeToString(cur.hash[:])
	}
	return v.finish(last), nil
}

func (v *verifier) fail(p *Problem) Report {
	v.rep.Problem = p
	return v.rep
}

// check judges cur against the record before it and the checkpoints.
func (v *verifier) check(last, cur *entry) *Problem {
	if last == nil {
		if p := v.checkStart(cur); p != nil {
			return p
		}
	} else if p := v.checkOrder(last, cur); p != nil {
		return p
	} else if cur.prev != last.hash {
		return v.brokenLink(last, cur)
	}
	if cur.named != 0 && cur.named != cur.seq {
		return &Problem{Kind: Reordered, Segment: cur.seg, Line: cur.line, Seq: cur.seq,
			Detail: fmt.Sprintf("segment named for seq %d starts with seq %d", cur.named, cur.seq)}
	}
	if cp, ok := v.cps[cur.seq]; ok {
		if cp.Head != cur.hash {
			return &Problem{Kind: Changed, Segment: cur.seg, Line: cur.line, Seq: cur.seq,
				Detail: fmt.Sprintf("the record does not hash to the head of the signed checkpoint for %d records (%s): it, or the chain up to it, was rewritten", cp.Size, cp.source)}
		}
		v.rep.Checkpoints++
	}
	return nil
}

func (v *verifier) checkStart(cur *entry) *Problem {
	v.rep.Start = cur.seq
	if cur.seq == 1 {
		if cur.prev != zeroHash {
			return &Problem{Kind: Changed, Segment: cur.seg, Line: cur.line, Seq: cur.seq,
				Detail: "the first record's prev is not zero"}
		}
		return v.checkBefore(cur)
	}
	// Retention removed the records before cur; the checkpoint of the count
	// just before it can still be checked against cur's prev.
	if cp, ok := v.cps[cur.seq-1]; ok {
		if cp.Head != cur.prev {
			return &Problem{Kind: Changed, Segment: cur.seg, Line: cur.line, Seq: cur.seq,
				Detail: fmt.Sprintf("prev differs from the head of the signed checkpoint for %d records (%s)", cp.Size, cp.source)}
		}
		v.rep.Checkpoints++
	}
	return v.checkBefore(cur)
}

// checkBefore counts the checkpoints that cover only records no longer
// present.
func (v *verifier) checkBefore(cur *entry) *Problem {
	for size, cp := range v.cps {
		switch {
		case size == 0 && cur.seq == 1:
			if cp.Head != zeroHash {
				return &Problem{Kind: BadSignature, Detail: fmt.Sprintf("%s signs an empty log with a non-zero head", cp.source)}
			}
			v.rep.Checkpoints++
		case size+1 < cur.seq:
			v.rep.Skipped++
		}
	}
	return nil
}

func (v *verifier) checkOrder(last, cur *entry) *Problem {
	want := last.seq + 1
	switch {
	case cur.seq == want:
		return nil
	case cur.seq > want:
		if nxt, _, _ := v.peek(); nxt != nil && nxt.seq == want {
			return &Problem{Kind: Reordered, Segment: cur.seg, Line: cur.line, Seq: cur.seq,
				Detail: fmt.Sprintf("seq %d stands before seq %d (records swapped)", cur.seq, want)}
		}
		missing := fmt.Sprintf("record %d is missing", want)
		if cur.seq-want > 1 {
			missing = fmt.Sprintf("records %d to %d are missing", want, cur.seq-1)
		}
		return &Problem{Kind: Deleted, Segment: cur.seg, Line: cur.line, Seq: want,
			Detail: fmt.Sprintf("%s: seq %d follows seq %d", missing, cur.seq, last.seq)}
	default:
		return &Problem{Kind: Reordered, Segment: cur.seg, Line: cur.line, Seq: cur.seq,
			Detail: fmt.Sprintf("seq %d follows seq %d", cur.seq, last.seq)}
	}
}

// brokenLink decides which of two records changed when cur's prev is not
// last's hash: if cur's own link to what follows holds, cur is as written and
// last changed; otherwise cur changed.
func (v *verifier) brokenLink(last, cur *entry) *Problem {
	curOK := false
	if nxt, _, _ := v.peek(); nxt != nil {
		curOK = nxt.seq == cur.seq+1 && nxt.prev == cur.hash
	} else if cp, ok := v.cps[cur.seq]; ok {
		curOK = cp.Head == cur.hash
	}
	if curOK {
		return &Problem{Kind: Changed, Segment: last.seg, Line: last.line, Seq: last.seq,
			Detail: fmt.Sprintf("the record's hash is not the prev of seq %d", cur.seq)}
	}
	return &Problem{Kind: Changed, Segment: cur.seg, Line: cur.line, Seq: cur.seq,
		Detail: fmt.Sprintf("prev is not the hash of seq %d", last.seq)}
}

// finish compares the end of the log with the checkpoints.
func (v *verifier) finish(last *entry) Report {
	var end uint64
	if last != nil {
		end = last.seq
	}
	var worst *signed
	for _, cp := range v.cps {
		if cp.Size > end && (worst == nil || cp.Size > worst.Size) {
			worst = &cp
		}
	}
	if worst != nil {
		p := &Problem{Kind: Truncated, Seq: end + 1,
			Detail: fmt.Sprintf("the log ends at seq %d but the signed checkpoint for %d records (%s) covers more: records %d to %d were cut",
				end, worst.Size, worst.source, end+1, worst.Size)}
		if last != nil {
			p.Segment = last.seg
		}
		return v.fail(p)
	}
	return v.rep
}

// peek returns the entry after the current one without consuming it.
func (v *verifier) peek() (*entry, *Problem, error) {
	if v.peeked == nil {
		e, p, err := v.read()
		if err != nil || p != nil || e == nil {
			return nil, p, err
		}
		v.peeked = e
	}
	return v.peeked, nil, nil
}

func (v *verifier) next() (*entry, *Problem, error) {
	if e := v.peeked; e != nil {
		v.peeked = nil
		return e, nil, nil
	}
	return v.read()
}

// read decodes the next line across segments; nil at the end.
func (v *verifier) read() (*entry, *Problem, error) {
	for {
		if v.lr == nil {
			if v.segIdx >= len(v.segs) {
				return nil, nil, nil
			}
			if err := v.openSegment(); err != nil {
				return nil, nil, err
			}
		}
		seg := v.segs[v.segIdx-1]
		name := seg.name
		l, err := v.lr.next()
		if errors.Is(err, io.EOF) {
			if p := v.endSegment(name); p != nil {
				return nil, p, nil
			}
			continue
		}
		if err != nil {
			return nil, &Problem{Kind: Changed, Segment: name, Line: v.lr.no + 1, Detail: err.Error()}, nil
		}
		r, err := DecodeRecord(l.text)
		if err != nil {
			return nil, &Problem{Kind: Changed, Segment: name, Line: l.no,
				Detail: fmt.Sprintf("not a valid record: %v", err)}, nil
		}
		e := &entry{seg: name, line: l.no, seq: r.Seq, hash: lineHash(l.text)}
		e.prev, _ = parseHash(r.Prev)
		if l.no == 1 {
			e.named = seg.first
		}
		return e, nil, nil
	}
}

func (v *verifier) openSegment() error {
	seg := v.segs[v.segIdx]
	f, err := os.Open(filepath.Join(v.dir, seg.name))
	if err != nil {
		return fmt.Errorf("read segment: %w", err)
	}
	v.f, v.lr = f, newLineReader(f)
	v.segIdx++
	v.rep.Segments++
	return nil
}

// endSegment accepts an incomplete final line only at the very end of the
// log, where a crash leaves one.
func (v *verifier) endSegment(name string) *Problem {
	torn, no := v.lr.torn, v.lr.no
	v.closeFile()
	if torn == 0 {
		return nil
	}
	if v.segIdx < len(v.segs) {
		return &Problem{Kind: Changed, Segment: name, Line: no + 1,
			Detail: fmt.Sprintf("incomplete line of %d bytes before the next segment", torn)}
	}
	v.rep.TornBytes = torn
	return nil
}

func (v *verifier) closeFile() {
	if v.f != nil {
		v.f.Close()
		v.f, v.lr = nil, nil
	}
}
