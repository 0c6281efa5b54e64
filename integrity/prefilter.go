package integrity

import (
	"bytes"
	"regexp"
	"regexp/syntax"
	"sync"
	"unicode"
)

// A prefilter is a cheap necessary condition of a pattern's match: literals one of which every
// match contains, derived from the pattern's syntax tree. Scan runs the regexp on a string only
// when the string contains one of them, which is what keeps the scan of a long description (and
// of the many short strings of a schema) near the speed of a byte search; the regexp decides.
//
// It is conservative by construction: a node that cannot promise a literal (a class, a star, a
// word boundary, an alternative without one) gives none, and then the regexp always runs. Case-
// insensitive literals keep only runes whose case-folding orbit is ASCII (so not k or s, which
// fold to U+212A KELVIN SIGN and U+017F LONG S), searched in an ASCII-lower-cased copy.
type prefilter struct {
	lits []pfLit
}

type pfLit struct {
	b    []byte
	fold bool // b is lower case; search the lower-cased text
}

// maxPrefilterLits bounds the literals of one prefilter (more: no prefilter).
const maxPrefilterLits = 16

// foldSafe marks the ASCII runes every case variant of which is ASCII.
var foldSafe = func() (t [utf8RuneSelf]bool) {
	for r := rune(0); r < utf8RuneSelf; r++ {
		t[r] = true
		for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
			if f >= utf8RuneSelf {
				t[r] = false
			}
		}
	}
	return t
}()

const utf8RuneSelf = 0x80

// newPrefilter is re's prefilter, nil when it has none.
func newPrefilter(re *regexp.Regexp) *prefilter {
	t, err := syntax.Parse(re.String(), syntax.Perl)
	if err != nil {
		return nil
	}
	lits, ok := required(t.Simplify())
	if !ok || len(lits) == 0 {
		return nil
	}
	for _, l := range lits {
		if len(l.b) == 0 {
			return nil
		}
	}
	return &prefilter{lits: lits}
}

// required is a set of literals one of which every match of t contains; false when there is
// no such set.
func required(t *syntax.Regexp) ([]pfLit, bool) {
	switch t.Op {
	case syntax.OpLiteral:
		if t.Flags&syntax.FoldCase == 0 {
			return []pfLit{{b: []byte(string(t.Rune))}}, true
		}
		// the longest run of fold-safe runes, lower-cased
		var best, cur []byte
		for _, r := range t.Rune {
			if r < utf8RuneSelf && foldSafe[r] {
				cur = append(cur, byte(unicode.ToLower(r)))
				continue
			}
			if len(cur) > len(best) {
				best = cur
			}
			cur = nil
		}
		if len(cur) > len(best) {
			best = cur
		}
		if len(best) == 0 {
			return nil, false
		}
		return []pfLit{{b: best, fold: true}}, true
	case syntax.OpCapture, syntax.OpPlus:
		return required(t.Sub[0])
	case syntax.OpRepeat:
		if t.Min >= 1 {
			return required(t.Sub[0])
		}
	case syntax.OpConcat:
		var best []pfLit
		bestScore := -1
		for _, s := range t.Sub {
			if lits, ok := required(s); ok {
				if sc := setScore(lits); sc > bestScore {
					best, bestScore = lits, sc
				}
			}
		}
		return best, best != nil
	case syntax.OpAlternate:
		var all []pfLit
		for _, s := range t.Sub {
			lits, ok := required(s)
			if !ok {
				return nil, false
			}
			all = append(all, lits...)
		}
		if len(all) > maxPrefilterLits {
			return nil, false
		}
		return all, true
	}
	return nil, false
}

// setScore rates how selective a set of literals is: its weakest literal's length, punctuation
// counting thrice (it is rarer in prose than letters).
func setScore(lits []pfLit) int {
	score := -1
	for _, l := range lits {
		s := 0
		for _, b := range l.b {
			if b < utf8RuneSelf && !('a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9' || b == ' ') {
				s += 3
			} else {
				s++
			}
		}
		if score < 0 || s < score {
			score = s
		}
	}
	return score
}

// may says whether text may match: it holds one of the literals. lower is text lower-cased,
// computed on first need into *buf.
func (p *prefilter) may(text []byte, lower *[]byte, done *bool) bool {
	for _, l := range p.lits {
		if !l.fold {
			if bytes.Contains(text, l.b) {
				return true
			}
			continue
		}
		if !*done {
			*lower = asciiLower((*lower)[:0], text)
			*done = true
		}
		if bytes.Contains(*lower, l.b) {
			return true
		}
	}
	return false
}

func asciiLower(dst, s []byte) []byte {
	dst = append(dst, s...)
	for i, b := range dst {
		if 'A' <= b && b <= 'Z' {
			dst[i] = b + ('a' - 'A')
		}
	}
	return dst
}

// prefilters are the patterns' prefilters, remembered by regexp (a bounded cache: patterns are
// configuration, but Scan may be called with any).
var prefilters struct {
	mu sync.Mutex
	m  map[*regexp.Regexp]*prefilter
}

func prefiltersOf(pats []Pattern) []*prefilter {
	if len(pats) == 0 {
		return nil
	}
	out := make([]*prefilter, len(pats))
	prefilters.mu.Lock()
	defer prefilters.mu.Unlock()
	if prefilters.m == nil || len(prefilters.m) > 4096 {
		prefilters.m = map[*regexp.Regexp]*prefilter{}
	}
	for i, p := range pats {
		if p.Re == nil {
			continue
		}
		pf, ok := prefilters.m[p.Re]
		if !ok {
			pf = newPrefilter(p.Re)
			prefilters.m[p.Re] = pf
		}
		out[i] = pf
	}
	return out
}
