package integrity

import (
	"bytes"
	"encoding/json"
	"regexp"
	"slices"
	"unicode/utf8"

	"mcpintercept/mcp"
)

// Finding classes of Scan (besides "pattern:<name>").
const (
	FindingANSI        = "ansi"
	FindingBidi        = "bidi"
	FindingControl     = "control"
	FindingInvalidUTF8 = "invalid_utf8"
	FindingTag         = "tag"
	FindingZeroWidth   = "zero_width"
)

const (
	fANSI uint8 = 1 << iota
	fBidi
	fControl
	fInvalidUTF8
	fTag
	fZeroWidth
)

var findingNames = [...]string{FindingANSI, FindingBidi, FindingControl, FindingInvalidUTF8, FindingTag, FindingZeroWidth}

// DefaultPatterns are scanned for when none are configured: markers of instructions aimed at
// the model rather than the user, as published tool-poisoning examples use them.
//
//   - important: an <IMPORTANT> tag (Invariant Labs' tool-poisoning write-up)
//   - ignore_instructions: "ignore (all|any) (the) previous|prior|above|earlier instructions"
//   - system_tag: a <system> or </system> tag
//   - do_not_tell: "do not / don't / never tell|inform|notify|alert the user", "… mention this to the user"
//   - chat_template: chat-template control tokens (<|im_start|>, <|system|>, [INST], …)
var DefaultPatterns = []Pattern{
	{Name: "important", Re: regexp.MustCompile(`(?i)<\s*important\s*>`)},
	{Name: "ignore_instructions", Re: regexp.MustCompile(`(?i)ignore\s+(all\s+|any\s+)?(the\s+)?(previous|prior|above|earlier)\s+instructions`)},
	{Name: "system_tag", Re: regexp.MustCompile(`(?i)<\s*/?\s*system\s*>`)},
	{Name: "do_not_tell", Re: regexp.MustCompile(`(?i)\b(do\s+not|don'?t|never)\s+(tell|inform|notify|alert|mention\s+(this|it|that)\s+to)\s+the\s+user`)},
	{Name: "chat_template", Re: regexp.MustCompile(`<\|(im_start|im_end|system|user|assistant|endoftext|eot_id|start_header_id|end_header_id)\|>|\[/?INST\]`)},
}

// Scan is the hidden-content findings of one definition's strings (keys and values).
//
// Every string literal of raw, object keys included, at any depth, is decoded (JSON escapes
// too, so "\u200b" is a zero-width space and "\udb40\udc41" a tag character) and looked at rune
// by rune:
//
//   - "control": C0 controls but tab, line feed and carriage return (escaped \b and \f too), DEL,
//     C1 controls U+0080–U+009F;
//   - "ansi": an ANSI escape sequence introducer, ESC followed by '[' (CSI) or ']' (OSC), or the
//     8-bit CSI U+009B and OSC U+009D; it is reported instead of "control" for that ESC (an ESC
//     followed by anything else is a "control");
//   - "zero_width": every other Default_Ignorable_Code_Point (see ignorable.go: derived from
//     the Unicode data, not a hand list): zero-width spaces and joiners (U+200B–U+200D,
//     U+2060–U+2065, U+206A–U+206F, U+FEFF), soft hyphen U+00AD, combining grapheme joiner
//     U+034F, Hangul fillers (U+115F, U+1160, U+3164, U+FFA0), Khmer inherent vowels,
//     Mongolian selectors and vowel separator, variation selectors U+FE00–U+FE0F and
//     U+E0100–U+E01EF (used to smuggle bytes after an emoji, so an emoji with U+FE0F counts
//     too), shorthand format controls, musical beam and phrase controls U+1D173–U+1D17A, the
//     unassigned ignorables; plus the interlinear annotation characters U+FFF9–U+FFFB, which
//     hide or reveal text by renderer;
//   - "bidi": the Bidi_Control characters U+061C, U+200E, U+200F, U+202A–U+202E, U+2066–U+2069;
//   - "tag": U+E0000–U+E007F;
//   - "invalid_utf8": bytes that are not UTF-8, or an escaped lone surrogate.
//
// Each pattern is matched against each decoded string with the characters above removed (so
// that a zero-width space inside "<IMPORTANT>" hides nothing): "pattern:<name>". The result is
// sorted and unique, nil when there is nothing. Work is linear in len(raw) times the number of
// patterns (RE2; a literal prefilter spares most strings the regexp). raw need not be valid JSON: Scan reads every quoted string it finds and never
// fails.
func Scan(raw json.RawMessage, patterns []Pattern) []string {
	return scan(raw, patterns, prefiltersOf(patterns))
}

// scan is Scan with the patterns' prefilters (nil entries: none).
func scan(raw []byte, patterns []Pattern, pfs []*prefilter) []string {
	s := strScanner{pats: patterns, pfs: pfs}
	if len(patterns) > 0 {
		s.hit = make([]bool, len(patterns))
	}
	for i := 0; i < len(raw); {
		j := bytes.IndexByte(raw[i:], '"')
		if j < 0 {
			break
		}
		i = s.str(raw, i+j+1)
	}
	return s.findings()
}

type strScanner struct {
	bits  uint8
	esc   bool // the rune before was ESC
	pats  []Pattern
	pfs   []*prefilter
	hit   []bool
	nhit  int
	buf   []byte
	lower []byte // the visible text lower-cased, for the prefilters
}

