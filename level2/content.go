package level2

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"errors"
	"fmt"
	"io"
	"mime"
	"strings"

	"github.com/andybalholm/brotli"
)

// DefaultMaxBody bounds a decoded body when DecodeBody is given 0 or less.
const DefaultMaxBody = 4 << 20

// maxEncodings bounds a stacked Content-Encoding ("gzip, gzip, gzip, …" multiplies work).
const maxEncodings = 4

// ErrUnsupportedEncoding is a content coding Level 2 cannot decode (compress, zstd, …). A Level 2
// route refuses such a body rather than forwarding what it could not read.
var ErrUnsupportedEncoding = errors.New("unsupported content-encoding")

// ErrBodyTooLarge is a body whose decoded size passes the bound (a zip bomb stops there).
var ErrBodyTooLarge = errors.New("decoded body too large")

// ParseMediaType parses a Content-Type as mime.ParseMediaType does, but never fails: the media
// type comes back lower-cased ("" when there is none); params is nil when the parameters are
// malformed, so a bad parameter does not hide a JSON type.
func ParseMediaType(ct string) (mediatype string, params map[string]string) {
	// Peers trim more than ASCII space around a header value (a Latin-1 NBSP byte, Unicode
	// spaces): so does Level 2, before it parses.
	ct = trimHeaderSpace(ct)
	mt, p, err := mime.ParseMediaType(ct)
	if err == nil {
		return mt, p
	}
	if errors.Is(err, mime.ErrInvalidMediaParameter) && mt != "" {
		return mt, nil
	}
	// Malformed type: keep what precedes ';' when it looks like type/subtype.
	t := strings.ToLower(strings.TrimSpace(strings.SplitN(ct, ";", 2)[0]))
	if i := strings.IndexByte(t, '/'); i > 0 && i < len(t)-1 && !strings.ContainsAny(t, " \t\"") {
		return t, nil
	}
	return "", nil
}

// ContentType is what Level 2 needs to know about a Content-Type header.
type ContentType struct {
	MediaType string            // lower-cased type/subtype, "" when absent or unreadable
	Params    map[string]string // keys lower-cased
	JSON      bool              // application/json or any type with the +json suffix
	SSE       bool              // text/event-stream
	Charset   string            // the charset parameter, lower-cased; "" when absent
	// ForeignCharset is a charset other than UTF-8: JSON exchanged between systems must be
	// UTF-8 (RFC 8259 §8.1), and a peer that decodes another charset reads other text than
	// Level 2 judged, so such a body is refused rather than inspected.
	ForeignCharset bool
}

// ParseContentType classifies a Content-Type header value. It is informative only: a body that
// parses as JSON-RPC is inspected whatever its type says, so a lenient server is no bypass.
func ParseContentType(ct string) ContentType {
	// The types almost every MCP message carries, spelt exactly, parse to themselves: no
	// parameters, no spaces, lower case.
	switch ct {
	case "application/json":
		return ContentType{MediaType: ct, JSON: true}
	case "text/event-stream":
		return ContentType{MediaType: ct, SSE: true}
	}
	mt, params := ParseMediaType(ct)
	c := ContentType{MediaType: mt, Params: params}
	if sub, ok := strings.CutPrefix(mt, "application/"); ok && sub == "json" {
		c.JSON = true
	} else if i := strings.IndexByte(mt, '/'); i > 0 && strings.HasSuffix(mt[i+1:], "+json") {
		c.JSON = true
	}
	c.SSE = mt == "text/event-stream"
	if cs, ok := params["charset"]; ok {
		c.Charset = strings.ToLower(strings.Trim(cs, " \t"))
		c.ForeignCharset = c.Charset != "utf-8" && c.Charset != "utf8"
	}
	return c
}

// encodings parses a Content-Encoding value into codings in the order they were applied,
// identity left out; an unknown coding is ErrUnsupportedEncoding.
func encodings(header string) ([]string, error) {
	var out []string
	for _, tok := range strings.Split(header, ",") {
		tok = strings.ToLower(strings.Trim(tok, " \t"))
		switch tok {
		case "", "identity":
			continue
		case "x-gzip":
			tok = "gzip"
		case "gzip", "deflate", "br":
		default:
			return nil, fmt.Errorf("%w %s", ErrUnsupportedEncoding, tok)
		}
		out = append(out, tok)
	}
	if len(out) > maxEncodings {
		return nil, fmt.Errorf("%w: %d stacked codings, at most %d", ErrUnsupportedEncoding, len(out), maxEncodings)
	}
	return out, nil
}

