package integrity

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"
	"unicode/utf16"
)

// diReference is Default_Ignorable_Code_Point as DerivedCoreProperties.txt derives it, one code
// point at a time from Go's unicode tables (the scanner's table is built another way; the two
// are compared here, and both with the Unicode file when it is installed):
//
//	Other_Default_Ignorable_Code_Point + Cf + Variation_Selector − White_Space − FFF9..FFFB
//	− Egyptian hieroglyph format controls − Prepended_Concatenation_Mark
func diReference(r rune) bool {
	if !unicode.In(r, unicode.Other_Default_Ignorable_Code_Point, unicode.Cf, unicode.Variation_Selector) {
		return false
	}
	return !unicode.In(r, unicode.White_Space, unicode.Prepended_Concatenation_Mark) &&
		!(r >= 0xfff9 && r <= 0xfffb) && !(r >= 0x13430 && r <= 0x13440)
}

// wantHidden is the finding of one code point that is not visible text: "" for visible.
func wantHidden(r rune) string {
	switch {
	case r < 0x20 && r != '\t' && r != '\n' && r != '\r', r >= 0x7f && r <= 0x9f:
		if r == 0x9b || r == 0x9d {
			return FindingANSI
		}
		return FindingControl
	case unicode.Is(unicode.Bidi_Control, r):
		return FindingBidi
	case r >= 0xe0000 && r <= 0xe007f:
		return FindingTag
	case diReference(r), r >= 0xfff9 && r <= 0xfffb:
		// the interlinear annotation characters are not Default_Ignorable but hide text
		return FindingZeroWidth
	}
	return ""
}

// jsonEscape is r as a JSON \u escape (a surrogate pair past the BMP).
func jsonEscape(r rune) string {
	if r < 0x10000 {
		return fmt.Sprintf(`\u%04x`, r)
	}
	hi, lo := utf16.EncodeRune(r)
	return fmt.Sprintf(`\u%04x\u%04x`, hi, lo)
}

// scanRune is the findings of a description holding r between two letters, raw (UTF-8) and
// escaped; it fails the test when they differ.
func scanRune(t *testing.T, r rune, pats []Pattern) []string {
	t.Helper()
	esc := Scan(json.RawMessage(`{"description":"a`+jsonEscape(r)+`b"}`), pats)
	if r == '"' || r == '\\' {
		return esc // not valid unescaped
	}
	raw := Scan(json.RawMessage(`{"description":"a`+string(r)+`b"}`), pats)
	if !slices.Equal(raw, esc) {
		t.Errorf("U+%04X: raw %v, escaped %v", r, raw, esc)
	}
	return raw
}

// TestScanDefaultIgnorable (issue 29, item 12): every Default_Ignorable_Code_Point is flagged
// (bidi controls as "bidi", tag characters as "tag", every other one as "zero_width"), and the
// interlinear annotation characters too; every other code point from U+0020 on but DEL and C1
// is visible text, raw and escaped.
func TestScanDefaultIgnorable(t *testing.T) {
	var ref []rune
	for r := rune(0); r <= unicode.MaxRune; r++ {
		if diReference(r) {
			ref = append(ref, r)
		}
	}
	if !slices.Equal(defaultIgnorables, ref) {
		t.Errorf("the scanner's table has %d code points, the reference derivation %d", len(defaultIgnorables), len(ref))
	}
	var di, missed, wrong []string
	for r := rune(0x20); r <= unicode.MaxRune; r++ {
		if r >= 0xd800 && r <= 0xdfff {
			continue // not scalar values: invalid_utf8, tested elsewhere
		}
		want := wantHidden(r)
		if diReference(r) {
			di = append(di, fmt.Sprintf("U+%04X", r))
		}
		got := scanRune(t, r, nil)
		switch {
		case want == "" && got != nil:
			wrong = append(wrong, fmt.Sprintf("U+%04X %v", r, got))
		case want != "" && !slices.Equal(got, []string{want}):
			missed = append(missed, fmt.Sprintf("U+%04X %v (want %s)", r, got, want))
		}
	}
	t.Logf("%d Default_Ignorable_Code_Points (Unicode %s)", len(di), unicode.Version)
	if len(di) < 4000 {
		t.Errorf("only %d Default_Ignorable_Code_Points derived", len(di))
	}
	if len(missed) > 0 {
		t.Errorf("%d hidden code points not flagged as they should be, e.g. %s", len(missed), sample(missed))
	}
	if len(wrong) > 0 {
		t.Errorf("%d visible code points flagged, e.g. %s", len(wrong), sample(wrong))
	}
}

func sample(s []string) string {
	if len(s) > 40 {
		return strings.Join(s[:40], ", ") + ", …"
	}
	return strings.Join(s, ", ")
}

