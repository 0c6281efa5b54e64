package policy

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// RuleRedact is the action of a rule that hides parts of a message instead of deciding about it.
const RuleRedact = "redact"

// DefaultMarker replaces what a redact rule hides when the rule names no marker.
const DefaultMarker = "[REDACTED]"

// Bounds of a redact rule, so that a configuration cannot make every message cost a lot.
const (
	MaxRedactPaths    = 64
	MaxRedactPatterns = 32
	MaxMarkerLen      = 128
	maxPathLen        = 512
)

// Redact is the redact block of a rule as the configuration states it: JSON paths into the
// JSON-RPC message and regular expressions (RE2) over its string values, and the marker that
// replaces what they select.
type Redact struct {
	Paths    []string
	Patterns []string
	Marker   string
}

// Redaction is a compiled redact block, handed to the caller in Decision.Redactions when its
// rule matched. Applying it to a message is the caller's business (policy does no I/O and knows
// no JSON-RPC framing); Paths and Patterns say what to replace.
type Redaction struct {
	Rule     string
	Paths    []Path
	Patterns []*regexp.Regexp
	Marker   string
}

// PathSeg is one step of a concrete location in a JSON document: an object key, or an array
// index when Key is "" and Index >= 0.
type PathSeg struct {
	Key   string
	Index int // -1 for a key
}

// Path is a compiled JSON path: `$` then steps `.key`, `["key"]`, `[N]`, `[*]` or `.*` (any key
// or index), and `..key` (that key at any depth below). A path selects a value and everything
// inside it; a key step matches every key that folds equal to it (see stepMatches).
type Path struct {
	src   string
	steps []pathStep
}

type pathStep struct {
	key       string
	index     int  // >= 0: that index
	any       bool // * : any key or index
	recursive bool // .. : at any depth from here
}

// String is the path as written.
func (p Path) String() string { return p.src }

// ParsePath compiles a JSON path.
func ParsePath(src string) (Path, error) {
	p := Path{src: src}
	if len(src) > maxPathLen {
		return p, fmt.Errorf("path longer than %d bytes", maxPathLen)
	}
	if !strings.HasPrefix(src, "$") {
		return p, fmt.Errorf("path %q must start with $ (the JSON-RPC message), e.g. $.result.content[*].text", src)
	}
	i := 1
	for i < len(src) {
		var st pathStep
		switch {
		case strings.HasPrefix(src[i:], ".."):
			st.recursive = true
			i += 2
			if i < len(src) && src[i] == '[' {
				// $..["key"]: handled below as a bracket step.
				break
			}
			j := identEnd(src, i)
			if j == i {
				if i < len(src) && src[i] == '*' {
					st.any = true
					i++
					p.steps = append(p.steps, st)
					continue
				}
				return p, fmt.Errorf("path %q: a name must follow .. at offset %d", src, i)
			}
			st.key, st.index = src[i:j], -1
			i = j
			p.steps = append(p.steps, st)
			continue
		case src[i] == '.':
			i++
			if i < len(src) && src[i] == '*' {
				st.any = true
				i++
				p.steps = append(p.steps, st)
				continue
			}
			j := identEnd(src, i)
			if j == i {
				return p, fmt.Errorf("path %q: a name must follow . at offset %d", src, i)
			}
			st.key, st.index = src[i:j], -1
			i = j
			p.steps = append(p.steps, st)
			continue
		case src[i] != '[':
			return p, fmt.Errorf("path %q: unexpected %q at offset %d (want . or [)", src, src[i], i)
		}
		// A bracket step.
		if i >= len(src) || src[i] != '[' {
			return p, fmt.Errorf("path %q: unexpected end after ..", src)
		}
		end := strings.IndexByte(src[i:], ']')
		if end < 0 {
			return p, fmt.Errorf("path %q: [ at offset %d is not closed", src, i)
		}
		inner := src[i+1 : i+end]
		// A quoted key may hold ']': find the closing quote first.
		if strings.HasPrefix(inner, `"`) {
			q := i + 2
			for q < len(src) && src[q] != '"' {
				if src[q] == '\\' {
					q++
				}
				q++
			}
			if q+1 >= len(src) || src[q+1] != ']' {
				return p, fmt.Errorf("path %q: quoted key at offset %d is not closed by \"]", src, i)
			}
			k, err := strconv.Unquote(src[i+1 : q+1])
			if err != nil {
				return p, fmt.Errorf("path %q: key at offset %d: %v", src, i, err)
			}
			st.key, st.index = k, -1
			i = q + 2
			p.steps = append(p.steps, st)
			continue
		}
		switch {
		case inner == "*":
			st.any = true
		default:
			n, err := strconv.Atoi(inner)
			if err != nil || n < 0 {
				return p, fmt.Errorf("path %q: [%s] is neither an index, * nor a quoted key", src, inner)
			}
			st.index = n
		}
		i += end + 1
		p.steps = append(p.steps, st)
	}
	if len(p.steps) == 0 {
		return p, fmt.Errorf("path %q selects the whole message; name a member, e.g. $.result", src)
	}
	if s := p.steps[0]; !s.recursive && !s.any && s.index < 0 && (s.key == "jsonrpc" || s.key == "id" || s.key == "method") {
		return p, fmt.Errorf("path %q selects the JSON-RPC envelope, which is never redacted", src)
	}
	return p, nil
}

