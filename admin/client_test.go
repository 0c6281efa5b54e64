package admin

import (
	"strings"
	"testing"
)

// FuzzAdminURL: an --admin value is refused or normalised to an http(s) URL without a trailing
// slash, query or fragment, which normalises to itself.
func FuzzAdminURL(f *testing.F) {
	for _, s := range []string{"http://127.0.0.1:9464", "127.0.0.1:9464", "https://[::1]:9464/", "ftp://x", "http://", "a b", "http://h/p?q#f"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		u, err := NormalizeURL(s)
		if err != nil {
			return
		}
		if !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") || strings.HasSuffix(u, "/") || strings.ContainsAny(u, "?#") {
			t.Fatalf("NormalizeURL(%q) = %q", s, u)
		}
		again, err := NormalizeURL(u)
		if err != nil || again != u {
			t.Fatalf("NormalizeURL(%q) = %q, then %q %v", s, u, again, err)
		}
	})
}
