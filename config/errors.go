package config

import (
	"cmp"
	"slices"
	"strconv"
	"strings"
)

// Error is one problem found in a file.
type Error struct {
	File   string
	Line   int // 1-based; 0 when not tied to a line
	Column int
	Key    string // dotted path, e.g. "limits.idle_timeout" or "intercept.ports[2]"
	Msg    string

	// alt is a second key to point at when Key itself is absent from the
	// file, so that a cross-field error lands on the line the user wrote.
	alt string
}

// Error formats as "FILE:LINE:COL: KEY: MSG", leaving out empty parts, which
// is the form editors and CI annotators already understand.
func (e *Error) Error() string {
	var b strings.Builder
	pos := e.File
	if e.Line > 0 {
		if pos != "" {
			pos += ":"
		}
		pos += strconv.Itoa(e.Line)
		if e.Column > 0 {
			pos += ":" + strconv.Itoa(e.Column)
		}
	}
	if pos != "" {
		b.WriteString(pos)
		b.WriteString(": ")
	}
	if e.Key != "" {
		b.WriteString(e.Key)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Errors is every problem found in one file, ordered by position.
type Errors []*Error

// Error joins the problems one per line.
func (e Errors) Error() string {
	s := make([]string, len(e))
	for i, err := range e {
		s[i] = err.Error()
	}
	return strings.Join(s, "\n")
}

// Unwrap lets errors.As reach an individual *Error.
func (e Errors) Unwrap() []error {
	out := make([]error, len(e))
	for i, err := range e {
		out[i] = err
	}
	return out
}

// sorted orders by position so the output is stable across runs and reads
// top to bottom; errors without a line (command line, whole file) come first.
// Exact duplicates go, since two paths can discover the same problem.
func (e Errors) sorted() Errors {
	out := slices.Clone(e)
	slices.SortStableFunc(out, func(a, b *Error) int {
		return cmp.Or(cmp.Compare(a.Line, b.Line), cmp.Compare(a.Column, b.Column),
			cmp.Compare(a.File, b.File), cmp.Compare(a.Key, b.Key), cmp.Compare(a.Msg, b.Msg))
	})
	return slices.CompactFunc(out, func(a, b *Error) bool {
		return a.File == b.File && a.Line == b.Line && a.Column == b.Column && a.Key == b.Key && a.Msg == b.Msg
	})
}
