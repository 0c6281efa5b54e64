package tlsmitm

import "errors"

// ErrNotTLS reports that a connection does not start with a TLS handshake record. Peek wraps it
// in an *Error of kind KindNotTLS, so errors.Is and errors.As both work.
var ErrNotTLS = errors.New("not a TLS handshake")

// Error kinds. They are stable strings: the engine logs them and tests match on them.
const (
	KindNotTLS    = "not-tls"   // the first record is not a TLS handshake record; Err is ErrNotTLS
	KindTruncated = "truncated" // the peer closed before the hello was complete; Err is io.EOF or io.ErrUnexpectedEOF
	KindOversized = "oversized" // completing the hello would read more than the limit
	KindMalformed = "malformed" // the bytes are TLS-shaped but break the record or hello grammar
	KindRead      = "read"      // the reader failed (deadline, reset); Err is its error
)

// Error describes why no ClientHello could be taken from a connection.
type Error struct {
	Kind string // one of the Kind constants
	Msg  string // what was wrong, for logs
	Err  error  // the underlying cause, if any
}

func (e *Error) Error() string {
	s := "tls client hello: " + e.Kind + ": " + e.Msg
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

func (e *Error) Unwrap() error { return e.Err }

func malformed(msg string) *Error { return &Error{Kind: KindMalformed, Msg: msg} }
