package config

import (
	"strings"
	"testing"
	"unicode/utf16"
)

// ruleAt is minimal plus one rate_limit rule whose `when:` is on line 9, at
// column 7; a case supplies what follows "when:".
func ruleAt(when string) string {
	return minimal + "rule_sets:\n  s:\n    - name: r\n      action: rate_limit\n      rate_limit: {key: k, rate: 1, burst: 1}\n      when:" + when
}

// textAt returns the source from pos to the end of its line, splitting
// lines the simple way: the cases below only use "\n" and "\r\n".
func textAt(src string, pos Pos) string {
	lines := strings.Split(strings.ReplaceAll(src, "\r\n", "\n"), "\n")
	if pos.Line < 1 || pos.Line > len(lines) {
		return "<no such line>"
	}
	r := []rune(lines[pos.Line-1])
	if pos.Column < 1 || pos.Column-1 > len(r) {
		return "<no such column>"
	}
	return string(r[pos.Column-1:])
}

func TestExprPos(t *testing.T) {
	tests := []struct {
		name      string
		src       string
		rule      int // index in rule set s
		want      string
		line, col int
		at        string // the text at the position; want's first line when ""
	}{
		{name: "plain", src: ruleAt(" mcp.method == \"tools/call\"\n"), want: `mcp.method == "tools/call"`, line: 9, col: 13},
		{name: "plain after extra spaces", src: ruleAt("     a\n"), want: "a", line: 9, col: 17},
		{name: "plain, folded over two lines", src: ruleAt(" a ==\n        b\n"), want: "a == b", line: 9, col: 13, at: "a =="},
		{name: "double-quoted", src: ruleAt(" \"mcp.name == 'x'\"\n"), want: "mcp.name == 'x'", line: 9, col: 14},
		{name: "single-quoted", src: ruleAt(" 'mcp.name == \"x\"'\n"), want: `mcp.name == "x"`, line: 9, col: 14},
		{name: "empty double-quoted", src: ruleAt(" \"\"\n"), want: "", line: 9, col: 14, at: "\""},
		{name: "tag before a plain scalar", src: ruleAt(" !!str true\n"), want: "true", line: 9, col: 19},
		{name: "tag before a quoted scalar", src: ruleAt(" !!str \"a\"\n"), want: "a", line: 9, col: 20, at: "a\""},
		{name: "anchor and tag", src: ruleAt(" &w !<tag:yaml.org,2002:str> 'a'\n"), want: "a", line: 9, col: 42, at: "a'"},
		{name: "tag alone on its line", src: ruleAt(" !!str # the text follows\n        a == b\n"), want: "a == b", line: 10, col: 9},
		{name: "literal block", src: ruleAt(" |\n        a ==\n          b\n"), want: "a ==\n  b\n", line: 10, col: 9},
		{name: "literal block, strip, comment", src: ruleAt(" |- # why\n            a\n"), want: "a", line: 10, col: 13},
		{name: "literal block with a leading blank line", src: ruleAt(" |\n\n        a\n"), want: "\na\n", line: 10, col: 9, at: ""},
		{name: "literal block with an indentation indicator", src: ruleAt(" |2\n          a\n"), want: "  a\n", line: 10, col: 9, at: "  a"},
		{name: "folded block", src: ruleAt(" >\n        a ==\n        b\n"), want: "a == b\n", line: 10, col: 9, at: "a =="},
		{name: "tagged block", src: ruleAt(" !!str |\n        a\n"), want: "a\n", line: 10, col: 9},
		{name: "block in a rule at the top of a list", src: minimal + "rule_sets:\n  s:\n  - when: |\n     a\n    action: deny\n    name: r\n", rule: 0, want: "a\n", line: 7, col: 6},
		{
			name: "flow mapping after wide characters",
			src:  minimal + "rule_sets:\n  s: [{reason: \"ééé — ok\", name: r, action: deny, when: x == 1}]\n",
			want: "x == 1", line: 5, col: 57,
		},
		{
			name: "alias: the anchored text",
			src:  minimal + "rule_sets:\n  s:\n    - {name: a, action: deny, when: &w x == 1}\n    - {name: b, action: deny, when: *w}\n",
			rule: 1, want: "x == 1", line: 6, col: 40,
		},
		{name: "CRLF line ends", src: strings.ReplaceAll(ruleAt(" |\n        a\n        b\n"), "\n", "\r\n"), want: "a\nb\n", line: 10, col: 9},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := mustParse(t, tt.src, Overrides{})
			r := c.RuleSets["s"][tt.rule]
			if r.When != tt.want {
				t.Errorf("When = %q, want %q", r.When, tt.want)
			}
			if want := (Pos{"test.yaml", tt.line, tt.col}); r.WhenPos != want {
				t.Errorf("WhenPos = %+v, want %+v", r.WhenPos, want)
			}
			at := tt.at
			if at == "" && tt.want != "" && !strings.HasPrefix(tt.want, "\n") {
				at, _, _ = strings.Cut(tt.want, "\n")
			}
			if got := textAt(tt.src, r.WhenPos); !strings.HasPrefix(got, at) {
				t.Errorf("text at WhenPos = %q, want it to start with %q", got, at)
			}
		})
	}
}