// TestScanIgnorableExamples: the code points issue 29 names, each alone and hiding a pattern.
func TestScanIgnorableExamples(t *testing.T) {
	cases := []struct {
		name string
		r    rune
		want string // "" visible
	}{
		{"soft hyphen", 0x00ad, FindingZeroWidth},
		{"combining grapheme joiner", 0x034f, FindingZeroWidth},
		{"hangul choseong filler", 0x115f, FindingZeroWidth},
		{"hangul jungseong filler", 0x1160, FindingZeroWidth},
		{"khmer vowel inherent aq", 0x17b4, FindingZeroWidth},
		{"mongolian free variation selector one", 0x180b, FindingZeroWidth},
		{"invisible separator", 0x2063, FindingZeroWidth},
		{"reserved 2065", 0x2065, FindingZeroWidth},
		{"nominal digit shapes", 0x206f, FindingZeroWidth},
		{"hangul filler", 0x3164, FindingZeroWidth},
		{"variation selector 1", 0xfe00, FindingZeroWidth},
		{"variation selector 16", 0xfe0f, FindingZeroWidth},
		{"halfwidth hangul filler", 0xffa0, FindingZeroWidth},
		{"reserved fff0", 0xfff0, FindingZeroWidth},
		{"interlinear annotation anchor", 0xfff9, FindingZeroWidth},
		{"interlinear annotation separator", 0xfffa, FindingZeroWidth},
		{"interlinear annotation terminator", 0xfffb, FindingZeroWidth},
		{"shorthand format letter overlap", 0x1bca0, FindingZeroWidth},
		{"musical symbol begin beam", 0x1d173, FindingZeroWidth},
		{"musical symbol end phrase", 0x1d17a, FindingZeroWidth},
		{"reserved e0080", 0xe0080, FindingZeroWidth},
		{"variation selector 256", 0xe01ef, FindingZeroWidth},
		{"reserved e0fff", 0xe0fff, FindingZeroWidth},
		{"language tag", 0xe0001, FindingTag},
		{"arabic letter mark", 0x061c, FindingBidi},
		{"zero width space", 0x200b, FindingZeroWidth},
		// visible: white space, prepended concatenation marks, Egyptian format controls
		{"no-break space", 0x00a0, ""},
		{"ideographic space", 0x3000, ""},
		{"arabic number sign", 0x0600, ""},
		{"syriac abbreviation mark", 0x070f, ""},
		{"egyptian hieroglyph vertical joiner", 0x13430, ""},
		{"replacement character", 0xfffd, ""},
		{"hangul syllable", 0xd55c, ""},
		{"emoji", 0x1f600, ""},
		{"first past the tag block", 0xe1000, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var want []string
			if c.want != "" {
				want = []string{c.want}
			}
			if got := scanRune(t, c.r, DefaultPatterns); !slices.Equal(got, want) {
				t.Errorf("U+%04X: %v, want %v", c.r, got, want)
			}
			// a hidden character inside a marker hides nothing from the patterns
			raw := `{"description":"<IMPOR` + string(c.r) + `TANT>"}`
			got := Scan(json.RawMessage(raw), DefaultPatterns)
			if want := []string{"pattern:important", c.want}; c.want != "" && !slices.Equal(got, slices.Sorted(slices.Values(want))) {
				t.Errorf("U+%04X in <IMPORTANT>: %v", c.r, got)
			}
		})
	}
}

// unicodeDataFile is DerivedCoreProperties.txt when installed (Debian: apt-get install
// unicode-data); MCPI_UNICODE_DATA names another copy.
func unicodeDataFile() string {
	if p := os.Getenv("MCPI_UNICODE_DATA"); p != "" {
		return p
	}
	return "/usr/share/unicode/DerivedCoreProperties.txt"
}

// TestDefaultIgnorableUnicodeData compares the derivation with Unicode's own list of
// Default_Ignorable_Code_Point, when the file is installed and of Go's Unicode version, and
// checks that Scan flags every code point it lists.
func TestDefaultIgnorableUnicodeData(t *testing.T) {
	path := unicodeDataFile()
	f, err := os.Open(path)
	if err != nil {
		t.Skipf("no %s (apt-get install unicode-data): %v", path, err)
	}
	defer f.Close()
	file := map[rune]bool{}
	version := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if version == "" && strings.HasPrefix(line, "# DerivedCoreProperties-") {
			version = strings.TrimSuffix(strings.TrimPrefix(line, "# DerivedCoreProperties-"), ".txt")
		}
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		cp, prop, ok := strings.Cut(line, ";")
		if !ok || strings.TrimSpace(prop) != "Default_Ignorable_Code_Point" {
			continue
		}
		lo, hi, isRange := strings.Cut(strings.TrimSpace(cp), "..")
		if !isRange {
			hi = lo
		}
		l, err1 := strconv.ParseUint(lo, 16, 32)
		h, err2 := strconv.ParseUint(hi, 16, 32)
		if err1 != nil || err2 != nil || l > h {
			t.Fatalf("%s: bad line %q", path, sc.Text())
		}
		for r := rune(l); r <= rune(h); r++ {
			file[r] = true
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if version != unicode.Version {
		t.Skipf("%s is Unicode %q, Go's tables %s", path, version, unicode.Version)
	}
	if len(file) < 4000 {
		t.Fatalf("%s: only %d Default_Ignorable_Code_Points", path, len(file))
	}
	var diff, missed []string
	for r := rune(0); r <= unicode.MaxRune; r++ {
		if file[r] != diReference(r) {
			diff = append(diff, fmt.Sprintf("U+%04X file %v derived %v", r, file[r], diReference(r)))
		}
		if file[r] && scanRune(t, r, nil) == nil {
			missed = append(missed, fmt.Sprintf("U+%04X", r))
		}
	}
	t.Logf("%s (Unicode %s): %d code points", path, version, len(file))
	if len(diff) > 0 {
		t.Errorf("the derivation differs from %s at %d code points: %s", path, len(diff), sample(diff))
	}
	if len(missed) > 0 {
		t.Errorf("%d Default_Ignorable_Code_Points of %s not flagged: %s", len(missed), path, sample(missed))
	}
}
