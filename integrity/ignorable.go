package integrity

import (
	"slices"
	"unicode"
)

// The code points the scanner flags past ASCII and the C1 controls: every
// Default_Ignorable_Code_Point (Unicode's "render as nothing when not supported" property: the
// characters a user's screen does not show, so they can hide text from the person who reviews a
// definition while the model still reads them), and the interlinear annotation characters.
//
// Go's unicode package has no Default_Ignorable_Code_Point table, but it has every input of the
// property as DerivedCoreProperties.txt derives it, so the set is derived from them here, once,
// and follows Go's Unicode version rather than a hand list:
//
//	Other_Default_Ignorable_Code_Point + Cf + Variation_Selector
//	− White_Space − FFF9..FFFB − Egyptian hieroglyph format controls − Prepended_Concatenation_Mark
//
// FFF9..FFFB (interlinear annotation anchor, separator, terminator) are left out of the property
// because a renderer that supports them shows the annotation; one that does not shows the text
// between them as if they were absent, or drops the annotation: either way the reader and the
// model may see different text, so they are flagged too. The Egyptian format controls and the
// prepended concatenation marks are visible (they shape visible glyphs) and are not flagged.
//
// The test compares the derivation with DerivedCoreProperties.txt when it is installed.

// defaultIgnorables is every Default_Ignorable_Code_Point, sorted.
var defaultIgnorables = deriveDefaultIgnorables()

func deriveDefaultIgnorables() []rune {
	var out []rune
	for _, t := range []*unicode.RangeTable{unicode.Other_Default_Ignorable_Code_Point, unicode.Cf, unicode.Variation_Selector} {
		eachRune(t, func(r rune) {
			if unicode.In(r, unicode.White_Space, unicode.Prepended_Concatenation_Mark) ||
				interlinear(r) || egyptianFormat(r) {
				return
			}
			out = append(out, r)
		})
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// interlinear: U+FFF9..FFFB, the interlinear annotation characters.
func interlinear(r rune) bool { return r >= 0xfff9 && r <= 0xfffb }

// egyptianFormat: the Egyptian hieroglyph format controls as DerivedCoreProperties.txt excludes
// them (13430..13440 in Unicode 15.0, 13430..1343F later; U+13440 is not Cf in either).
func egyptianFormat(r rune) bool { return r >= 0x13430 && r <= 0x13440 }

// eachRune calls f for every code point of t.
func eachRune(t *unicode.RangeTable, f func(rune)) {
	for _, rg := range t.R16 {
		for r := rune(rg.Lo); r <= rune(rg.Hi); r += rune(rg.Stride) {
			f(r)
		}
	}
	for _, rg := range t.R32 {
		for r := rune(rg.Lo); r <= rune(rg.Hi); r += rune(rg.Stride) {
			f(r)
		}
	}
}

// hiddenBMP has a bit set for each flagged code point below U+10000; hiddenAstral holds the
// flagged code points past it as sorted ranges (a handful: U+1BCA0.., U+1D173.., U+E0000..).
// A rune of visible text costs one bit test (or, past the BMP, a comparison or a few).
var (
	hiddenBMP    [0x10000 / 64]uint64
	hiddenAstral []runeRange
)

type runeRange struct{ lo, hi rune }

func init() {
	mark := func(r rune) {
		if r < 0x10000 {
			hiddenBMP[r>>6] |= 1 << (r & 63)
			return
		}
		if n := len(hiddenAstral); n > 0 && hiddenAstral[n-1].hi == r-1 {
			hiddenAstral[n-1].hi = r
			return
		}
		hiddenAstral = append(hiddenAstral, runeRange{r, r})
	}
	for _, r := range defaultIgnorables {
		mark(r)
	}
	for r := rune(0xfff9); r <= 0xfffb; r++ {
		mark(r)
	}
}

// hidden reports a flagged code point (of those past U+009F).
func hidden(r rune) bool {
	if r < 0x10000 {
		return hiddenBMP[r>>6]&(1<<(r&63)) != 0
	}
	for _, h := range hiddenAstral {
		if r < h.lo {
			return false
		}
		if r <= h.hi {
			return true
		}
	}
	return false
}

// hiddenClass is the finding bit of a flagged code point: the bidi controls (Bidi_Control)
// "bidi", the tag characters "tag", every other one "zero_width".
func hiddenClass(r rune) uint8 {
	switch {
	case r >= 0xe0000 && r <= 0xe007f:
		return fTag
	case unicode.Is(unicode.Bidi_Control, r):
		return fBidi
	}
	return fZeroWidth
}
