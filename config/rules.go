package config

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// Rule is one entry of a rule set. Expressions are CEL source text; the
// policy package compiles them.
type Rule struct {
	Name   string `yaml:"name"`
	When   string `yaml:"when"`   // "" matches every request
	Action string `yaml:"action"` // ActionAllow, ActionDeny or ActionRateLimit
	Reason string `yaml:"reason"` // one line of an HTTP response body
	// Mode is ModeEnforce ("" too: the default) or ModeShadow: a shadow rule is evaluated and its
	// would-be decision recorded (would_deny), but it never decides a request.
	Mode      string     `yaml:"mode"`
	RateLimit *RateLimit `yaml:"rate_limit"`
	Redact    *Redact    `yaml:"redact,omitempty"`
	WhenPos   Pos        `yaml:"-"` // where When's text starts in the file
	KeyPos    Pos        `yaml:"-"` // where RateLimit.Key's text starts in the file
	// Line and Column locate the rule's mapping in the file (0 when built
	// in code).
	Line, Column int `yaml:"-"`
}

// MarshalYAML writes the same keys as plain struct encoding, but spells the
// expressions with strNode.
func (r Rule) MarshalYAML() (any, error) {
	rl := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null", Value: "null"}
	if r.RateLimit != nil {
		v, err := r.RateLimit.MarshalYAML()
		if err != nil {
			return nil, err
		}
		rl = v.(*yaml.Node)
	}
	kv := []any{"name", r.Name, "when", r.When, "action", r.Action, "reason", r.Reason}
	if r.Mode != "" { // empty: a rule built in code, which enforces
		kv = append(kv, "mode", r.Mode)
	}
	kv = append(kv, "rate_limit", rl)
	if r.Redact != nil {
		kv = append(kv, "redact", r.Redact)
	}
	return mappingNode(kv...)
}

// Redact is the redact block of a redact rule: JSON paths into the JSON-RPC message
// ($.result.content[*].text, $..password) and regular expressions (RE2) over the string values
// of its params (requests) or result (responses); what they select is replaced by Marker
// ("[REDACTED]" when empty).
type Redact struct {
	Paths    []string `yaml:"paths,omitempty"`
	Patterns []string `yaml:"patterns,omitempty"`
	Marker   string   `yaml:"marker,omitempty"`
}

// RateLimit is the token bucket of a rate_limit rule.
type RateLimit struct {
	Key   string  `yaml:"key"`   // CEL expression naming the bucket, e.g. client.address
	Rate  float64 `yaml:"rate"`  // tokens per second
	Burst int     `yaml:"burst"` // bucket size
	// MaxKeys is how many distinct keys (buckets) this rule keeps, 1 to
	// 1000000 (DefaultRateLimitKeys when absent). Every rate_limit rule has
	// its own store, so one rule's keys cannot crowd out another's.
	MaxKeys int `yaml:"max_keys"`
}

// MarshalYAML writes the same keys as plain struct encoding, but spells the
// key expression with strNode.
func (r RateLimit) MarshalYAML() (any, error) {
	return mappingNode("key", r.Key, "rate", r.Rate, "burst", r.Burst, "max_keys", r.MaxKeys)
}

// mappingNode builds a mapping from key, value pairs; string values go
// through strNode, the rest are encoded as usual.
func mappingNode(kv ...any) (*yaml.Node, error) {
	m := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
	for i := 0; i+1 < len(kv); i += 2 {
		var v *yaml.Node
		switch x := kv[i+1].(type) {
		case *yaml.Node:
			v = x
		case string:
			v = strNode(x)
		default:
			v = &yaml.Node{}
			if err := v.Encode(x); err != nil {
				return nil, err
			}
		}
		m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: kv[i].(string)}, v)
	}
	return m, nil
}

// strNode spells s as yaml.v3 does, except a multi-line string that starts
// with white space or a line break: yaml.v3 writes those as block scalars it
// cannot read back (the indentation indicator or the first line comes out
// wrong), which a CEL expression from a block with an indentation indicator
// or a leading blank line can be. Those are double-quoted instead.
func strNode(s string) *yaml.Node {
	if r, _ := utf8.DecodeRuneInString(s); strings.Contains(s, "\n") && unicode.IsSpace(r) && utf8.ValidString(s) {
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s, Style: yaml.DoubleQuotedStyle}
	}
	n := &yaml.Node{}
	if err := n.Encode(s); err != nil {
		// Encoding a string cannot fail; keep the value rather than panic.
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s, Style: yaml.DoubleQuotedStyle}
	}
	return n
}

// Rule modes.
const (
	ModeEnforce = "enforce"
	ModeShadow  = "shadow"
)

// checkMode accepts the two modes; "" is a rule built in code, which enforces.
func checkMode(m string) string {
	switch m {
	case "", ModeEnforce, ModeShadow:
		return ""
	}
	return fmt.Sprintf("unknown mode %q (want %s or %s)", m, ModeEnforce, ModeShadow)
}

