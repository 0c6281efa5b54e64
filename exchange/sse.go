package exchange

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// DefaultMaxEventSize bounds one SSE event when NewSSEParser is given 0.
const DefaultMaxEventSize = 4 << 20

// ErrEventTooLarge is returned once an event grows past the parser's bound.
var ErrEventTooLarge = errors.New("SSE event too large")

// Event is one block of an event stream: the lines up to and including a blank line. Every block
// is an Event, including comment-only keepalives (":\n\n") and blocks with no field at all, so
// that a forwarder that writes each Event's Raw reproduces the stream exactly.
type Event struct {
	// Raw is the exact bytes of the block, from its first line through the line end of its
	// terminating blank line (a BOM at stream start included). One exception keeps the
	// concatenation exact without holding an event back: when a CR ends both a block and the
	// bytes fed so far, the block is emitted at once, and an LF that then starts the next Feed
	// (the rest of that CRLF) becomes the first byte of the next block's Raw.
	Raw []byte

	Type     string // the event field; "" means the default type "message"
	Data     string // data lines joined with "\n"
	HasData  bool   // a data field was present (a browser dispatches only such blocks)
	ID       string
	HasID    bool  // an id field was present (an id with NUL is ignored, as the spec says)
	Retry    int64 // milliseconds
	HasRetry bool  // a retry field of ASCII digits was present
	// Comments are the texts after ':' of the comment lines, as sent.
	Comments []string

	// What a stage made of it in the exchange pipeline (Replace, Drop).
	out      []byte
	replaced bool
	dropped  bool
}

// CommentOnly reports a block that has comments and no field: a keepalive.
func (e *Event) CommentOnly() bool {
	return len(e.Comments) > 0 && !e.HasData && !e.HasID && !e.HasRetry && e.Type == ""
}

// SSEParser splits a text/event-stream into events incrementally, as bytes arrive, following the
// WHATWG parsing rules: LF, CRLF and bare CR line ends (a CRLF split across Feeds counts once), a
// BOM at stream start ignored, a field without a colon, one leading space of a value removed,
// unknown fields ignored. It returns each block as soon as its blank line arrives. Not safe for
// concurrent use.
type SSEParser struct {
	max       int
	raw       []byte // the current block so far, including a partial line
	lineStart int    // where the current line begins in raw
	pendingLF bool   // the last byte fed was a CR line end: a leading LF belongs to it
	splitLF   bool   // raw begins with such an LF
	started   bool   // the first line has been read (the BOM check is done)
	err       error

	data []byte
	ev   Event
}

// NewSSEParser returns a parser that refuses an event larger than maxEventSize bytes
// (DefaultMaxEventSize when 0 or less).
func NewSSEParser(maxEventSize int) *SSEParser {
	if maxEventSize <= 0 {
		maxEventSize = DefaultMaxEventSize
	}
	return &SSEParser{max: maxEventSize}
}

// Feed parses the next bytes of the stream and returns the blocks they complete, in order. An
// error (an event over the bound) comes with the blocks completed before it, which are good to
// forward; every later call returns the same error.
func (p *SSEParser) Feed(b []byte) ([]Event, error) {
	if p.err != nil {
		return nil, p.err
	}
	var out []Event
	i := 0
	if p.pendingLF && len(b) > 0 {
		p.pendingLF = false
		if b[0] == '\n' {
			p.raw = append(p.raw, '\n')
			p.lineStart = len(p.raw)
			p.splitLF = true
			i = 1
		}
	}
	for i < len(b) {
		j := indexLineEnd(b[i:])
		if j < 0 {
			p.raw = append(p.raw, b[i:]...)
			if err := p.checkSize(); err != nil {
				return out, err
			}
			break
		}
		p.raw = append(p.raw, b[i:i+j]...)
		lineEnd := len(p.raw)
		c := b[i+j]
		i += j + 1
		p.raw = append(p.raw, c)
		if c == '\r' {
			if i < len(b) {
				if b[i] == '\n' {
					p.raw = append(p.raw, '\n')
					i++
				}
			} else {
				p.pendingLF = true
			}
		}
		if err := p.checkSize(); err != nil {
			return out, err
		}
		line := p.raw[p.lineStart:lineEnd]
		p.lineStart = len(p.raw)
		if !p.started {
			p.started = true
			line = bytes.TrimPrefix(line, []byte("\uFEFF"))
		}
		if len(line) == 0 {
			out = append(out, p.dispatch())
			continue
		}
		p.field(line)
	}
	return out, nil
}

