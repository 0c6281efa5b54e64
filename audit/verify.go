package audit

import (
	"bytes"
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
	// StrayBytes counts the bytes other than NUL inside the final segment's
	// padding, past its last complete line: a write a crash tore can leave
	// its later pages on disk without its first, so they are read like a
	// torn line (never acknowledged, unless a checkpoint covers them).
	StrayBytes int64
	// Covered is the highest count of records a valid checkpoint signs;
	// Uncovered the records after it, which no checkpoint protects yet.
	Covered, Uncovered uint64
	// GivenCovers is the count of records opts.Checkpoint signs (0 without one).
	GivenCovers uint64
	// From is the first seq the log is proven from: the start that the
	// given checkpoint (else the newest on the box) commits to; every record
	// from it on must be present. FromSource names that checkpoint; both are
	// empty when no signed checkpoint exists, and then only a log that starts
	// at seq 1 verifies.
	From       uint64
	FromSource string
	Problem    *Problem
}

// OK reports whether the log verified.
func (r *Report) OK() bool { return r.Problem == nil }

// signed is a checkpoint verified by its signature, and where it came from.
type signed struct {
	Checkpoint
	source string
	given  bool // opts.Checkpoint, kept off the box
}

// checkpoints are the signed checkpoints Verify found.
type checkpoints struct {
	bySize map[uint64]signed // by count: the head each commits to
	// anchors holds, by seq, the hash a checkpoint's start line names for
	// the record before its start.
	anchors map[uint64]signed
	given   *signed
	newest  *signed // on the box: most records, then the latest start
}

// root is the checkpoint whose start Verify enforces: the one kept off the
// box when given, since whoever can delete segments on the box can also
// reach the key there and sign a later start; else the newest on the box.
func (c *checkpoints) root() *signed {
	if c.given != nil {
		return c.given
	}
	return c.newest
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
	v := &verifier{dir: dir, segs: segs, cps: cps.bySize, anchors: cps.anchors, all: cps, from: 1}
	if root := cps.root(); root != nil {
		v.from = root.from()
		v.rep.From, v.rep.FromSource = v.from, root.source
	}
	if cps.given != nil {
		v.rep.GivenCovers = cps.given.Size
	}
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
// count and by the seq their start anchors.
func loadCheckpoints(dir, vkey string, given []byte) (*checkpoints, *Problem, error) {
	type source struct {
		name  string
		msg   []byte
		given bool
	}
	var srcs []source
	logData, err := os.ReadFile(filepath.Join(dir, checkpointsLog))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, nil, fmt.Errorf("read checkpoints: %w", err)
	}
	for i, msg := range splitCheckpoints(logData) {
		srcs = append(srcs, source{name: fmt.Sprintf("%s note %d", checkpointsLog, i+1), msg: msg})
	}
	latest, err := os.ReadFile(filepath.Join(dir, checkpointFile))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, nil, fmt.Errorf("read checkpoint: %w", err)
	}
	if latest != nil {
		srcs = append(srcs, source{name: checkpointFile + " file", msg: latest})
	}
	if given != nil {
		srcs = append(srcs, source{name: "given checkpoint", msg: given, given: true})
	}
	if _, err := note.NewVerifier(vkey); err != nil {
		return nil, nil, fmt.Errorf("parse public key: %w", err)
	}
	cps := &checkpoints{bySize: make(map[uint64]signed), anchors: make(map[uint64]signed)}
	// heads is every hash a checkpoint commits a record to, by seq: two that
	// differ mean the key signed two histories.
	type claim struct {
		hash [32]byte
		what string
	}
	heads := make(map[uint64]claim)
	commit := func(seq uint64, hash [32]byte, what string) *Problem {
		if old, ok := heads[seq]; ok && old.hash != hash {
			return &Problem{Kind: BadSignature, Seq: seq, Detail: fmt.Sprintf(
				"%s and %s are both validly signed but name different hashes for record %d (the key signed two histories)",
				old.what, what, seq)}
		}
		heads[seq] = claim{hash, what}
		return nil
	}
	for _, src := range srcs {
		cp, err := OpenCheckpoint(src.msg, vkey)
		if err != nil {
			return nil, &Problem{Kind: BadSignature, Detail: fmt.Sprintf("%s: %v", src.name, err)}, nil
		}
		sc := signed{cp, src.name, src.given}
		if p := commit(cp.Size, cp.Head, src.name); p != nil {
			return nil, p, nil
		}
		cps.bySize[cp.Size] = sc
		if cp.Start > 1 {
			if p := commit(cp.Start-1, cp.Anchor, src.name+" (its start)"); p != nil {
				return nil, p, nil
			}
			cps.anchors[cp.Start-1] = sc
		}
		switch {
		case src.given:
			cps.given = &sc
		case cps.newest == nil || cp.Size > cps.newest.Size || cp.Size == cps.newest.Size && cp.from() > cps.newest.from():
			cps.newest = &sc
		}
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
	dir     string
	segs    []segment
	cps     map[uint64]signed
	anchors map[uint64]signed
	all     *checkpoints
	// from is the first seq that must be present (see Report.From).
	from uint64

	// torn is the incomplete final line, where it is (and where the stray
	// bytes inside the final padding begin).
	torn     []byte
	tornSeg  string
	tornLine int
	strayAt  int64

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
	if cp, ok := v.anchors[cur.seq]; ok && cp.Anchor != cur.hash {
		return &Problem{Kind: Changed, Segment: cur.seg, Line: cur.line, Seq: cur.seq,
			Detail: fmt.Sprintf("the record does not hash to the anchor that the signed checkpoint %s names for its start, seq %d", cp.source, cp.Start)}
	}
	return nil
}

