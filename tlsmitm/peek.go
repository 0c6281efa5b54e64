package tlsmitm

import (
	"errors"
	"fmt"
	"io"
	"slices"
)

// DefaultMaxHello is Peek's limit on bytes read when max <= 0. Real ClientHellos are a few
// hundred bytes to about 2 KiB (a post-quantum key share adds 1.2 KiB), and padded or
// ticket-heavy ones stay well under 20 KiB; 64 KiB leaves room for those while bounding what a
// client can make the appliance buffer before it has said anything meaningful.
const DefaultMaxHello = 64 << 10

const (
	recordHeaderLen     = 5
	recordTypeHandshake = 22
	// maxRecordLen is the largest record crypto/tls accepts before a version is negotiated
	// (2^14 plus 2048 for expansion): a stricter bound would refuse hellos upstreams accept.
	maxRecordLen = 1<<14 + 2048
	// handshakeHeaderLen is the handshake message's type byte and 24-bit length.
	handshakeHeaderLen = 4
)

// Peek reads TLS records from r until one complete ClientHello handshake message is assembled,
// and returns it with every byte read from r, so the caller can replay them byte-exact to the
// upstream or to crypto/tls. The hello may arrive in reads of any size and spread over several
// handshake records. Peek reads exactly the records that carry the hello and never beyond them;
// a record is read whole, so bytes after the hello in its last record are returned too (and
// ignored by the parse).
//
// max bounds the bytes read (DefaultMaxHello if max <= 0); reaching past it is an *Error of kind
// KindOversized, detected before the excess is read. When the first byte is not a handshake
// record type Peek returns after that single byte; when the record version's major byte is not 3
// it returns after the 5-byte header; both are KindNotTLS errors wrapping ErrNotTLS. Other
// content types between the records of an incomplete hello are KindMalformed. The returned bytes
// are valid on every path, errors included: a non-TLS connection can still be forwarded.
func Peek(r io.Reader, max int) (*ClientHello, []byte, error) {
	if max <= 0 {
		max = DefaultMaxHello
	}
	p := peeker{r: r, max: max, buf: make([]byte, 0, 2048)}
	h, err := p.run()
	return h, p.buf, err
}

type peeker struct {
	r   io.Reader
	max int
	buf []byte // every byte read from r
	hs  []byte // handshake payload assembled from the records
}

func (p *peeker) run() (*ClientHello, error) {
	if err := p.read(1); err != nil {
		return nil, err
	}
	if p.buf[0] != recordTypeHandshake {
		// An HTTP request or other protocol: decide on one byte so the caller can hand the
		// connection on having consumed as little as possible.
		return nil, &Error{Kind: KindNotTLS, Msg: fmt.Sprintf("first byte 0x%02x", p.buf[0]), Err: ErrNotTLS}
	}
	first := true
	for {
		start := len(p.buf)
		want := recordHeaderLen
		if first {
			start, want = 0, recordHeaderLen-1
		}
		if err := p.read(want); err != nil {
			return nil, err
		}
		hdr := p.buf[start : start+recordHeaderLen]
		typ, major, n := hdr[0], hdr[1], int(hdr[3])<<8|int(hdr[4])
		switch {
		case first && major != 3:
			return nil, &Error{Kind: KindNotTLS, Msg: fmt.Sprintf("record version 0x%02x%02x", hdr[1], hdr[2]), Err: ErrNotTLS}
		case typ != recordTypeHandshake:
			return nil, malformed(fmt.Sprintf("record of content type %d before the client hello was complete", typ))
		case major != 3:
			return nil, malformed(fmt.Sprintf("record version 0x%02x%02x", hdr[1], hdr[2]))
		case n == 0:
			// RFC 8446 5.1: zero-length handshake fragments are forbidden.
			return nil, malformed("empty handshake record")
		case n > maxRecordLen:
			return nil, malformed(fmt.Sprintf("record length %d exceeds %d", n, maxRecordLen))
		}
		first = false
		if err := p.read(n); err != nil {
			return nil, err
		}
		rec := p.buf[len(p.buf)-n : len(p.buf) : len(p.buf)]
		if len(p.hs) == 0 {
			// The usual hello fits one record: parse it in place. The capacity cap above makes a
			// later append copy instead of writing into buf's spare room.
			p.hs = rec
		} else {
			p.hs = append(p.hs, rec...)
		}

		if p.hs[0] != typeClientHello {
			return nil, malformed(fmt.Sprintf("handshake type %d, want client_hello (1)", p.hs[0]))
		}
		if len(p.hs) < handshakeHeaderLen {
			continue
		}
		total := handshakeHeaderLen + (int(p.hs[1])<<16 | int(p.hs[2])<<8 | int(p.hs[3]))
		if len(p.hs) >= total {
			return ParseClientHello(p.hs[:total])
		}
		// Refuse as soon as the declared length shows the hello cannot fit, rather than after
		// reading up to the limit; the headers of the records still to come only add to this.
		if missing := total - len(p.hs); len(p.buf)+missing > p.max {
			return nil, p.oversized(len(p.buf) + missing)
		}
	}
}

// read appends exactly n bytes from r to buf, refusing to go past max.
func (p *peeker) read(n int) error {
	if len(p.buf)+n > p.max {
		return p.oversized(len(p.buf) + n)
	}
	have := len(p.buf)
	p.buf = slices.Grow(p.buf, n)[:have+n]
	m, err := io.ReadFull(p.r, p.buf[have:])
	p.buf = p.buf[:have+m]
	switch {
	case err == nil:
		return nil
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		cause := io.ErrUnexpectedEOF
		if len(p.buf) == 0 {
			cause = io.EOF // nothing at all was sent: callers may treat this as a plain close
		}
		return &Error{Kind: KindTruncated, Msg: fmt.Sprintf("connection closed after %d bytes", len(p.buf)), Err: cause}
	default:
		return &Error{Kind: KindRead, Msg: fmt.Sprintf("after %d bytes", len(p.buf)), Err: err}
	}
}

func (p *peeker) oversized(need int) *Error {
	return &Error{Kind: KindOversized, Msg: fmt.Sprintf("client hello needs at least %d bytes, limit %d", need, p.max)}
}
