package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// yaml.v3 reports a syntax error as "yaml: line N: problem", without a
// column, and N is not the line to look at: it is the line of the
// construct the problem was found in (the mapping, the quoted string, the
// key) rather than of the problem, 1-based for the scanner's messages and
// 0-based for the parser's (go-yaml/yaml#205), and when that construct
// starts on the first line the library falls back to the problem's line or
// prints none. So the line is found again from the text (failingLine), and
// the column and a hint from that line (explain).
var syntaxLine = regexp.MustCompile(`^yaml: (?:line (\d+): )?(.*)$`)

// parserProblems are the messages of yaml.v3's parser, as opposed to its
// scanner, whose line is 0-based. They are only used when failingLine
// cannot reproduce the error.
var parserProblems = map[string]bool{
	"did not find expected <stream-start>":   true,
	"did not find expected <document start>": true,
	"did not find expected node content":     true,
	"did not find expected '-' indicator":    true,
	"did not find expected key":              true,
	"did not find expected ',' or ']'":       true,
	"did not find expected ',' or '}'":       true,
	"found undefined tag handle":             true,
	"found duplicate %YAML directive":        true,
	"found duplicate %TAG directive":         true,
	"found incompatible YAML document":       true,
}

// unknownAnchor has no position in yaml.v3's message; the first use of the
// alias in the text is where the user has to look.
var unknownAnchor = regexp.MustCompile(`^unknown anchor '(.*)' referenced$`)

const tabHint = "YAML forbids tabs for indentation; use spaces"

func (d *decoder) syntax(err error, data []byte) {
	// One error per output line is part of the format, whatever the
	// library's message holds.
	text := strings.NewReplacer("\n", " ", "\r", " ").Replace(err.Error())
	e := &Error{File: d.file, Msg: "invalid YAML: " + text}
	d.errs = append(d.errs, e)
	m := syntaxLine.FindStringSubmatch(text)
	if m == nil {
		return
	}
	problem, hint := m[2], ""
	e.Msg = "invalid YAML: " + problem
	if a := unknownAnchor.FindStringSubmatch(problem); a != nil {
		if i := bytes.Index(data, []byte("*"+a[1])); i >= 0 {
			before := data[:i]
			e.Line = bytes.Count(before, []byte("\n")) + 1
			e.Column = utf8.RuneCount(before[bytes.LastIndexByte(before, '\n')+1:]) + 1
			return
		}
	}
	if k := d.failingLine(problem); k > 0 {
		e.Line, e.Column, hint = d.explain(problem, k)
		if hint != "" {
			e.Msg += " (" + hint + ")"
		}
		return
	}
	e.Line, _ = strconv.Atoi(m[1])
	if parserProblems[problem] {
		e.Line++
	}
}

