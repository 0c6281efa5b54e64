package policy

import (
	"fmt"
	"strings"
)

// Pos is a position in the configuration file: 1-based line and column.
type Pos struct {
	File         string
	Line, Column int
}

func (p Pos) String() string {
	if p.File == "" {
		return fmt.Sprintf("%d:%d", p.Line, p.Column)
	}
	return fmt.Sprintf("%s:%d:%d", p.File, p.Line, p.Column)
}

// offset returns the position of the character at CEL's (line, column) inside an expression that
// starts at p. CEL lines are 1-based and columns 0-based. Lines after the first are assumed to
// start at the same column as the first one, which is how YAML block scalars are laid out.
func (p Pos) offset(celLine, celCol int) Pos {
	if p.Line <= 0 {
		// No position supplied: report positions within the expression itself.
		p.Line, p.Column = 1, 1
	}
	if p.Column <= 0 {
		p.Column = 1
	}
	if celLine < 1 || celCol < 0 {
		return p
	}
	p.Line += celLine - 1
	p.Column += celCol
	return p
}

// CompileError is one problem in one rule, at the position an editor can jump to.
type CompileError struct {
	Pos  Pos
	Rule string
	Msg  string
}

func (e *CompileError) Error() string {
	return fmt.Sprintf("%s: rule %s: %s", e.Pos, e.Rule, e.Msg)
}

// CompileErrors collects every problem of a rule set, so that one `check` run shows them all.
type CompileErrors []*CompileError

func (es CompileErrors) Error() string {
	var b strings.Builder
	for i, e := range es {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(e.Error())
	}
	return b.String()
}

// Unwrap lets errors.As find an individual *CompileError.
func (es CompileErrors) Unwrap() []error {
	out := make([]error, len(es))
	for i, e := range es {
		out[i] = e
	}
	return out
}
