package admin

import (
	"strconv"
	"testing"
	"unicode"
)

func TestSafe(t *testing.T) {
	for in, want := range map[string]string{
		"echo":             "echo",
		"with space":       "with space",
		"größe":            "größe",
		"a\u200bb":         `"a\u200bb"`,
		"\x1b[2J":          `"\x1b[2J"`,
		"rtl\u202eexe.txt": `"rtl\u202eexe.txt"`,
		"tag\U000E0041":    `"tag\U000e0041"`,
		"bad\xff":          `"bad\xff"`,
	} {
		if got := Printable(in); got != want {
			t.Errorf("Printable(%q) = %s, want %s", in, got, want)
		}
	}
}

// FuzzSafe: what Printable returns has no control, format or other non-printing character, and a
// quoted form unquotes to the input (nothing a server named is lost, only escaped).
func FuzzSafe(f *testing.F) {
	for _, s := range []string{"echo", "a\u200bb", "\x1b[31mred", "rtl\u202e", "tag\U000E0041", "bad\xff", "größe", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		out := Printable(s)
		for _, r := range out {
			if !unicode.IsPrint(r) || unicode.Is(unicode.Cf, r) {
				t.Fatalf("Printable(%q) = %q keeps %U", s, out, r)
			}
		}
		if out == s {
			return
		}
		back, err := strconv.Unquote(out)
		if err != nil || back != s {
			t.Fatalf("Printable(%q) = %s does not unquote to the input: %q %v", s, out, back, err)
		}
	})
}
