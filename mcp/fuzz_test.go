package mcp

import (
	"encoding/base64"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

func FuzzDecodeHeaderValue(f *testing.F) {
	for _, s := range []string{"get_weather", "=?base64?5aSp5rCX?=", "=?base64?PT9iYXNlNjQ/bGl0ZXJhbD89?=", "=?base64?eA?=", "=?base64??=", "=?base64?/w==?=", "=?base64?***?="} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		dec, err := DecodeHeaderValue(v)
		encoded := strings.HasPrefix(v, b64Prefix) && strings.HasSuffix(v, b64Suffix) && len(v) >= len(b64Prefix)+len(b64Suffix)
		switch {
		case !encoded:
			if err != nil || dec != v {
				t.Fatalf("plain value %q became %q, %v", v, dec, err)
			}
		case err != nil:
			var he *HeaderValueError
			if !errors.As(err, &he) || dec != "" {
				t.Fatalf("error %v (%T), value %q", err, err, dec)
			}
		default:
			if !utf8.ValidString(dec) {
				t.Fatalf("decoded %q is not utf-8", dec)
			}
			// Decoding is exact: encoding the result again gives the input back.
			inner := v[len(b64Prefix) : len(v)-len(b64Suffix)]
			if again := base64.StdEncoding.EncodeToString([]byte(dec)); strings.TrimRight(again, "=") != strings.TrimRight(inner, "=") {
				t.Fatalf("%q decoded to %q, which encodes to %q", v, dec, again)
			}
		}
	})
}

// FuzzRedactURI: whatever a name holds, what RedactURI leaves has no query, fragment or userinfo
// in a URI, and non-URI names are untouched.
func FuzzRedactURI(f *testing.F) {
	for _, s := range []string{
		"https://user:pass@host/x?X-Amz-Signature=abc&access_token=def#frag", "get_weather", "mailto:a@b",
		"s3://bucket/key?x=1", "https://u:p/w@h/x", "a:", "file:///a b#c", "x://@", "HTTP://[::1]:80/?#@",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := RedactURI(s)
		if schemeEnd(s) < 0 {
			if got != s {
				t.Fatalf("non-URI %q changed to %q", s, got)
			}
			return
		}
		if strings.ContainsAny(got, "?#") {
			t.Fatalf("RedactURI(%q) = %q keeps a query or fragment", s, got)
		}
		if !strings.HasPrefix(s, got[:schemeEnd(got)+1]) || len(got) > len(s) {
			t.Fatalf("RedactURI(%q) = %q is not a cut of its input", s, got)
		}
		if rest := got[schemeEnd(got)+1:]; strings.HasPrefix(rest, "//") {
			auth := rest[2:]
			if i := strings.IndexByte(auth, '/'); i >= 0 {
				auth = auth[:i]
			}
			if strings.Contains(auth, "@") {
				t.Fatalf("RedactURI(%q) = %q keeps userinfo", s, got)
			}
		}
		if again := RedactURI(got); again != got {
			t.Fatalf("not idempotent: %q → %q → %q", s, got, again)
		}
	})
}