// Pending returns the bytes of a block not yet complete, valid until the next Feed; at the end
// of a stream they are what a forwarder still owes the reader (a browser discards an
// unterminated block, but the bytes are the server's, not ours to drop).
func (p *SSEParser) Pending() []byte { return p.raw }

// TakeSplitLF removes and reports the LF that completed a CRLF split across Feeds while the block
// it starts is not complete yet: the block that CRLF ended was emitted at its CR, so a forwarder
// writes the LF at once instead of holding it back with the next block.
func (p *SSEParser) TakeSplitLF() bool {
	if !p.splitLF {
		return false
	}
	p.splitLF = false
	n := copy(p.raw, p.raw[1:])
	p.raw = p.raw[:n]
	p.lineStart--
	return true
}

func (p *SSEParser) checkSize() error {
	if len(p.raw) > p.max {
		p.err = fmt.Errorf("%w: over %d bytes", ErrEventTooLarge, p.max)
		return p.err
	}
	return nil
}

func indexLineEnd(b []byte) int {
	for i, c := range b {
		if c == '\n' || c == '\r' {
			return i
		}
	}
	return -1
}

func (p *SSEParser) field(line []byte) {
	if line[0] == ':' {
		p.ev.Comments = append(p.ev.Comments, string(line[1:]))
		return
	}
	name, value := line, []byte(nil)
	if k := bytes.IndexByte(line, ':'); k >= 0 {
		name, value = line[:k], line[k+1:]
		if len(value) > 0 && value[0] == ' ' {
			value = value[1:]
		}
	}
	switch string(name) {
	case "event":
		p.ev.Type = string(value)
	case "data":
		p.data = append(p.data, value...)
		p.data = append(p.data, '\n')
		p.ev.HasData = true
	case "id":
		if bytes.IndexByte(value, 0) < 0 {
			p.ev.ID, p.ev.HasID = string(value), true
		}
	case "retry":
		if len(value) > 0 && allDigits(value) {
			if n, err := strconv.ParseInt(string(value), 10, 64); err == nil {
				p.ev.Retry, p.ev.HasRetry = n, true
			}
		}
	}
}

func allDigits(b []byte) bool {
	for _, c := range b {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

func (p *SSEParser) dispatch() Event {
	ev := p.ev
	ev.Raw = bytes.Clone(p.raw)
	if ev.HasData {
		ev.Data = string(p.data[:len(p.data)-1])
	}
	p.ev = Event{}
	p.splitLF = false
	p.data = p.data[:0]
	if cap(p.raw) > 64<<10 {
		p.raw = nil
	} else {
		p.raw = p.raw[:0]
	}
	p.lineStart = 0
	return ev
}

// EncodeEvent frames an event anew, for one that was modified: comments, event, id, retry, then data
// split into lines, LF line ends, and the terminating blank line. A line end inside Data or a
// comment starts a new line of the same field; CR and LF are removed from Type and ID, where they
// would otherwise inject fields.
func EncodeEvent(e Event) []byte {
	var b bytes.Buffer
	for _, c := range e.Comments {
		for _, l := range splitLines(c) {
			b.WriteByte(':')
			b.WriteString(l)
			b.WriteByte('\n')
		}
	}
	if e.Type != "" {
		b.WriteString("event: ")
		b.WriteString(stripLineEnds(e.Type))
		b.WriteByte('\n')
	}
	if e.HasID {
		b.WriteString("id: ")
		b.WriteString(stripLineEnds(e.ID))
		b.WriteByte('\n')
	}
	if e.HasRetry {
		b.WriteString("retry: ")
		b.WriteString(strconv.FormatInt(e.Retry, 10))
		b.WriteByte('\n')
	}
	if e.HasData || e.Data != "" {
		for _, l := range splitLines(e.Data) {
			b.WriteString("data: ")
			b.WriteString(l)
			b.WriteByte('\n')
		}
	}
	b.WriteByte('\n')
	return b.Bytes()
}

// splitLines splits on CRLF, CR and LF, the line ends an SSE reader honours.
func splitLines(s string) []string {
	s = strings.ReplaceAll(s, "\r\n", "\n")
	s = strings.ReplaceAll(s, "\r", "\n")
	return strings.Split(s, "\n")
}

func stripLineEnds(s string) string {
	return strings.NewReplacer("\r", "", "\n", "").Replace(s)
}