// plain marks the bytes a string holds as they are and that need no look: printable ASCII
// but '"' and '\\'.
var plain = func() (t [256]bool) {
	for b := 0x20; b < 0x7f; b++ {
		t[b] = b != '"' && b != '\\'
	}
	return t
}()

// str scans the string whose contents start at raw[i] and returns the index after its closing
// quote (or len(raw)).
func (s *strScanner) str(raw []byte, i int) int {
	start := i
	clean := true // the visible text is raw[start:i]; else it is s.buf
	s.buf = s.buf[:0]
	s.esc = false
	for i < len(raw) {
		j := i
		for j < len(raw) && plain[raw[j]] {
			j++
		}
		if j > i {
			if s.esc {
				s.rune(rune(raw[i]))
			}
			if !clean {
				s.buf = append(s.buf, raw[i:j]...)
			}
			i = j
			if i >= len(raw) {
				break
			}
		}
		b := raw[i]
		if b == '"' {
			s.end(raw[start:i], clean)
			return i + 1
		}
		var r rune
		var n int
		escaped := b == '\\'
		switch {
		case escaped:
			r, n = unescape(raw, i)
		case b < utf8.RuneSelf:
			r, n = rune(b), 1
		default:
			r, n = utf8.DecodeRune(raw[i:])
			if r == utf8.RuneError && n == 1 {
				r = badRune
			}
		}
		keep := s.rune(r)
		if clean && (escaped || !keep) {
			s.buf = append(s.buf, raw[start:i]...)
			clean = false
		}
		if keep && !clean {
			s.buf = utf8.AppendRune(s.buf, r)
		}
		i += n
	}
	s.end(raw[start:i], clean)
	return i
}

const (
	badRune  rune = -1 // invalid UTF-8 or an escaped lone surrogate
	skipRune rune = -2 // a malformed escape: not JSON, nothing to report
)

// unescape decodes the escape at raw[i] == '\\' and says how many bytes it took.
func unescape(raw []byte, i int) (rune, int) {
	if i+1 >= len(raw) {
		return skipRune, len(raw) - i
	}
	switch c := raw[i+1]; c {
	case '"', '\\', '/':
		return rune(c), 2
	case 'b':
		return '\b', 2
	case 'f':
		return '\f', 2
	case 'n':
		return '\n', 2
	case 'r':
		return '\r', 2
	case 't':
		return '\t', 2
	case 'u':
		h, ok := hex4(raw, i+2)
		if !ok {
			return skipRune, 2
		}
		switch {
		case h >= 0xD800 && h <= 0xDBFF:
			if i+7 < len(raw) && raw[i+6] == '\\' && raw[i+7] == 'u' {
				if l, ok := hex4(raw, i+8); ok && l >= 0xDC00 && l <= 0xDFFF {
					return 0x10000 + (h-0xD800)<<10 + (l - 0xDC00), 12
				}
			}
			return badRune, 6
		case h >= 0xDC00 && h <= 0xDFFF:
			return badRune, 6
		}
		return h, 6
	default:
		return skipRune, 2
	}
}

func hex4(raw []byte, i int) (rune, bool) {
	if i > len(raw) {
		return 0, false
	}
	return mcp.Hex4(raw[i:])
}

// rune classifies one decoded rune; false when it is not visible text (left out of what the
// patterns read).
func (s *strScanner) rune(r rune) bool {
	if s.esc {
		s.esc = false
		if r == '[' || r == ']' {
			s.bits |= fANSI
			return true
		}
		s.bits |= fControl
	}
	switch {
	case r < 0:
		if r == badRune {
			s.bits |= fInvalidUTF8
		}
		return false
	case r < 0x20:
		switch r {
		case '\t', '\n', '\r':
			return true
		case 0x1b:
			s.esc = true
		default:
			s.bits |= fControl
		}
		return false
	case r < 0x7f:
		return true
	case r <= 0x9f:
		if r == 0x9b || r == 0x9d {
			s.bits |= fANSI
		} else {
			s.bits |= fControl
		}
		return false
	case r < 0x10000:
		if hiddenBMP[r>>6]&(1<<(r&63)) == 0 {
			return true
		}
	case !hidden(r):
		return true
	}
	s.bits |= hiddenClass(r)
	return false
}

// end finishes one string: an ESC at its end is a control; the patterns read its visible text.
func (s *strScanner) end(raw []byte, clean bool) {
	if s.esc {
		s.esc = false
		s.bits |= fControl
	}
	if s.nhit == len(s.pats) {
		return
	}
	text := s.buf
	if clean {
		text = raw
	}
	lowered := false
	for k, p := range s.pats {
		if s.hit[k] || p.Re == nil {
			continue
		}
		if k < len(s.pfs) && s.pfs[k] != nil && !s.pfs[k].may(text, &s.lower, &lowered) {
			continue
		}
		if p.Re.Match(text) {
			s.hit[k] = true
			s.nhit++
		}
	}
}

func (s *strScanner) findings() []string {
	var out []string
	for k, name := range findingNames {
		if s.bits&(1<<k) != 0 {
			out = append(out, name)
		}
	}
	for k, h := range s.hit {
		if h {
			out = append(out, "pattern:"+s.pats[k].Name)
		}
	}
	if len(out) == 0 {
		return nil
	}
	slices.Sort(out)
	return slices.Compact(out)
}