func identEnd(s string, i int) int {
	for i < len(s) {
		c := s[i]
		if c == '.' || c == '[' || c == ']' || c == ' ' || c == '"' {
			break
		}
		i++
	}
	return i
}

// Match reports whether the path selects the value at loc or one that contains it.
func (p Path) Match(loc []PathSeg) bool {
	return matchSteps(p.steps, loc)
}

func matchSteps(steps []pathStep, loc []PathSeg) bool {
	if len(steps) == 0 {
		return true // the selected value, or something inside it
	}
	if len(loc) == 0 {
		return false
	}
	st := steps[0]
	if st.recursive {
		// The step may match here or at any depth below.
		for i := range loc {
			if stepMatches(st, loc[i]) && matchSteps(steps[1:], loc[i+1:]) {
				return true
			}
		}
		return false
	}
	return stepMatches(st, loc[0]) && matchSteps(steps[1:], loc[1:])
}

func stepMatches(st pathStep, seg PathSeg) bool {
	switch {
	case st.any:
		return true
	case st.index >= 0:
		return seg.Index == st.index && seg.Key == ""
	}
	// A key matches when it folds equal to the step's, as encoding/json matches a key to a
	// struct field: a server (or client) decoding {"PIN": 1} into a struct reads it as pin,
	// so $..pin must hide it too. Hiding more than the exact key costs nothing secret.
	return seg.Index < 0 && (seg.Key == st.key || strings.EqualFold(seg.Key, st.key))
}

// FormatPath writes a concrete location the way paths are written ($.result.content[0].text),
// for the record: where something was redacted, never what.
func FormatPath(loc []PathSeg) string {
	var b strings.Builder
	b.WriteByte('$')
	for _, s := range loc {
		if s.Index >= 0 && s.Key == "" {
			b.WriteByte('[')
			b.WriteString(strconv.Itoa(s.Index))
			b.WriteByte(']')
			continue
		}
		if s.Key != "" && identEnd(s.Key, 0) == len(s.Key) && len(s.Key) <= 64 {
			b.WriteByte('.')
			b.WriteString(s.Key)
			continue
		}
		k := s.Key
		if len(k) > 64 {
			k = k[:64]
		}
		b.WriteByte('[')
		b.WriteString(strconv.Quote(strings.ToValidUTF8(k, "?")))
		b.WriteByte(']')
	}
	return b.String()
}

// compileRedact checks and compiles a rule's redact block.
func compileRedact(spec *Redact) (*Redaction, []string) {
	var msgs []string
	r := &Redaction{Marker: spec.Marker}
	if r.Marker == "" {
		r.Marker = DefaultMarker
	}
	if len(spec.Paths) == 0 && len(spec.Patterns) == 0 {
		msgs = append(msgs, "redact needs at least one of paths and patterns")
	}
	if len(spec.Paths) > MaxRedactPaths {
		msgs = append(msgs, fmt.Sprintf("redact has %d paths, at most %d", len(spec.Paths), MaxRedactPaths))
	}
	if len(spec.Patterns) > MaxRedactPatterns {
		msgs = append(msgs, fmt.Sprintf("redact has %d patterns, at most %d", len(spec.Patterns), MaxRedactPatterns))
	}
	if len(spec.Marker) > MaxMarkerLen {
		msgs = append(msgs, fmt.Sprintf("redact marker longer than %d bytes", MaxMarkerLen))
	}
	for _, src := range spec.Paths {
		p, err := ParsePath(src)
		if err != nil {
			msgs = append(msgs, "redact paths: "+err.Error())
			continue
		}
		r.Paths = append(r.Paths, p)
	}
	for _, src := range spec.Patterns {
		re, err := regexp.Compile(src)
		if err != nil {
			msgs = append(msgs, fmt.Sprintf("redact patterns: %q: %v", src, err))
			continue
		}
		if re.MatchString("") {
			// It would insert the marker between every two characters of every string.
			msgs = append(msgs, fmt.Sprintf("redact patterns: %q matches the empty string", src))
			continue
		}
		if re.MatchString(r.Marker) {
			// The marker would itself be a match: what was hidden would still look unhidden,
			// and redacting the output again would not be a fixed point.
			msgs = append(msgs, fmt.Sprintf("redact patterns: %q matches the marker %q", src, r.Marker))
			continue
		}
		r.Patterns = append(r.Patterns, re)
	}
	return r, msgs
}
