package config

import (
	"bytes"
	"encoding/binary"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// textPos finds where the text of scalar n starts (see Pos). yaml.v3 places
// a node at its first property (tag or anchor) rather than at its text and a
// block scalar at its header, so the position is recomputed from the source.
func (d *decoder) textPos(n *yaml.Node) Pos {
	// Cached because an alias makes many rules share one node, and a file
	// written on one line would otherwise be converted to runes per rule.
	if p, ok := d.textPosOf[n]; ok {
		return p
	}
	if d.textPosOf == nil {
		d.textPosOf = map[*yaml.Node]Pos{}
	}
	p := d.findText(n)
	d.textPosOf[n] = p
	return p
}

func (d *decoder) findText(n *yaml.Node) Pos {
	p := Pos{File: d.file, Line: n.Line, Column: n.Column}
	lines := d.sourceLines()
	line, col := n.Line, n.Column
	for ; line >= 1 && line <= len(lines); line, col = line+1, 1 {
		r := d.lineRunes(line)
		for i := col - 1; i >= 0 && i < len(r); {
			switch c := r[i]; {
			case c == ' ' || c == '\t':
				i++
			case c == '#' && (i == 0 || r[i-1] == ' ' || r[i-1] == '\t'):
				i = len(r) // a comment between the properties and the text
			case c == '!' || c == '&':
				// Neither can start a plain scalar, so this is a property.
				for i < len(r) && r[i] != ' ' && r[i] != '\t' {
					i++
				}
			default:
				return d.startOf(n, p, line, i+1, c)
			}
		}
	}
	return p
}

// startOf places the text of n, whose first character c (a quote, a block
// header or the text itself) is at line and col.
func (d *decoder) startOf(n *yaml.Node, p Pos, line, col int, c rune) Pos {
	switch {
	case n.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle) != 0:
		if c == '"' || c == '\'' {
			col++
		}
	case n.Style&(yaml.LiteralStyle|yaml.FoldedStyle) != 0:
		if c != '|' && c != '>' {
			break
		}
		// The text starts on the line after the header. Its column is where
		// the indentation of the first non-blank line ends: that line's
		// leading spaces minus those the value keeps (an indentation
		// indicator lets a block start with spaces).
		line++
		col = 1
		first := strings.TrimLeft(n.Value, "\n")
		if i := strings.IndexByte(first, '\n'); i >= 0 {
			first = first[:i]
		}
		lines := d.sourceLines()
		for l := line; l <= len(lines); l++ {
			if strings.Trim(lines[l-1], " \t") == "" {
				continue
			}
			if indent := leadingSpaces(lines[l-1]) - leadingSpaces(first); indent >= 0 {
				col = indent + 1
			}
			break
		}
	}
	p.Line, p.Column = line, col
	return p
}

// lineRunes returns line l (1-based) as runes, since columns count
// characters.
func (d *decoder) lineRunes(l int) []rune {
	if d.runes == nil {
		d.runes = map[int][]rune{}
	}
	r, ok := d.runes[l]
	if !ok {
		r = []rune(d.sourceLines()[l-1])
		d.runes[l] = r
	}
	return r
}

func leadingSpaces(s string) int {
	return len(s) - len(strings.TrimLeft(s, " "))
}

// sourceLines splits the file at every character YAML treats as a line
// break, so that index i holds what yaml.v3 calls line i+1. Like yaml.v3 it
// reads UTF-16 when the file starts with its byte order mark, and does not
// count a byte order mark as a column.
func (d *decoder) sourceLines() []string {
	if d.lines != nil {
		return d.lines
	}
	s := decodeText(d.src)
	lines := []string{}
	start := 0
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch r {
		case '\r', '\n', '\u0085', '\u2028', '\u2029':
			lines = append(lines, s[start:i])
			if r == '\r' && i+1 < len(s) && s[i+1] == '\n' {
				size++
			}
			start = i + size
		}
		i += size
	}
	d.lines = append(lines, s[start:])
	return d.lines
}

func decodeText(b []byte) string {
	var order binary.ByteOrder
	switch {
	case bytes.HasPrefix(b, []byte{0xff, 0xfe}):
		order = binary.LittleEndian
	case bytes.HasPrefix(b, []byte{0xfe, 0xff}):
		order = binary.BigEndian
	default:
		return strings.TrimPrefix(string(b), "\ufeff")
	}
	u := make([]uint16, 0, len(b)/2)
	for i := 2; i+1 < len(b); i += 2 {
		u = append(u, order.Uint16(b[i:]))
	}
	return string(utf16.Decode(u))
}
