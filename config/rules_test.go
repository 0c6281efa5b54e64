package config

import (
	"strings"
	"testing"
)

func TestRuleMode(t *testing.T) {
	for _, tt := range []struct {
		name, mode, want, err string
	}{
		{"absent enforces", "", "", ""},
		{"enforce", "enforce", ModeEnforce, ""},
		{"shadow", "shadow", ModeShadow, ""},
		{"unknown", "audit", "", `rule_sets.s[0].mode: unknown mode "audit" (want enforce or shadow)`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			src := withRuleSets + "  s:\n    - name: a\n      action: deny\n"
			if tt.mode != "" {
				src += "      mode: " + tt.mode + "\n"
			}
			c, err := Parse("test.yaml", []byte(src), Overrides{})
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("error %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := c.RuleSets["s"][0].Mode; got != tt.want {
				t.Fatalf("mode %q, want %q", got, tt.want)
			}
			roundTrip(t, c)
		})
	}
}
