package level2

import (
	"bytes"
	"errors"
	"testing"
)

var fuzzEncodings = []string{"", "gzip", "deflate", "br", "gzip, br", "x-gzip, deflate", "identity", "zstd"}

// FuzzDecodeBody: decoding arbitrary bytes under any coding never panics and never passes the
// bound; encoding then decoding gives the input back.
func FuzzDecodeBody(f *testing.F) {
	plain := []byte(`{"jsonrpc":"2.0","id":1,"result":{}}`)
	f.Add(uint8(0), plain)
	f.Add(uint8(1), gz(f, plain))
	f.Add(uint8(2), zl(plain))
	f.Add(uint8(2), rawDeflate(plain))
	f.Add(uint8(3), br(plain))
	f.Add(uint8(4), br(gz(f, plain)))
	f.Fuzz(func(t *testing.T, sel uint8, body []byte) {
		enc := fuzzEncodings[int(sel)%len(fuzzEncodings)]
		const max = 1 << 16
		out, err := DecodeBody(enc, body, max)
		if err == nil && len(out) > max {
			t.Fatalf("%s: %d bytes past the bound", enc, len(out))
		}
		if enc == "zstd" && !errors.Is(err, ErrUnsupportedEncoding) {
			t.Fatalf("zstd: %v", err)
		}
		if len(body) > max {
			return
		}
		packed, err := EncodeBody(enc, body)
		if enc == "zstd" {
			return
		}
		if err != nil {
			t.Fatalf("EncodeBody(%s): %v", enc, err)
		}
		back, err := DecodeBody(enc, packed, max)
		if err != nil || !bytes.Equal(back, body) {
			t.Fatalf("%s round trip: %v", enc, err)
		}
	})
}