func (v *verifier) checkStart(cur *entry) *Problem {
	v.rep.Start = cur.seq
	if cur.seq > v.from {
		return v.startMissing(cur)
	}
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
	if cp, ok := v.anchors[cur.seq-1]; ok && cp.Anchor != cur.prev {
		return &Problem{Kind: Changed, Segment: cur.seg, Line: cur.line, Seq: cur.seq,
			Detail: fmt.Sprintf("prev differs from the anchor that the signed checkpoint %s names for its start", cp.source)}
	}
	return v.checkBefore(cur)
}

// startMissing explains a log that begins after the start its root
// checkpoint commits to: its oldest records were deleted, whatever a later
// signature on the box says.
func (v *verifier) startMissing(cur *entry) *Problem {
	missing := fmt.Sprintf("records %d to %d are missing", v.from, cur.seq-1)
	if cur.seq-1 == v.from {
		missing = fmt.Sprintf("record %d is missing", v.from)
	}
	var why string
	root := v.all.root()
	switch {
	case root == nil:
		why = "and no signed checkpoint names a later start, as retention's would: they were deleted"
	case root.Start == 0:
		why = fmt.Sprintf("but the signed checkpoint for %d records (%s) commits to the log from seq 1 "+
			"(it is of the older format, without a start line; a log that retention cut before the upgrade verifies only against a checkpoint signed since)",
			root.Size, root.source)
	default:
		why = fmt.Sprintf("but the signed checkpoint for %d records (%s) commits to every record from seq %d", root.Size, root.source, root.Start)
	}
	if root != nil && root.given {
		if nb := v.all.newest; nb != nil && nb.from() >= cur.seq {
			why += fmt.Sprintf("; %s on the box names seq %d as the start, as retention after the given checkpoint would, "+
				"but a signature made on the box after it proves nothing against whoever holds the box: verify against a checkpoint shipped since",
				nb.source, nb.from())
		}
	}
	return &Problem{Kind: Deleted, Segment: cur.seg, Line: cur.line, Seq: v.from,
		Detail: fmt.Sprintf("%s: the log starts at seq %d, %s", missing, cur.seq, why)}
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

// finish compares the end of the log with the checkpoints and counts the
// records none covers.
func (v *verifier) finish(last *entry) Report {
	var end uint64
	if last != nil {
		end = last.seq
	}
	var worst *signed
	for _, cp := range v.cps {
		// One that ends before the start the root commits to covers only
		// records retention removed.
		if cp.Size > end && cp.Size >= v.from && (worst == nil || cp.Size > worst.Size) {
			worst = &cp
		}
		v.rep.Covered = max(v.rep.Covered, cp.Size)
	}
	if worst != nil {
		return v.fail(v.cut(last, end, worst))
	}
	if v.rep.Records > 0 && end > v.rep.Covered {
		v.rep.Uncovered = end - max(v.rep.Covered, v.rep.Start-1)
	}
	return v.rep
}

// cut explains a log that ends before the signed checkpoint worst.
func (v *verifier) cut(last *entry, end uint64, worst *signed) *Problem {
	p := v.cutLines(last, end, worst)
	if v.rep.StrayBytes > 0 {
		p.Detail += fmt.Sprintf("; %d bytes other than NUL follow inside the padding (the first at byte offset %d), which a crash does not explain once a checkpoint covers more",
			v.rep.StrayBytes, v.strayAt)
	}
	return p
}

func (v *verifier) cutLines(last *entry, end uint64, worst *signed) *Problem {
	p := &Problem{Kind: Truncated, Seq: end + 1,
		Detail: fmt.Sprintf("the log ends at seq %d but the signed checkpoint for %d records (%s) covers more: records %d to %d were cut",
			end, worst.Size, worst.source, end+1, worst.Size)}
	if last != nil {
		p.Segment = last.seg
	}
	if v.rep.StrayBytes > 0 {
		p.Segment, p.Line = v.tornSeg, v.tornLine
	}
	if v.torn == nil {
		return p
	}
	// A crash tears only a line that was never acknowledged, and no
	// checkpoint covers such a line: this one was cut.
	p.Segment, p.Line = v.tornSeg, v.tornLine
	if r, err := DecodeRecord(v.torn); err == nil && r.Seq == end+1 {
		p.Detail = fmt.Sprintf("the line of seq %d lacks its newline, but the signed checkpoint for %d records (%s) covers it: "+
			"an acknowledged record was cut, not torn by a crash", end+1, worst.Size, worst.source)
		if worst.Size > end+1 {
			p.Detail += fmt.Sprintf(", and records %d to %d are gone", end+2, worst.Size)
		}
		return p
	}
	p.Detail = fmt.Sprintf("the log ends at seq %d in an incomplete line of %d bytes, but the signed checkpoint for %d records (%s) covers more: "+
		"records %d to %d were cut, not torn by a crash", end, len(v.torn), worst.Size, worst.source, end+1, worst.Size)
	return p
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

// endSegment accepts an incomplete final line, and bytes other than NUL
// inside the padding (the zeros the store keeps after the records of its
// active segment), only at the very end of the log, where a crash leaves
// them. A segment's data ends at its first NUL.
func (v *verifier) endSegment(name string) *Problem {
	torn, no, stray, strayAt := v.lr.torn, v.lr.no, v.lr.stray, v.lr.strayAt
	text := bytes.Clone(v.lr.buf)
	v.closeFile()
	if torn == 0 && stray == 0 {
		return nil
	}
	if v.segIdx < len(v.segs) {
		if torn > 0 {
			return &Problem{Kind: Changed, Segment: name, Line: no + 1,
				Detail: fmt.Sprintf("incomplete line of %d bytes before the next segment", torn)}
		}
		return &Problem{Kind: Changed, Segment: name, Line: no + 1,
			Detail: fmt.Sprintf("%d bytes other than NUL inside the padding after the last line (the first at byte offset %d), before the next segment: "+
				"a crash tears only the newest segment's last write, so they were put there", stray, strayAt)}
	}
	v.rep.TornBytes, v.rep.StrayBytes = torn, stray
	if torn > 0 {
		v.torn = text
	}
	v.tornSeg, v.tornLine, v.strayAt = name, no+1, strayAt
	return nil
}

func (v *verifier) closeFile() {
	if v.f != nil {
		v.f.Close()
		v.f, v.lr = nil, nil
	}
}
