package admin

import (
	"strconv"
	"unicode"
)

// Printable keeps what a server named from reaching the operator's terminal as it is: a string
// with a control, format (zero-width, bidi, tag) or other non-printing character is returned
// quoted with escapes. Definitions are exactly where hidden characters are planted.
func Printable(s string) string {
	for _, r := range s {
		if r == unicode.ReplacementChar || !unicode.IsPrint(r) || unicode.Is(unicode.Cf, r) {
			return strconv.QuoteToASCII(s)
		}
	}
	return s
}
