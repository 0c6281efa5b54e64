package level1

import (
	"bytes"
	"encoding/base64"
	"errors"
	"slices"
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
			var me *MalformedError
			if !errors.As(err, &me) || dec != "" {
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

// FuzzGuards: the checks the Classifier runs on every head take any head the framing accepts, and
// never let h2c, or a protocol nobody asked for, through.
func FuzzGuards(f *testing.F) {
	for _, s := range []string{
		"GET / HTTP/1.1\r\nHost: a\r\n\r\n",
		"GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket, h2c\r\n\r\n",
		"GET /mcp HTTP/1.1\r\nHost: x\r\nHTTP2-Settings: AAMAAABk\r\n\r\n",
		"CONNECT x:443 HTTP/1.1\r\nHost: x:443\r\n\r\n",
		"POST /mcp HTTP/1.1\r\nHost: [::1]:8080\r\nContent-Type: application/vnd.x+json\r\nMcp-Method: a\r\nMcp-Method: b\r\nMCP-Protocol-Version: 2025-11-25\r\nContent-Length: 0\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r := NewReader(bytes.NewReader(data), Limits{MaxHeaderBytes: 2048, MaxHeaders: 16, MaxChunkLine: 128})
		h, err := r.ReadRequestHead()
		if err != nil {
			return
		}
		info := Classify(h)
		protos, asked := h.UpgradeProtocols()
		if _, ok := upgradeVerdict(protos, []string{"websocket"}); ok && (slices.Contains(protos, "h2c") || !asked && len(protos) > 0) {
			t.Fatalf("protocols %q allowed", protos)
		}
		hostVerdict(h, "x")
		strictVerdict(h, info)
	})
}