// DecodeBody undoes a Content-Encoding (a comma-separated list, decoded last-applied first):
// identity, gzip and x-gzip, deflate (zlib-wrapped as RFC 9110 says, with raw deflate as the
// fallback browsers use), br. The decoded body, and each intermediate layer, is bounded by max
// bytes (DefaultMaxBody when 0 or less); past it the result is ErrBodyTooLarge. Data after the
// end of a gzip or deflate stream is an error: it would be bytes that one peer sees and another
// not. With no coding the body is returned as is.
func DecodeBody(encoding string, body []byte, max int64) ([]byte, error) {
	if max <= 0 {
		max = DefaultMaxBody
	}
	codings, err := encodings(encoding)
	if err != nil {
		return nil, err
	}
	if len(codings) == 0 && int64(len(body)) > max {
		return nil, fmt.Errorf("%w: over %d bytes", ErrBodyTooLarge, max)
	}
	for i := len(codings) - 1; i >= 0; i-- {
		if body, err = decodeOne(codings[i], body, max); err != nil {
			return nil, fmt.Errorf("content-encoding %s: %w", codings[i], err)
		}
	}
	return body, nil
}

func decodeOne(coding string, in []byte, max int64) ([]byte, error) {
	src := bytes.NewReader(in)
	switch coding {
	case "gzip":
		// Multistream (the default) reads concatenated members as one body, as RFC 1952 and
		// curl do, and makes trailing garbage an error (it is read as a bad next header).
		zr, err := gzip.NewReader(src)
		if err != nil {
			return nil, err
		}
		return readBounded(zr, max)
	case "deflate":
		var zerr error
		if zlibHeader(in) {
			zr, err := zlib.NewReader(src)
			if err == nil {
				out, err := readBounded(zr, max)
				if err == nil || errors.Is(err, ErrBodyTooLarge) {
					return out, trailing(src, err)
				}
			}
			zerr = err
			src.Reset(in)
		}
		out, err := readBounded(flate.NewReader(src), max)
		if err != nil && zerr != nil {
			return nil, zerr // it looked like zlib: that error says more
		}
		return out, trailing(src, err)
	case "br":
		return readBounded(brotli.NewReader(src), max)
	}
	return nil, fmt.Errorf("%w %s", ErrUnsupportedEncoding, coding)
}

// zlibHeader reports a valid RFC 1950 header: deflate method and a header checksum.
func zlibHeader(b []byte) bool {
	return len(b) >= 2 && b[0]&0x0f == 8 && b[0]>>4 <= 7 && (uint16(b[0])<<8|uint16(b[1]))%31 == 0
}

// trailing turns unread input after a finished stream into an error. flate and zlib read a
// bytes.Reader byte-wise (it is an io.ByteReader), so nothing past the stream was consumed.
func trailing(src *bytes.Reader, err error) error {
	if err == nil && src.Len() > 0 {
		return fmt.Errorf("%d bytes after the end of the compressed stream", src.Len())
	}
	return err
}

func readBounded(r io.Reader, max int64) ([]byte, error) {
	out, err := io.ReadAll(io.LimitReader(r, max+1))
	if int64(len(out)) > max {
		return nil, fmt.Errorf("%w: over %d bytes", ErrBodyTooLarge, max)
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}

// EncodeBody applies a Content-Encoding list in order (the inverse of DecodeBody), for a body
// that was changed and goes on with the headers it had.
func EncodeBody(encoding string, plain []byte) ([]byte, error) {
	codings, err := encodings(encoding)
	if err != nil {
		return nil, err
	}
	body := plain
	for _, c := range codings {
		var b bytes.Buffer
		var w io.WriteCloser
		switch c {
		case "gzip":
			w = gzip.NewWriter(&b)
		case "deflate":
			w = zlib.NewWriter(&b)
		case "br":
			w = brotli.NewWriterLevel(&b, 5)
		}
		if _, err := w.Write(body); err != nil {
			return nil, fmt.Errorf("content-encoding %s: %w", c, err)
		}
		if err := w.Close(); err != nil {
			return nil, fmt.Errorf("content-encoding %s: %w", c, err)
		}
		body = b.Bytes()
	}
	return body, nil
}

// trimHeaderSpace strips lenientSpace runes and the Latin-1 bytes NBSP (0xA0) and NEL (0x85),
// which a peer reading header bytes as Latin-1 takes for spaces, from both ends of v.
func trimHeaderSpace(v string) string {
	for {
		n := len(v)
		v = strings.TrimFunc(v, lenientSpace)
		for len(v) > 0 && (v[0] == 0xa0 || v[0] == 0x85) {
			v = v[1:]
		}
		for len(v) > 0 && (v[len(v)-1] == 0xa0 || v[len(v)-1] == 0x85) {
			v = v[:len(v)-1]
		}
		if len(v) == n {
			return v
		}
	}
}

func isIdentity(ce string) bool {
	ce = strings.TrimSpace(ce)
	return ce == "" || strings.EqualFold(ce, "identity")
}
