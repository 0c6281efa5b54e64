package config

import (
	"errors"
	"strings"
	"testing"
)

// Level 2 surface control keys: a redact rule and validate_arguments.
func TestSurfaceControlKeys(t *testing.T) {
	src := minimal + `routes:
  - name: l2
    match: {ports: [443]}
    tls: terminate
    level: 2
    validate_arguments: true
    rule_set: s
rule_sets:
  s:
    - name: hide
      when: 'mcp.direction == "server_to_client"'
      action: redact
      redact:
        paths: ['$.result.content[*].text']
        patterns: ['AKIA[0-9A-Z]{16}']
        marker: '[gone]'
`
	c, err := Parse("test.yaml", []byte(src), Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	r := c.RuleSets["s"][0]
	if !c.Routes[0].ValidateArguments || r.Redact == nil || r.Redact.Marker != "[gone]" ||
		len(r.Redact.Paths) != 1 || r.Redact.Patterns[0] != "AKIA[0-9A-Z]{16}" {
		t.Fatalf("parsed %+v %+v", c.Routes[0], r.Redact)
	}

	for _, tt := range []struct{ name, src, key, msg string }{
		{"redact without block", strings.Replace(src, "      redact:\n        paths: ['$.result.content[*].text']\n        patterns: ['AKIA[0-9A-Z]{16}']\n        marker: '[gone]'\n", "", 1),
			"rule_sets.s[0].redact", "required when action is redact"},
		{"block on a deny rule", strings.Replace(src, "action: redact", "action: deny", 1), "rule_sets.s[0].redact", "applies to action: redact only"},
		{"bad pattern", strings.Replace(src, "'AKIA[0-9A-Z]{16}'", "'('", 1), "rule_sets.s[0].redact.patterns[0]", "not a regular expression"},
		{"path without $", strings.Replace(src, "'$.result.content[*].text'", "'result.x'", 1), "rule_sets.s[0].redact.paths[0]", "starts with $"},
		{"redact rules need level 2", strings.Replace(src, "level: 2\n    validate_arguments: true\n", "level: 1\n", 1), "routes[0].rule_set", "needs level 2"},
		{"validate_arguments needs level 2", strings.Replace(src, "level: 2\n", "level: 1\n", 1), "routes[0].validate_arguments", "needs level 2"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("test.yaml", []byte(tt.src), Overrides{})
			var errs Errors
			if !errors.As(err, &errs) {
				t.Fatalf("error %v", err)
			}
			for _, e := range errs {
				if e.Key == tt.key && strings.Contains(e.Msg, tt.msg) {
					return
				}
			}
			t.Fatalf("errors %v; want %s: %s", err, tt.key, tt.msg)
		})
	}
}
