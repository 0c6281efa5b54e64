package level2

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"

	"github.com/andybalholm/brotli"
)

func TestParseContentType(t *testing.T) {
	tests := []struct {
		ct      string
		mt      string
		json    bool
		sse     bool
		charset string
		foreign bool
	}{
		{"application/json", "application/json", true, false, "", false},
		{"application/json; charset=utf-8", "application/json", true, false, "utf-8", false},
		{"Application/JSON;Charset=\"UTF-8\"", "application/json", true, false, "utf-8", false},
		{"application/json;charset=utf8", "application/json", true, false, "utf8", false},
		{"application/json; charset=iso-8859-1", "application/json", true, false, "iso-8859-1", true},
		{"application/json; charset=utf-16", "application/json", true, false, "utf-16", true},
		{"application/vnd.api+json", "application/vnd.api+json", true, false, "", false},
		{"application/json-seq", "application/json-seq", false, false, "", false},
		{"application/jsonx", "application/jsonx", false, false, "", false},
		{"text/json", "text/json", false, false, "", false},
		{"text/event-stream", "text/event-stream", false, true, "", false},
		{"text/event-stream; charset=utf-8", "text/event-stream", false, true, "utf-8", false},
		{"text/plain", "text/plain", false, false, "", false},
		{"application/json; charset", "application/json", true, false, "", false}, // malformed parameter
		{"application/json; a=1; a=2", "application/json", true, false, "", false},
		{"", "", false, false, "", false},
		{"garbage", "garbage", false, false, "", false},
		{"a b/c", "", false, false, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.ct, func(t *testing.T) {
			c := ParseContentType(tt.ct)
			if c.MediaType != tt.mt || c.JSON != tt.json || c.SSE != tt.sse || c.Charset != tt.charset || c.ForeignCharset != tt.foreign {
				t.Fatalf("got %+v", c)
			}
		})
	}
	mt, params := ParseMediaType("application/json; charset=utf-8; profile=x")
	if mt != "application/json" || !reflect.DeepEqual(params, map[string]string{"charset": "utf-8", "profile": "x"}) {
		t.Fatalf("ParseMediaType = %q %v", mt, params)
	}
}

func gz(t testing.TB, b []byte) []byte {
	var buf bytes.Buffer
	w := gzip.NewWriter(&buf)
	w.Write(b)
	w.Close()
	return buf.Bytes()
}

func zl(b []byte) []byte {
	var buf bytes.Buffer
	w := zlib.NewWriter(&buf)
	w.Write(b)
	w.Close()
	return buf.Bytes()
}

func rawDeflate(b []byte) []byte {
	var buf bytes.Buffer
	w, _ := flate.NewWriter(&buf, flate.DefaultCompression)
	w.Write(b)
	w.Close()
	return buf.Bytes()
}

func br(b []byte) []byte {
	var buf bytes.Buffer
	w := brotli.NewWriter(&buf)
	w.Write(b)
	w.Close()
	return buf.Bytes()
}

