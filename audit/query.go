package audit

import (
	"errors"
	"fmt"
	"io"
	"iter"
	"net"
	"os"
	"path/filepath"
	"time"
)

// Filter selects records; zero fields match everything.
type Filter struct {
	Client   string // "ip:port", or an ip matching every port
	Tool     string
	Decision Decision
	Since    time.Time // inclusive
	Until    time.Time // exclusive
}

func (f Filter) match(r *Record) bool {
	if f.Client != "" && r.Client != f.Client {
		if host, _, err := net.SplitHostPort(r.Client); err != nil || host != f.Client {
			return false
		}
	}
	switch {
	case f.Tool != "" && r.Tool != f.Tool,
		f.Decision != "" && r.Decision.Canonical() != f.Decision.Canonical(),
		!f.Since.IsZero() && r.Time.Before(f.Since),
		!f.Until.IsZero() && !r.Time.Before(f.Until):
		return false
	}
	return true
}

// Query yields the records of the log in dir that f selects, oldest first.
// It reads without verifying (Verify does that); a line that does not
// decode ends the iteration with its error, and an incomplete final line a
// crash left is skipped.
func Query(dir string, f Filter) iter.Seq2[*Record, error] {
	return func(yield func(*Record, error) bool) {
		segs, err := listSegments(dir)
		if err != nil {
			yield(nil, err)
			return
		}
		for _, seg := range segs {
			if !querySegment(filepath.Join(dir, seg.name), f, yield) {
				return
			}
		}
	}
}

func querySegment(path string, f Filter, yield func(*Record, error) bool) bool {
	file, err := os.Open(path)
	if err != nil {
		return yield(nil, fmt.Errorf("read segment: %w", err))
	}
	defer file.Close()
	lr := newLineReader(file)
	for {
		l, err := lr.next()
		if errors.Is(err, io.EOF) {
			return true
		}
		if err != nil {
			yield(nil, fmt.Errorf("read %s: %w", filepath.Base(path), err))
			return false
		}
		r, err := DecodeRecord(l.text)
		if err != nil {
			yield(nil, fmt.Errorf("read %s line %d: %w", filepath.Base(path), l.no, err))
			return false
		}
		if f.match(r) && !yield(r, nil) {
			return false
		}
	}
}