func TestKeyPos(t *testing.T) {
	tests := []struct {
		name      string
		src       string
		line, col int
	}{
		{name: "flow", src: ruleAt(" a\n"), line: 8, col: 25},
		{name: "block, double-quoted", src: minimal + "rule_sets:\n  s:\n    - name: r\n      action: rate_limit\n      rate_limit:\n        rate: 1\n        burst: 1\n        key: \"client.address\"\n", line: 11, col: 15},
		{name: "block scalar", src: minimal + "rule_sets:\n  s:\n    - name: r\n      action: rate_limit\n      rate_limit:\n        rate: 1\n        burst: 1\n        key: >-\n          client.address\n", line: 12, col: 11},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := mustParse(t, tt.src, Overrides{})
			r := c.RuleSets["s"][0]
			if want := (Pos{"test.yaml", tt.line, tt.col}); r.KeyPos != want {
				t.Errorf("KeyPos = %+v, want %+v", r.KeyPos, want)
			}
			if got := textAt(tt.src, r.KeyPos); !strings.HasPrefix(got, r.RateLimit.Key) {
				t.Errorf("text at KeyPos = %q, want it to start with %q", got, r.RateLimit.Key)
			}
			if r.WhenPos != (Pos{}) && r.When == "" {
				t.Errorf("WhenPos = %+v without a when", r.WhenPos)
			}
		})
	}
}

// TestExprPosLineBreaks checks that lines are counted the way yaml.v3
// counts them, including the line breaks and encodings few editors write.
func TestExprPosLineBreaks(t *testing.T) {
	utf16le := func(s string) []byte {
		b := []byte{0xff, 0xfe}
		for _, u := range utf16.Encode([]rune(s)) {
			b = append(b, byte(u), byte(u>>8))
		}
		return b
	}
	src := minimal + "rule_sets:\n  s:\n    - {reason: é, name: r, action: deny, when: x}\n"
	tests := []struct {
		name string
		data []byte
	}{
		{name: "LF", data: []byte(src)},
		{name: "CR", data: []byte(strings.ReplaceAll(src, "\n", "\r"))},
		{name: "NEL", data: []byte(strings.ReplaceAll(src, "\n", "\u0085"))},
		{name: "LS", data: []byte(strings.ReplaceAll(src, "\n", "\u2028"))},
		{name: "UTF-8 byte order mark", data: []byte("\ufeff" + src)},
		{name: "UTF-16LE", data: utf16le(src)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse("test.yaml", tt.data, Overrides{})
			if err != nil {
				t.Fatal(err)
			}
			if got, want := c.RuleSets["s"][0].WhenPos, (Pos{"test.yaml", 6, 48}); got != want {
				t.Errorf("WhenPos = %+v, want %+v", got, want)
			}
		})
	}
}
