package audit

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

const (
	segmentPrefix = "audit-"
	segmentSuffix = ".jsonl"
	seqDigits     = 20
)

// segment is one file of the log, named after the seq of its first record.
type segment struct {
	name  string
	first uint64
}

func segmentName(first uint64) string {
	return fmt.Sprintf("%s%0*d%s", segmentPrefix, seqDigits, first, segmentSuffix)
}

func parseSegmentName(name string) (uint64, bool) {
	s, ok := strings.CutPrefix(name, segmentPrefix)
	if !ok {
		return 0, false
	}
	s, ok = strings.CutSuffix(s, segmentSuffix)
	if !ok || len(s) != seqDigits {
		return 0, false
	}
	n, err := strconv.ParseUint(s, 10, 64)
	return n, err == nil
}

// listSegments returns the segment files of dir, oldest first.
func listSegments(dir string) ([]segment, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("list segments: %w", err)
	}
	var segs []segment
	for _, e := range entries {
		if first, ok := parseSegmentName(e.Name()); ok && e.Type().IsRegular() {
			segs = append(segs, segment{name: e.Name(), first: first})
		}
	}
	slices.SortFunc(segs, func(a, b segment) int { return cmpUint(a.first, b.first) })
	return segs, nil
}

func cmpUint(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// line is one newline-terminated line of a segment.
type line struct {
	no     int    // 1-based line number in its segment
	offset int64  // byte offset of its start
	text   []byte // without the newline; valid until the next call
}

// lineReader reads the lines of one segment; a final line without its
// newline is reported as torn rather than returned.
type lineReader struct {
	r      *bufio.Reader
	no     int
	offset int64
	torn   int64 // bytes after the last newline, once EOF is reached
	buf    []byte
}

func newLineReader(r io.Reader) *lineReader {
	return &lineReader{r: bufio.NewReaderSize(r, 64<<10)}
}

// next returns the next complete line, or io.EOF.
func (lr *lineReader) next() (line, error) {
	lr.buf = lr.buf[:0]
	for {
		chunk, err := lr.r.ReadSlice('\n')
		lr.buf = append(lr.buf, chunk...)
		if len(lr.buf) > maxLine+1 {
			return line{}, fmt.Errorf("line %d: longer than %d bytes", lr.no+1, maxLine)
		}
		if err == nil {
			break
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if errors.Is(err, io.EOF) {
			lr.torn = int64(len(lr.buf))
			return line{}, io.EOF
		}
		return line{}, err
	}
	lr.no++
	l := line{no: lr.no, offset: lr.offset, text: bytes.TrimSuffix(lr.buf, []byte{'\n'})}
	lr.offset += int64(len(lr.buf))
	return l, nil
}

// tail is what recovery learns from the newest segment.
type tail struct {
	head    head
	records int
	durable int64 // offset just after the last complete record
	torn    int64 // bytes of an incomplete final line
}

// readTail reads a segment whose first record is seq first and returns its
// last record. Any complete line must decode: a broken one is tampering or
// corruption that verify has to see, so recovery refuses to write past it.
func readTail(path string, first uint64) (tail, error) {
	f, err := os.Open(path)
	if err != nil {
		return tail{}, fmt.Errorf("read segment: %w", err)
	}
	defer f.Close()
	lr := newLineReader(f)
	var t tail
	for {
		l, err := lr.next()
		if errors.Is(err, io.EOF) {
			t.torn = lr.torn
			return t, nil
		}
		if err != nil {
			return tail{}, fmt.Errorf("read %s: %w", filepath.Base(path), err)
		}
		r, err := DecodeRecord(l.text)
		if err != nil {
			return tail{}, fmt.Errorf("read %s line %d: %w (run audit verify)", filepath.Base(path), l.no, err)
		}
		if want := first + uint64(t.records); r.Seq != want {
			return tail{}, fmt.Errorf("read %s line %d: seq %d where %d was expected (run audit verify)", filepath.Base(path), l.no, r.Seq, want)
		}
		t.records++
		t.head = head{seq: r.Seq, hash: lineHash(l.text)}
		t.durable = l.offset + int64(len(l.text)) + 1
	}
}
