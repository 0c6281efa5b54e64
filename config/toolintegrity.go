package config

import (
	"fmt"
	"path/filepath"
	"regexp"
	"time"

	"go.yaml.in/yaml/v3"
)

// ToolIntegrityConfig is the appliance's memory of MCP server definitions (tools, prompts,
// resource templates): pinned per server by their canonical hash, so that a definition that
// changes after it was pinned is quarantined. It is opened only when some route sets tool_pins
// (learn or enforce); the config package does not import the integrity package, which turns
// these values into its options.
type ToolIntegrityConfig struct {
	// Dir holds the pins learned and approved, the quarantines (so that they survive a restart)
	// and admin.token, the bearer token the admin listener's mutating endpoints require. Parse
	// defaults it to "tools" beside ca.dir and resolves a relative path like ca.dir.
	Dir string `yaml:"dir"`
	// PinFile is an operator-reviewed pin file (what `mcpintercept tools pin --from-live`
	// writes); its pins take precedence over learned ones for the servers it names. "" none.
	// Relative to the config file.
	PinFile string `yaml:"pin_file"`
	// MaxTools bounds the definitions remembered over all servers; past it a new definition is
	// not pinned (quarantined under enforce, passed unpinned under learn) and counted.
	MaxTools int `yaml:"max_tools"`
	// DivergenceWindow is how long one client's sight of a definition counts: another client
	// shown a different definition of it within the window is a divergence.
	DivergenceWindow Duration `yaml:"divergence_window"`
	// Patterns are scanned for in every string of a definition (findings "pattern:<name>");
	// empty: the built-in patterns (<IMPORTANT>, "ignore previous instructions", <system>, …).
	Patterns []ToolPattern `yaml:"patterns"`
}

// ToolPattern is one configured pattern: Name (letters, digits, '_', '.', '-') names the
// finding, Regex is RE2.
type ToolPattern struct {
	Name  string `yaml:"name"`
	Regex string `yaml:"regex"`
}

// Values of Route.ToolPins (and Off).
const (
	ToolPinsLearn   = "learn"
	ToolPinsEnforce = "enforce"
)

// Values of Route.OnDivergence.
const (
	OnDivergenceLog        = "log"
	OnDivergenceQuarantine = "quarantine"
)

// Defaults and bounds of the tool_integrity section.
const (
	DefaultMaxTools         = 100_000
	DefaultDivergenceWindow = 10 * time.Minute
	maxMaxTools             = 10_000_000
	minDivergenceWindow     = time.Second
	maxDivergenceWindow     = 24 * time.Hour
	// maxToolPatterns bounds the configured patterns: each is run over every string of every
	// definition a server lists.
	maxToolPatterns = 256
)

// AdminTokenFile is the name, in tool_integrity.dir, of the admin listener's bearer token.
const AdminTokenFile = "admin.token"

// toolsDirBeside is tool_integrity.dir's default: "tools" in the directory that holds ca.dir.
func toolsDirBeside(c *Config) (string, bool) {
	if c.CA.Dir == "" {
		return "", false
	}
	return filepath.Join(filepath.Dir(c.CA.Dir), "tools"), true
}

func checkMaxTools(n int64) string { return between(n, 1, maxMaxTools) }

// toolPatternTable is the schema of one entry of tool_integrity.patterns.
var toolPatternTable = table[ToolPattern]{
	key("name", "the pattern's name in findings (pattern:<name>)", func(p *ToolPattern) *string { return &p.Name }, str),
	key("regex", "an RE2 regular expression", func(p *ToolPattern) *string { return &p.Regex }, str),
}