// ruleTable is the schema of one rule of a rule set.
var ruleTable = table[Rule]{
	key("name", "the rule's name in the decision log", func(r *Rule) *string { return &r.Name }, str),
	expr("when", "CEL condition; absent matches every request", func(r *Rule) (*string, *Pos) { return &r.When, &r.WhenPos }),
	key("action", "allow, deny, rate_limit or redact", func(r *Rule) *string { return &r.Action }, str),
	key("reason", "one line for the response body and the log", func(r *Rule) *string { return &r.Reason }, str).
		checked(checkReason),
	key("mode", "enforce, or shadow: evaluated and recorded as would_deny, never enforced", func(r *Rule) *string { return &r.Mode }, str).
		checked(checkMode),
	block[Rule]{
		path: "rate_limit", doc: "token bucket of a rate_limit rule",
		decodeFn: func(d *decoder, r *Rule, v *yaml.Node, key string) bool {
			r.RateLimit = &RateLimit{}
			return d.mapping(v, key, rateLimitTable.fields(d, r, ""))
		},
		fillFn: func(r *Rule, key string, given func(string) bool) {
			if r.RateLimit != nil {
				rateLimitTable.fill(r, key, given)
			}
		},
		checkFn: func(v *validator, r *Rule, key string) {
			if r.RateLimit != nil {
				rateLimitTable.check(v, r, key)
			}
		},
	},
	block[Rule]{
		path: "redact", doc: "what a redact rule hides",
		decodeFn: func(d *decoder, r *Rule, v *yaml.Node, key string) bool {
			r.Redact = &Redact{}
			return d.mapping(v, key, redactTable.fields(d, r, ""))
		},
	},
}

// rateLimitTable is the rate_limit block of a rule; Rule.RateLimit is set
// before it is used.
var rateLimitTable = table[Rule]{
	expr("key", "CEL expression naming the bucket", func(r *Rule) (*string, *Pos) { return &r.RateLimit.Key, &r.KeyPos }),
	key("rate", "tokens per second", func(r *Rule) *float64 { return &r.RateLimit.Rate }, rate),
	key("burst", "bucket size", func(r *Rule) *int { return &r.RateLimit.Burst }, integer[int](checkCount)),
	intKey("max_keys", "buckets the rule keeps", func(r *Rule) *int { return &r.RateLimit.MaxKeys }, checkMaxKeys).
		def(DefaultRateLimitKeys),
}

// redactTable is the redact block of a rule; Rule.Redact is set before it
// is used.
var redactTable = table[Rule]{
	key("paths", "JSON paths whose values are hidden", func(r *Rule) *[]string { return &r.Redact.Paths }, list(parseRedactPath)),
	key("patterns", "regular expressions whose matches are hidden", func(r *Rule) *[]string { return &r.Redact.Patterns }, list(parseRedactPattern)),
	key("marker", "what replaces a hidden value", func(r *Rule) *string { return &r.Redact.Marker }, str),
}

var ruleSetsBlock = block[Config]{
	path: "rule_sets", doc: "named lists of rules that routes apply",
	decodeFn: decodeRuleSets,
	fillFn: func(c *Config, key string, given func(string) bool) {
		for _, name := range c.RuleSetOrder {
			for i := range c.RuleSets[name] {
				ruleTable.fill(&c.RuleSets[name][i], fmt.Sprintf("%s[%d]", join(key, segment(name)), i), given)
			}
		}
	},
	checkFn: func(v *validator, c *Config, key string) {
		for _, name := range c.ruleSetNames() {
			for i := range c.RuleSets[name] {
				ruleTable.check(v, &c.RuleSets[name][i], fmt.Sprintf("%s[%d]", join(key, segment(name)), i))
			}
		}
	},
}

// decodeRuleSets decodes a mapping whose keys are names the user chose,
// which a table cannot list; RuleSetOrder records them as the file lists
// them.
func decodeRuleSets(d *decoder, c *Config, v *yaml.Node, key string) bool {
	if v.Kind != yaml.MappingNode {
		d.fail(v, key, "expected a mapping of rule set names to lists of rules, got "+describe(v))
		return false
	}
	sets := map[string][]Rule{}
	var names []string
	ok := true
	d.pairs(v, key, func(kn, vn *yaml.Node, k string) {
		if !ok || !d.count(kn, k, 1) {
			ok = false
			return
		}
		// The key, not the list, is what a message about the set's
		// name or existence should point at.
		d.keys[k], d.vals[k] = kn, kn
		var rules []Rule
		if !isNull(vn) { // "name:" alone is a set without rules
			var good bool
			rules, good = entries(d, vn, k, "rules", ruleTable, func(r *Rule, n *yaml.Node) {
				r.Line, r.Column = n.Line, n.Column
			})
			if !good {
				d.bad[k] = true
			}
		}
		// Registered even when broken, so that a route naming it is
		// not also told the set does not exist.
		sets[kn.Value] = rules
		names = append(names, kn.Value)
	})
	if len(names) > 0 {
		c.RuleSets, c.RuleSetOrder = sets, names
	}
	return ok
}

// expr takes any scalar, since `when: true` is as much a CEL expression as
// a quoted one, and records where its text starts for the policy package.
func expr(path, doc string, get func(*Rule) (*string, *Pos)) block[Rule] {
	return block[Rule]{path: path, doc: doc, decodeFn: func(d *decoder, r *Rule, v *yaml.Node, key string) bool {
		if v.Kind != yaml.ScalarNode {
			d.fail(v, key, "expected a CEL expression (a string), got "+describe(v))
			return false
		}
		s, pos := get(r)
		*s, *pos = v.Value, d.textPos(v)
		return true
	}}
}
