package config

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// TestSyntaxErrors pins the whole message of YAML syntax errors (issue 34,
// item 8): the line where the text goes wrong, not the line yaml.v3 prints
// (the enclosing construct's, 0-based for some messages), a column, and a
// hint for the usual mistakes. minimal holds lines 1-3.
func TestSyntaxErrors(t *testing.T) {
	tests := []struct {
		name string
		src  string
		want string
	}{
		// Tabs.
		{name: "tab indents a key", src: minimal + "listen:\n\tport: 1\n",
			want: "test.yaml:5:1: invalid YAML: found character that cannot start any token (YAML forbids tabs for indentation; use spaces)"},
		{name: "tab indents a key on line 2", src: "listen:\n\tport: 1\n",
			want: "test.yaml:2:1: invalid YAML: found character that cannot start any token (YAML forbids tabs for indentation; use spaces)"},
		{name: "tab after spaces", src: minimal + "listen:\n  port: 1\n \taddresses: []\n",
			want: "test.yaml:6:2: invalid YAML: found a tab character that violates indentation (YAML forbids tabs for indentation; use spaces)"},
		{name: "tab indents a list item", src: "intercept:\n  destinations:\n\t- 10.0.0.0/8\n",
			want: "test.yaml:3:1: invalid YAML: found character that cannot start any token (YAML forbids tabs for indentation; use spaces)"},
		{name: "a line holding only a tab", src: "intercept:\n  destinations: [10.0.0.0/8]\n\t\n  ports: [443]\n",
			want: "test.yaml:3:1: invalid YAML: found character that cannot start any token (YAML forbids tabs for indentation; use spaces)"},
		{name: "tab in a block scalar's indentation", src: withRuleSets + "  s:\n    - name: a\n      when: |\n        true\n\t  && false\n",
			want: "test.yaml:9:1: invalid YAML: found a tab character where an indentation space is expected (YAML forbids tabs for indentation; use spaces)"},

		// Indentation.
		{name: "a key indented less than its block", src: minimal + "listen:\n  port: 1\n addresses: []\n",
			want: "test.yaml:6:2: invalid YAML: did not find expected key (indentation: this line is indented 1 space, its block at 2)"},
		{name: "a key indented more than its block", src: minimal + "listen:\n  port: 1\n    addresses: []\n",
			want: "test.yaml:6:5: invalid YAML: mapping values are not allowed in this context (indentation: this line is indented 4 spaces, its block at 2)"},
		{name: "after a comment header", src: "# header\nlisten:\n  port: 1\n addresses: []\n",
			want: "test.yaml:4:2: invalid YAML: did not find expected key (indentation: this line is indented 1 space, its block at 2)"},
		{name: "a block indented 4 then 2", src: "log:\n    level: info\n  format: json\n",
			want: "test.yaml:3:3: invalid YAML: did not find expected key (indentation: this line is indented 2 spaces, its block at 4)"},
		{name: "a list item indented less", src: "intercept:\n  destinations:\n    - 10.0.0.0/8\n   - 10.1.0.0/16\n",
			want: "test.yaml:4:4: invalid YAML: did not find expected key (indentation: this line is indented 3 spaces, its block at 4)"},
		{name: "a list item among keys", src: minimal + "  - 80\n",
			want: `test.yaml:4:3: invalid YAML: did not find expected key (a list item ("- ") where a key was expected)`},

		// Quotes and brackets left open.
		{name: "unclosed double quote", src: minimal + "log:\n  level: \"info\nlisten: {}\n",
			want: "test.yaml:5:10: invalid YAML: found unexpected end of stream (the quoted string that starts here is never closed)"},
		{name: "unclosed single quote", src: minimal + "log:\n  level: 'info\n",
			want: "test.yaml:5:10: invalid YAML: found unexpected end of stream (the quoted string that starts here is never closed)"},
		{name: "unclosed quote on line 1", src: "log: {level: \"info}\n\nlisten: {}\n",
			want: "test.yaml:1:14: invalid YAML: found unexpected end of stream (the quoted string that starts here is never closed)"},
		{name: "unclosed flow sequence", src: "intercept:\n  destinations: [10.0.0.0/8]\n  ports: [443\nlog: {}\n",
			want: "test.yaml:3:10: invalid YAML: did not find expected ',' or ']' (the '[' here is never closed with ']')"},
		{name: "unclosed flow sequence at the end", src: "intercept:\n  ports: [443]\n  destinations: [10.0.0.0/8\n",
			want: "test.yaml:3:17: invalid YAML: did not find expected ',' or ']' (the '[' here is never closed with ']')"},
		{name: "unclosed flow mapping", src: minimal + "log: {level: info\nlisten: {}\n",
			want: "test.yaml:4:6: invalid YAML: did not find expected ',' or '}' (the '{' here is never closed with '}')"},
		{name: "unclosed flow mapping on line 1", src: "{intercept: {destinations: [10.0.0.0/8], ports: [1]}\n",
			want: "test.yaml:1:1: invalid YAML: did not find expected ',' or '}' (the '{' here is never closed with '}')"},
		{name: "a sequence closed with a brace", src: minimal + "listen: {addresses: [10.0.0.1}\n",
			want: "test.yaml:4:21: invalid YAML: did not find expected ',' or ']' (the '[' here is never closed with ']')"},
		{name: "a flow sequence that spans lines is fine", src: "intercept:\n  destinations: [\n    10.0.0.0/8,\n  ]\n  ports: [443\n",
			want: "test.yaml:5:10: invalid YAML: did not find expected ',' or ']' (the '[' here is never closed with ']')"},

		// Colons.
		{name: "a key without its colon", src: "intercept:\n  destinations: [10.0.0.0/8]\n  ports [443]\nlog: {}\n",
			want: "test.yaml:3:3: invalid YAML: could not find expected ':' (a key needs a ':' after it)"},
		{name: "a bare word among keys", src: minimal + "log\nlisten: {}\n",
			want: "test.yaml:4:1: invalid YAML: could not find expected ':' (a key needs a ':' after it)"},
		{name: "a bare word on line 1", src: "log\nlisten: {}\n",
			want: "test.yaml:1:1: invalid YAML: mapping values are not allowed in this context (a key needs a ':' after it)"},
		{name: "a key without its colon runs into the next line", src: minimal + "log:\n  level info\n  format: json\n",
			want: "test.yaml:5:3: invalid YAML: mapping values are not allowed in this context (a key needs a ':' after it)"},
		{name: "a value holding a colon and a space", src: minimal + "log:\n  level: debug: yes\n",
			want: `test.yaml:5:15: invalid YAML: mapping values are not allowed in this context (a value that contains ": " must be quoted)`},

		// Characters.
		{name: "a value starting with @", src: minimal + "log: {level: @debug}\n",
			want: "test.yaml:4:14: invalid YAML: found character that cannot start any token ('@' cannot start a plain value; quote the value)"},
		{name: "an unknown escape", src: minimal + "log: {level: \"C:\\data\"}\n",
			want: `test.yaml:4:17: invalid YAML: found unknown escape character (in double quotes a backslash starts an escape: write \\ for a backslash, or use single quotes)`},
		{name: "an undefined tag handle", src: minimal + "log: {level: !x!y info}\n",
			want: "test.yaml:4:14: invalid YAML: found undefined tag handle"},

		// Line breaks and documents.
		{name: "CRLF line breaks", src: "intercept:\r\n  destinations: [10.0.0.0/8]\r\n  ports: [443\r\nlog: {}\r\n",
			want: "test.yaml:3:10: invalid YAML: did not find expected ',' or ']' (the '[' here is never closed with ']')"},
		{name: "in a second document", src: minimal + "---\nlog: [\n",
			want: "test.yaml:5:6: invalid YAML: did not find expected node content (the '[' here is never closed with ']')"},

		// Not a syntax error for yaml.v3: the format of the other errors stays.
		{name: "duplicate key", src: minimal + "log: {}\nlog: {}\n",
			want: `test.yaml:5:1: log: duplicate key "log" (first at line 4)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("test.yaml", []byte(tt.src), Overrides{})
			var errs Errors
			if !errors.As(err, &errs) {
				t.Fatalf("error %v (%T) is not an Errors", err, err)
			}
			var got []string
			for _, e := range errs {
				got = append(got, e.Error())
			}
			if want := []string{tt.want}; !reflect.DeepEqual(got, want) {
				t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), tt.want)
			}
		})
	}
}

// TestYAMLv3Lines pins what yaml.v3 itself prints for three files of
// TestSyntaxErrors, the reason the line is found again from the text. The
// parser's messages give a 0-based line: of the enclosing construct ("line
// 1" is the top-level mapping starting on line 2 in the first file), or,
// when that construct starts on line 1, of the problem ("line 3" is line 4
// in the second). The scanner's give a 1-based line, of the construct or
// else of the problem: here the end of the file, for a quote opened on line
// 1.
func TestYAMLv3Lines(t *testing.T) {
	for src, want := range map[string]string{
		// The problem is on line 4 in both.
		"# header\nlisten:\n  port: 1\n addresses: []\n": "yaml: line 1: did not find expected key",
		"listen:\n  port: 1\n  x: 2\n addresses: []\n":   "yaml: line 3: did not find expected key",
		// The quote opens on line 1.
		"log: {level: \"info}\n\nlisten: {}\n": "yaml: line 4: found unexpected end of stream",
	} {
		if got := yamlProblemRaw(src); got != want {
			t.Errorf("%q: yaml.v3 says %q, want %q", src, got, want)
		}
	}
}

func yamlProblemRaw(src string) string {
	var n yaml.Node
	if err := yaml.Unmarshal([]byte(src), &n); err != nil {
		return err.Error()
	}
	return ""
}
