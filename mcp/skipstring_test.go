package mcp

import (
	"encoding/json"
	"testing"
)

// skipStringReference is the byte-by-byte skip that SkipString replaced; the fuzz test holds the
// vectorised one to it on every string encoding/json writes.
func skipStringReference(b []byte, i int) int {
	for i++; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return len(b)
}

func FuzzSkipString(f *testing.F) {
	for _, s := range []string{"", `a"b`, `\`, `\\`, `\\\"`, "tab\there", `"\u2028<>&`, "\xff", `end\`} {
		f.Add(s, ",1]")
	}
	f.Fuzz(func(t *testing.T, s, tail string) {
		enc, err := json.Marshal(s)
		if err != nil {
			t.Skip()
		}
		b := append([]byte("x"), enc...)
		b = append(b, tail...)
		if got, want := SkipString(b, 1), skipStringReference(b, 1); got != want || got != 1+len(enc) {
			t.Fatalf("SkipString(%q) = %d, reference %d, string ends at %d", b, got, want, 1+len(enc))
		}
	})
}