// failingLine returns the first line k such that the file cut after line k
// fails with the same problem, which is the line where the text goes wrong:
// the parser reads a stream, so what follows line k cannot make it fail
// there, and a construct left open (a quote, a bracket) fails every cut from
// the line it opens on. 0 when the problem cannot be reproduced.
func (d *decoder) failingLine(problem string) int {
	lines := d.sourceLines()
	// Every line break becomes "\n", which keeps yaml.v3's line numbers.
	text := strings.Join(lines, "\n") + "\n"
	ends := make([]int, len(lines)+1) // ends[k]: the length of lines 1..k
	for i, l := range lines {
		ends[i+1] = ends[i] + len(l) + 1
	}
	fails := func(k int) bool { return yamlProblem(text[:ends[k]]) == problem }
	n := len(lines)
	if !fails(n) {
		return 0
	}
	lo, hi := 1, n
	for lo < hi {
		if mid := (lo + hi) / 2; fails(mid) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return hi
}

// yamlProblem is the problem yaml.v3 finds in text, every document read,
// without its line; "" when there is none.
func yamlProblem(text string) string {
	dec := yaml.NewDecoder(strings.NewReader(text))
	for {
		var n yaml.Node
		err := decodeNode(dec, &n)
		if errors.Is(err, io.EOF) {
			return ""
		}
		if err != nil {
			msg := strings.NewReplacer("\n", " ", "\r", " ").Replace(err.Error())
			if m := syntaxLine.FindStringSubmatch(msg); m != nil {
				return m[2]
			}
			return msg
		}
	}
}

// explain returns the line and column of problem, found on line k, and a
// hint for the usual mistakes behind it ("" when there is none to give).
// The line is k except when the mistake is on a line before it.
func (d *decoder) explain(problem string, k int) (int, int, string) {
	line := d.lineRunes(k)
	first := 0 // index of the first character that is not indentation
	tab := -1
	for first < len(line) && (line[first] == ' ' || line[first] == '\t') {
		if line[first] == '\t' && tab < 0 {
			tab = first
		}
		first++
	}
	col := first + 1
	if first == len(line) {
		col = 1
	}
	switch problem {
	case "found character that cannot start any token",
		"found a tab character that violates indentation",
		"found a tab character where an indentation space is expected",
		"did not find expected key",
		"did not find expected '-' indicator",
		"mapping values are not allowed in this context":
		if tab >= 0 {
			return k, tab + 1, tabHint
		}
	}
	switch problem {
	case "found character that cannot start any token":
		if i := tokenStart(line, "@`"); i >= 0 {
			return k, i + 1, fmt.Sprintf("%q cannot start a plain value; quote the value", line[i])
		}
	case "found undefined tag handle":
		if i := tokenStart(line, "!"); i >= 0 {
			return k, i + 1, ""
		}
	case "found unknown escape character":
		if i := badEscape(line); i >= 0 {
			return k, i + 1, `in double quotes a backslash starts an escape: write \\ for a backslash, or use single quotes`
		}
	case "found unexpected end of stream":
		if i := unclosedQuote(line); i >= 0 {
			return k, i + 1, "the quoted string that starts here is never closed"
		}
	case "did not find expected ',' or ']'", "did not find expected ',' or '}'", "did not find expected node content":
		for _, open := range []rune{'[', '{'} {
			if problem == "did not find expected ',' or '"+string(closer(open))+"'" || problem == "did not find expected node content" {
				if l, i := d.unclosedBracket(k, open); l == k {
					return k, i + 1, fmt.Sprintf("the %q here is never closed with %q", open, closer(open))
				}
			}
		}
	case "could not find expected ':'":
		return k, col, keyHint
	case "did not find expected key", "did not find expected '-' indicator":
		if hint := d.indentHint(k, first); hint != "" {
			return k, col, hint
		}
		if strings.HasPrefix(string(line[first:]), "- ") {
			return k, col, `a list item ("- ") where a key was expected`
		}
	case "mapping values are not allowed in this context":
		if hint := d.indentHint(k, first); hint != "" {
			return k, col, hint
		}
		colons := mappingColons(line)
		if p := d.previous(k); p > 0 && len(colons) > 0 && len(mappingColons(d.lineRunes(p))) == 0 && indentOf(d.lineRunes(p)) == first && !strings.HasPrefix(string(line[first:]), "- ") {
			// "level info" then "format: json": the first line has no
			// ':' and runs on into the second as one plain value.
			return p, first + 1, keyHint
		}
		if len(colons) >= 2 {
			return k, colons[1] + 1, `a value that contains ": " must be quoted`
		}
		if len(colons) == 1 {
			return k, colons[0] + 1, ""
		}
	}
	return k, col, ""
}

const keyHint = "a key needs a ':' after it"

// badEscape is the index of the first backslash in a double-quoted string
// on line that does not start one of YAML's escapes, -1 when there is none.
func badEscape(line []rune) int {
	for i := 0; i < len(line); i++ {
		if line[i] != '"' || !isQuoteStart(line, i) {
			continue
		}
		for j := i + 1; j < len(line) && line[j] != '"'; j++ {
			if line[j] == '\\' {
				if j+1 < len(line) && !strings.ContainsRune("0abt\tnvfre \"/\\N_LPxuU", line[j+1]) {
					return j
				}
				j++
			}
		}
		return -1
	}
	return -1
}

// indentHint explains a line indented differently from the block around it
// (the line before it, unless that line opens a nested block).
func (d *decoder) indentHint(k, indent int) string {
	p := d.previous(k)
	if p == 0 || indent == len(d.lineRunes(k)) {
		return ""
	}
	prev := d.lineRunes(p)
	block := indentOf(prev)
	if block == indent || (indent > block && opensBlock(prev)) {
		return ""
	}
	return fmt.Sprintf("indentation: this line is indented %s, its block at %d", spaces(indent), block)
}

func spaces(n int) string {
	if n == 1 {
		return "1 space"
	}
	return strconv.Itoa(n) + " spaces"
}

// previous is the nearest line before k that holds more than blanks or a
// comment; 0 when there is none.
func (d *decoder) previous(k int) int {
	for p := k - 1; p >= 1; p-- {
		s := strings.TrimLeft(string(d.lineRunes(p)), " \t")
		if s != "" && !strings.HasPrefix(s, "#") {
			return p
		}
	}
	return 0
}

func indentOf(line []rune) int {
	i := 0
	for i < len(line) && line[i] == ' ' {
		i++
	}
	return i
}

// opensBlock reports whether a line ends with ':' (after a key) or is a
// bare "-", so that the next line may be indented more.
func opensBlock(line []rune) bool {
	s := strings.TrimRight(string(line[:contentEnd(line)]), " \t")
	return strings.HasSuffix(s, ":") || strings.HasSuffix(s, "-") || strings.HasSuffix(s, "|") || strings.HasSuffix(s, ">")
}

// contentEnd is where a comment starts on the line (outside quotes), or
// its length.
func contentEnd(line []rune) int {
	end := len(line)
	scanLine(line, func(i int, c rune) bool {
		if c == '#' && (i == 0 || line[i-1] == ' ' || line[i-1] == '\t') {
			end = i
			return false
		}
		return true
	})
	return end
}

// mappingColons are the indices of the ':' on the line that are followed
// by a blank or end the line, outside quotes and before a comment.
func mappingColons(line []rune) []int {
	var out []int
	end := contentEnd(line)
	scanLine(line[:end], func(i int, c rune) bool {
		if c == ':' && (i+1 == end || line[i+1] == ' ' || line[i+1] == '\t') {
			out = append(out, i)
		}
		return true
	})
	return out
}

// scanLine calls f for each character of line outside quoted strings,
// until f returns false.
func scanLine(line []rune, f func(i int, c rune) bool) {
	for i := 0; i < len(line); i++ {
		if isQuoteStart(line, i) {
			if j := quoteEnd(line, i); j >= 0 {
				i = j
				continue
			}
			return
		}
		if !f(i, line[i]) {
			return
		}
	}
}

// isQuoteStart reports whether line[i] opens a quoted string: a quote where
// a value can start, not one inside a plain value such as don't.
func isQuoteStart(line []rune, i int) bool {
	if c := line[i]; c != '"' && c != '\'' {
		return false
	}
	return i == 0 || strings.ContainsRune(" \t[{,:-?", line[i-1])
}

// quoteEnd is the index of the quote closing the one at line[i], -1 when
// it is not closed on this line.
func quoteEnd(line []rune, i int) int {
	q := line[i]
	for j := i + 1; j < len(line); j++ {
		switch {
		case q == '"' && line[j] == '\\':
			j++
		case line[j] == q && q == '\'' && j+1 < len(line) && line[j+1] == '\'':
			j++
		case line[j] == q:
			return j
		}
	}
	return -1
}

// unclosedQuote is the index of the quote on line that is not closed, -1
// when there is none.
func unclosedQuote(line []rune) int {
	for i := 0; i < len(line); i++ {
		if line[i] == '#' && (i == 0 || line[i-1] == ' ' || line[i-1] == '\t') {
			return -1
		}
		if isQuoteStart(line, i) {
			j := quoteEnd(line, i)
			if j < 0 {
				return i
			}
			i = j
		}
	}
	return -1
}

// tokenStart is the index of the first character of set that starts a
// value on line, -1 when there is none.
func tokenStart(line []rune, set string) int {
	idx := -1
	scanLine(line, func(i int, c rune) bool {
		if strings.ContainsRune(set, c) && (i == 0 || strings.ContainsRune(" \t[{,:-?", line[i-1])) {
			idx = i
			return false
		}
		return true
	})
	return idx
}

func closer(open rune) rune {
	if open == '[' {
		return ']'
	}
	return '}'
}

// unclosedBracket finds the innermost bracket of kind open left unclosed by
// lines 1..k: its line and index, or 0, -1.
func (d *decoder) unclosedBracket(k int, open rune) (int, int) {
	type at struct {
		c       rune
		line, i int
	}
	var stack []at
	for l := 1; l <= k; l++ {
		line := d.lineRunes(l)
		scanLine(line[:contentEnd(line)], func(i int, c rune) bool {
			switch c {
			case '[', '{':
				if i == 0 || strings.ContainsRune(" \t[{,:-?", line[i-1]) {
					stack = append(stack, at{c, l, i})
				}
			case ']', '}':
				// A stray closer is left for the parser to report.
				if n := len(stack); n > 0 && closer(stack[n-1].c) == c {
					stack = stack[:n-1]
				}
			}
			return true
		})
	}
	for j := len(stack) - 1; j >= 0; j-- {
		if stack[j].c == open {
			return stack[j].line, stack[j].i
		}
	}
	return 0, -1
}
