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

// lineReader reads the lines of one segment. A segment's data ends at its
// first NUL byte, or at its end: the store keeps the active segment
// zero-filled ahead of its records (padding), and JSON text never holds a
// raw NUL. A final line without its newline is reported as torn rather than
// returned; bytes other than NUL after the padding began are counted as
// stray (a torn write a crash left inside the padding, or tampering).
type lineReader struct {
	r      *bufio.Reader
	no     int
	offset int64
	// Once next has returned io.EOF:
	torn    int64 // bytes after the last newline, before the padding or the end
	padded  bool  // the data ends at a NUL byte
	stray   int64 // bytes other than NUL after the padding began
	strayAt int64 // offset of the first of them
	dataEnd int64 // offset just past the last byte that is not NUL
	size    int64 // bytes read in all
	eof     bool
	buf     []byte
}

func newLineReader(r io.Reader) *lineReader {
	return &lineReader{r: bufio.NewReaderSize(r, 64<<10)}
}

// next returns the next complete line, or io.EOF.
func (lr *lineReader) next() (line, error) {
	if lr.eof {
		return line{}, io.EOF
	}
	lr.buf = lr.buf[:0]
	for {
		chunk, err := lr.r.ReadSlice('\n')
		if i := bytes.IndexByte(chunk, 0); i >= 0 {
			lr.buf = append(lr.buf, chunk[:i]...)
			if len(lr.buf) > maxLine+1 {
				return line{}, fmt.Errorf("line %d: longer than %d bytes", lr.no+1, maxLine)
			}
			lr.padded = true
			return line{}, lr.end(chunk[i:], err)
		}
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
			return line{}, lr.end(nil, err)
		}
		return line{}, err
	}
	lr.no++
	l := line{no: lr.no, offset: lr.offset, text: bytes.TrimSuffix(lr.buf, []byte{'\n'})}
	lr.offset += int64(len(lr.buf))
	return l, nil
}

// zeroBlock is compared against to skip padding quickly.
var zeroBlock [4096]byte

// end records where the data ends; rest is what was read past the first NUL
// (if any) and err the error that read ended with. It reads the rest of the
// file to count stray bytes.
func (lr *lineReader) end(rest []byte, err error) error {
	lr.eof = true
	lr.torn = int64(len(lr.buf))
	pos := lr.offset + lr.torn
	lr.dataEnd = pos
	lr.scanPadding(rest, pos)
	pos += int64(len(rest))
	switch {
	case err == nil || errors.Is(err, bufio.ErrBufferFull): // the file goes on
		for {
			b, perr := lr.r.Peek(lr.r.Size())
			lr.scanPadding(b, pos)
			pos += int64(len(b))
			if _, derr := lr.r.Discard(len(b)); derr != nil {
				return derr
			}
			if errors.Is(perr, io.EOF) {
				break
			}
			if perr != nil {
				return perr
			}
		}
	case !errors.Is(err, io.EOF):
		return err
	}
	lr.size = pos
	return io.EOF
}

// scanPadding counts the bytes of b, at offset pos, that are not NUL.
func (lr *lineReader) scanPadding(b []byte, pos int64) {
	for len(b) > 0 {
		n := min(len(b), len(zeroBlock))
		if !bytes.Equal(b[:n], zeroBlock[:n]) {
			for i, c := range b[:n] {
				if c != 0 {
					if lr.stray == 0 {
						lr.strayAt = pos + int64(i)
					}
					lr.stray++
					lr.dataEnd = pos + int64(i) + 1
				}
			}
		}
		b, pos = b[n:], pos+int64(n)
	}
}

// tail is what recovery learns from the newest segment.
type tail struct {
	head    head
	records int
	durable int64 // offset just after the last complete record
	torn    int64 // bytes of an incomplete final line
	stray   int64 // bytes other than NUL after the padding began
	dataEnd int64 // offset just past the last byte that is not NUL
	size    int64 // the file's size
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
			t.torn, t.stray, t.dataEnd, t.size = lr.torn, lr.stray, lr.dataEnd, lr.size
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