var toolPatternsBlock = block[Config]{
	path: "tool_integrity.patterns", doc: "patterns every string of a definition is scanned for (empty: the built-in ones)",
	decodeFn: func(d *decoder, c *Config, v *yaml.Node, key string) bool {
		out, ok := entries(d, v, key, "patterns", toolPatternTable, func(*ToolPattern, *yaml.Node) {})
		c.ToolIntegrity.Patterns = out
		return ok
	},
	checkFn: func(v *validator, c *Config, key string) {
		ps := c.ToolIntegrity.Patterns
		if len(ps) > maxToolPatterns {
			v.check(key, fmt.Sprintf("at most %d patterns (each is run over every string of every definition), got %d", maxToolPatterns, len(ps)))
		}
		first := map[string]int{}
		for i, p := range ps {
			k := fmt.Sprintf("%s[%d]", key, i)
			switch j, dup := first[p.Name]; {
			case p.Name == "":
				v.check(k+".name", "required: the finding's name, e.g. important (reported as pattern:important)")
			case dup:
				v.check(k+".name", fmt.Sprintf("duplicate pattern name %s (also %s[%d])", quote(p.Name), key, j))
			default:
				first[p.Name] = i
				v.check(k+".name", checkName(p.Name))
			}
			v.check(k+".regex", checkToolPattern(p))
		}
	},
}

// checkToolPattern compiles the pattern's regex as the appliance will (RE2).
func checkToolPattern(p ToolPattern) string {
	what := "pattern " + quote(p.Name)
	if p.Name == "" {
		what = "the pattern"
	}
	if p.Regex == "" {
		return "required: a regular expression (RE2) " + what + " finds, e.g. (?i)<\\s*important\\s*>"
	}
	re, err := regexp.Compile(p.Regex)
	if err != nil {
		return fmt.Sprintf("%s: not a regular expression (RE2): %v", what, err)
	}
	if re.MatchString("") {
		return what + ": the regex matches the empty string, so every string would be a finding"
	}
	return ""
}

// ToolPinsOn reports whether the route pins definitions (tool_pins learn or enforce).
func (r Route) ToolPinsOn() bool { return r.ToolPins != "" && r.ToolPins != Off }

// ToolPinsOn reports whether some route (default_route included) pins definitions: only then is
// the tool-integrity state opened.
func (c *Config) ToolPinsOn() bool {
	for _, r := range c.Routes {
		if r.ToolPinsOn() {
			return true
		}
	}
	return c.DefaultRoute != nil && !c.DefaultRoute.Close && c.DefaultRoute.Route != nil && c.DefaultRoute.Route.ToolPinsOn() ||
		c.FederationOn() && c.Federation.ToolPins != "" && c.Federation.ToolPins != Off
}

// toolsRoute relates a route's tool-integrity keys to its disposition, its level and the
// tool_integrity section.
func (v *validator) toolsRoute(c *Config, key string, r Route, ok bool) {
	pinsKey, divKey := key+".tool_pins", key+".on_divergence"
	if r.OnDivergence == OnDivergenceQuarantine && !r.ToolPinsOn() && checkToolPins(r.ToolPins) == "" {
		v.checkAlt(divKey, pinsKey, "on_divergence: quarantine needs tool_pins (learn or enforce): only pinned definitions are compared between clients")
	}
	if !r.ToolPinsOn() || checkToolPins(r.ToolPins) != "" {
		return
	}
	if ok {
		level := r.LevelOrDefault()
		switch {
		case r.TLS == TLSPassthrough:
			v.checkAlt(pinsKey, key+".tls", "needs a route that reads HTTP at level 2 (tls terminate or plaintext): a passthrough route cannot read the definitions servers list (the stream stays encrypted)")
		case level < 2:
			v.checkAlt(pinsKey, key+".level", fmt.Sprintf("needs level 2: definitions are in the bodies of list results, which a level %d route does not read", level))
		}
	}
	if c.ToolIntegrity.Dir == "" {
		v.checkAlt(pinsKey, "tool_integrity.dir", "needs tool_integrity.dir: the directory pins, quarantines and the admin token are kept in")
	}
}

func checkToolPins(s string) string { return checkOneOf(s, Off, ToolPinsLearn, ToolPinsEnforce) }

func checkOnDivergence(s string) string {
	return checkOneOf(s, OnDivergenceLog, OnDivergenceQuarantine)
}

// parseToolPins reads off, learn or enforce; false is accepted for off, since YAML 1.1 readers
// (and people) write it for the same thing.
func parseToolPins(n *yaml.Node) (string, string) {
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!bool" {
		if b, msg := parseBool(n); msg == "" && !b {
			return Off, ""
		}
		return "", "expected off, learn or enforce, got " + describe(n)
	}
	s, msg := parseString(n)
	if msg != "" {
		return "", msg
	}
	if m := checkToolPins(s); m != "" {
		return "", m
	}
	return s, ""
}
