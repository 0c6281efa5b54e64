package httptok

import (
	"slices"
	"strings"
	"testing"
)

func TestEqualFold(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want bool
	}{
		{"Content-Length", "content-length", true},
		{"HOST", "host", true},
		{"host", "hosts", false},
		{"\u017f", "s", false}, // ASCII only: U+017F is not S
		{"\u212a", "k", false}, // nor is the Kelvin sign
		{"a-b", "a_b", false},
	} {
		if got := EqualFold(tc.a, tc.b); got != tc.want {
			t.Errorf("EqualFold(%q, %q) = %v", tc.a, tc.b, got)
		}
	}
}

func TestForEachToken(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{"close", []string{"close"}},
		{" keep-alive ,\tUpgrade\t", []string{"keep-alive", "Upgrade"}},
		{",,a,, ,b,", []string{"a", "b"}},
		{"a\u00a0", []string{"a\u00a0"}}, // OWS is space and tab only
		{"", nil},
	} {
		var got []string
		ForEachToken(tc.in, func(s string) { got = append(got, s) })
		if !slices.Equal(got, tc.want) {
			t.Errorf("ForEachToken(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func FuzzForEachToken(f *testing.F) {
	for _, s := range []string{"a, b", " ,\t,", "chunked ,gzip", "x\u00a0,y"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		var got []string
		ForEachToken(v, func(s string) { got = append(got, s) })
		var want []string
		for _, p := range strings.Split(v, ",") {
			if p = strings.Trim(p, " \t"); p != "" {
				want = append(want, p)
			}
		}
		if !slices.Equal(got, want) {
			t.Fatalf("ForEachToken(%q) = %q, split and trim give %q", v, got, want)
		}
	})
}