func TestDecodeBody(t *testing.T) {
	plain := []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo"}}`)
	gzBody := gz(t, plain)
	tests := []struct {
		name     string
		encoding string
		body     []byte
		max      int64
		want     []byte
		err      error
	}{
		{"none", "", plain, 0, plain, nil},
		{"identity", "identity", plain, 0, plain, nil},
		{"gzip", "gzip", gzBody, 0, plain, nil},
		{"x-gzip upper case", " X-GZIP ", gzBody, 0, plain, nil},
		{"gzip multistream", "gzip", append(gz(t, plain[:10]), gz(t, plain[10:])...), 0, plain, nil},
		{"deflate zlib", "deflate", zl(plain), 0, plain, nil},
		{"deflate raw fallback", "deflate", rawDeflate(plain), 0, plain, nil},
		{"br", "br", br(plain), 0, plain, nil},
		{"stacked gzip, br", "gzip, br", br(gzBody), 0, plain, nil},
		{"stacked with identity", "identity, deflate ,gzip", gz(t, zl(plain)), 0, plain, nil},
		{"unknown", "compress", plain, 0, nil, ErrUnsupportedEncoding},
		{"zstd in a list", "gzip, zstd", plain, 0, nil, ErrUnsupportedEncoding},
		{"too many layers", "gzip,gzip,gzip,gzip,gzip", plain, 0, nil, ErrUnsupportedEncoding},
		{"identity over the bound", "", plain, 10, nil, ErrBodyTooLarge},
		{"gzip over the bound", "gzip", gzBody, int64(len(plain) - 1), nil, ErrBodyTooLarge},
		{"gzip at the bound", "gzip", gzBody, int64(len(plain)), plain, nil},
		{"truncated gzip", "gzip", gzBody[:len(gzBody)-6], 0, nil, io.ErrUnexpectedEOF},
		{"gzip trailing garbage", "gzip", append(bytes.Clone(gzBody), "junk"...), 0, nil, nil},
		{"gzip trailing non-gzip", "gzip", append(bytes.Clone(gzBody), "0123456789abcdef"...), 0, nil, gzip.ErrHeader},
		{"not gzip", "gzip", plain, 0, nil, gzip.ErrHeader},
		{"corrupt gzip checksum", "gzip", flipCRC(gzBody), 0, nil, gzip.ErrChecksum},
		{"deflate trailing garbage", "deflate", append(zl(plain), "junk"...), 0, nil, nil},
		{"not deflate", "deflate", []byte("\xff\xff\xff"), 0, nil, nil},
		{"not brotli", "br", plain, 0, nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := DecodeBody(tt.encoding, tt.body, tt.max)
			if tt.want == nil {
				if err == nil {
					t.Fatalf("no error, got %q", got)
				}
				if tt.err != nil && !errors.Is(err, tt.err) {
					t.Fatalf("err = %v, want %v", err, tt.err)
				}
				return
			}
			if err != nil || !bytes.Equal(got, tt.want) {
				t.Fatalf("got %q, %v", got, err)
			}
		})
	}
}

func flipCRC(b []byte) []byte {
	c := bytes.Clone(b)
	c[len(c)-8] ^= 0xff
	return c
}

func TestDecodeBodyUnsupportedMessage(t *testing.T) {
	_, err := DecodeBody("compress", nil, 0)
	if err == nil || err.Error() != "unsupported content-encoding compress" {
		t.Fatalf("err = %v", err)
	}
}

// A zip bomb stops at the bound: 64 MiB of zeros compress to about 64 KiB.
func TestDecodeBodyZipBomb(t *testing.T) {
	var buf bytes.Buffer
	w, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	zeros := make([]byte, 1<<20)
	for i := 0; i < 64; i++ {
		w.Write(zeros)
	}
	w.Close()
	for _, enc := range []string{"gzip", "gzip, gzip"} {
		body := buf.Bytes()
		if enc == "gzip, gzip" {
			body = gz(t, body)
		}
		_, err := DecodeBody(enc, body, 1<<20)
		if !errors.Is(err, ErrBodyTooLarge) {
			t.Fatalf("%s: err = %v", enc, err)
		}
		if !strings.Contains(err.Error(), "over 1048576 bytes") {
			t.Fatalf("unclear error: %v", err)
		}
	}
}

func TestEncodeBodyRoundTrip(t *testing.T) {
	plain := []byte(strings.Repeat(`{"jsonrpc":"2.0","id":1,"result":{}}`, 20))
	for _, enc := range []string{"", "identity", "gzip", "x-gzip", "deflate", "br", "gzip, br", "deflate, gzip"} {
		t.Run(enc, func(t *testing.T) {
			b, err := EncodeBody(enc, plain)
			if err != nil {
				t.Fatal(err)
			}
			got, err := DecodeBody(enc, b, 0)
			if err != nil || !bytes.Equal(got, plain) {
				t.Fatalf("round trip: %v", err)
			}
		})
	}
	if _, err := EncodeBody("zstd", plain); !errors.Is(err, ErrUnsupportedEncoding) {
		t.Fatalf("zstd: %v", err)
	}
}

// TestParseContentTypeFastPath: the two exact spellings parsed without the media-type parser
// read as the parser reads them.
func TestParseContentTypeFastPath(t *testing.T) {
	for _, ct := range []string{"application/json", "text/event-stream"} {
		fast := ParseContentType(ct)
		mt, params := ParseMediaType(ct)
		if fast.MediaType != mt || len(fast.Params) != len(params) || fast.Charset != "" || fast.ForeignCharset {
			t.Fatalf("%s: fast %+v, parser %q %v", ct, fast, mt, params)
		}
		slow := ParseContentType(ct + " ") // not the exact spelling: the parser's path
		if fast.JSON != slow.JSON || fast.SSE != slow.SSE || fast.MediaType != slow.MediaType {
			t.Fatalf("%s: fast %+v, parser path %+v", ct, fast, slow)
		}
	}
}
