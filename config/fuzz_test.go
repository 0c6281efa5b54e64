package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzParse feeds arbitrary bytes (and an arbitrary --mechanism) to Parse.
// Parse must never panic; a failure must be a non-empty, ordered Errors of
// one-line messages; a success must re-validate cleanly and survive being
// written back out as YAML.
func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob("testdata/*.yaml")
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data, "")
	}
	f.Fuzz(func(t *testing.T, data []byte, mechanism string) {
		c, err := Parse("fuzz.yaml", data, Overrides{Mechanism: Mechanism(mechanism)})
		if err != nil {
			if c != nil {
				t.Fatal("returned a config together with an error")
			}
			var errs Errors
			if !errors.As(err, &errs) || len(errs) == 0 {
				t.Fatalf("error is %T %v, want a non-empty Errors", err, err)
			}
			for i, e := range errs {
				if e.Msg == "" || e.Line < 0 || e.Column < 0 {
					t.Fatalf("malformed error %#v", e)
				}
				if strings.Contains(e.Error(), "\n") {
					t.Fatalf("error spans lines: %q", e.Error())
				}
				if i > 0 && e.Line < errs[i-1].Line {
					t.Fatalf("errors out of order:\n%v", err)
				}
			}
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("Parse accepted a config that Validate rejects: %v\ninput:\n%s", err, data)
		}
		for i, r := range c.Routes {
			if r.Level == nil || r.Line < 1 || r.Column < 1 || r.OnMismatch == "" || r.OnRuleError == "" {
				t.Fatalf("routes[%d] = %+v: not defaulted or no position", i, r)
			}
		}
		if d := c.DefaultRoute; d != nil && d.Route != nil {
			if r := d.Route; r.Name != DefaultRouteName || r.Level == nil || r.Line < 1 || r.OnMismatch == "" || r.OnRuleError == "" {
				t.Fatalf("default_route = %+v: not defaulted or no position", r)
			}
		}
		for _, name := range c.RuleSetOrder {
			for _, r := range c.RuleSets[name] {
				checkTextPos(t, data, "when", r.When, r.WhenPos)
				if r.RateLimit != nil {
					checkTextPos(t, data, "rate_limit.key", r.RateLimit.Key, r.KeyPos)
				}
			}
		}
		roundTrip(t, c)
	})
}

// checkTextPos checks that pos is where text starts in data: the character
// there is text's first, except where YAML spells it differently (an escape
// in a double-quoted scalar, a doubled quote in a single-quoted one) or text
// starts with a line that is blank in the file.
func checkTextPos(t *testing.T, data []byte, what, text string, pos Pos) {
	t.Helper()
	if text == "" {
		return
	}
	if pos.File != "fuzz.yaml" {
		t.Fatalf("%s %q: position %+v names the wrong file", what, text, pos)
	}
	lines := (&decoder{src: data}).sourceLines()
	if pos.Line < 1 || pos.Line > len(lines) || pos.Column < 1 {
		t.Fatalf("%s %q: position %+v is outside the file", what, text, pos)
	}
	w, _ := utf8.DecodeRuneInString(text)
	if w == '\n' || w == ' ' {
		return // a blank first line in a block, or a folded line break
	}
	line := []rune(lines[pos.Line-1])
	if pos.Column > len(line) {
		t.Fatalf("%s %q: position %+v is past the end of line %q", what, text, pos, string(line))
	}
	if c := line[pos.Column-1]; c != w && c != '\\' {
		t.Fatalf("%s %q: position %+v points at %q in line %q", what, text, pos, c, string(line))
	}
}

// FuzzParsePartial: ParsePartial reports exactly Parse's errors, always returns a configuration
// (defaults applied) on which Warnings runs, and drops no rule from a valid file.
func FuzzParsePartial(f *testing.F) {
	files, _ := filepath.Glob("testdata/*.yaml")
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data, "")
	}
	f.Fuzz(func(t *testing.T, data []byte, mechanism string) {
		o := Overrides{Mechanism: Mechanism(mechanism)}
		c, errs, err := ParsePartial("fuzz.yaml", data, o)
		if err != nil || c == nil {
			t.Fatalf("ParsePartial: %v, %v", c, err)
		}
		pc, perr := Parse("fuzz.yaml", data, o)
		switch {
		case (perr == nil) != (errs == nil):
			t.Fatalf("Parse: %v; ParsePartial: %v", perr, errs)
		case perr != nil && perr.Error() != errs.Error():
			t.Fatalf("errors differ:\nParse:\n%v\nParsePartial:\n%v", perr, errs)
		case perr == nil && len(pc.Routes) != len(c.Routes):
			t.Fatalf("a valid file parsed differently")
		}
		_ = c.Warnings()
		// No error is about a rule kept: every kept rule has a name an error key does not hold.
		if perr == nil {
			for name, rules := range c.RuleSets {
				if len(rules) != len(pc.RuleSets[name]) {
					t.Fatalf("rule set %s: %d rules kept of %d in a valid file", name, len(rules), len(pc.RuleSets[name]))
				}
			}
		}
	})
}
