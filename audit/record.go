package audit

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gowebpki/jcs"
)

// timeLayout is fixed-width so that a record's time has exactly one spelling.
const timeLayout = "2006-01-02T15:04:05.000Z"

// zeroHash is the prev of the first record ever written.
var zeroHash = [sha256.Size]byte{}

// lineWriter appends key/value pairs, omitting empty values; the caller
// writes keys in sorted order, which is what makes the line canonical.
type lineWriter struct {
	b     []byte
	first bool
}

func (w *lineWriter) key(k string) {
	if !w.first {
		w.b = append(w.b, ',')
	}
	w.first = false
	w.b = append(w.b, '"')
	w.b = append(w.b, k...)
	w.b = append(w.b, '"', ':')
}

func (w *lineWriter) str(k, v string) {
	if v == "" {
		return
	}
	w.key(k)
	w.b = appendString(w.b, v)
}

func (w *lineWriter) uint(k string, v uint64) {
	if v == 0 {
		return
	}
	w.key(k)
	w.b = strconv.AppendUint(w.b, v, 10)
}

func (w *lineWriter) int(k string, v int64) {
	if v == 0 {
		return
	}
	w.key(k)
	w.b = strconv.AppendInt(w.b, v, 10)
}

func (w *lineWriter) raw(k string, v []byte) {
	if len(v) == 0 {
		return
	}
	w.key(k)
	w.b = append(w.b, v...)
}

// encodeRecord appends the canonical line of r (without the newline). Keys
// are in byte order, empty values are omitted, and strings are escaped as
// RFC 8785 prescribes, so the line is its own JCS form.
func encodeRecord(b []byte, r *Record) []byte {
	w := lineWriter{b: append(b, '{'), first: true}
	w.str("args_hash", r.ArgsHash)
	w.raw("arguments", r.Arguments)
	w.uint("authorization", r.Authorization)
	w.str("client", r.Client)
	w.str("decision", string(r.Decision))
	w.str("destination", r.Destination)
	w.str("direction", r.Direction)
	w.int("error_code", r.ErrorCode)
	w.uint("exchange", r.Exchange)
	w.uint("flow", r.Flow)
	w.str("id", r.ID)
	if r.Identity != nil {
		w.key("identity")
		w.b = encodeIdentity(w.b, r.Identity)
	}
	w.str("iss", r.Iss)
	w.str("kind", r.Kind)
	w.int("level", int64(r.Level))
	w.str("method", r.Method)
	w.str("outcome", r.Outcome)
	w.str("prev", r.Prev)
	w.str("reason", r.Reason)
	w.str("rule", r.Rule)
	w.uint("seq", r.Seq)
	w.str("server", r.Server)
	w.str("span_id", r.SpanID)
	w.str("sub", r.Sub)
	if !r.Time.IsZero() {
		w.key("time")
		w.b = append(w.b, '"')
		w.b = r.Time.UTC().AppendFormat(w.b, timeLayout)
		w.b = append(w.b, '"')
	}
	w.str("tool", r.Tool)
	w.str("trace_id", r.TraceID)
	w.str("traceparent", r.Traceparent)
	return append(w.b, '}')
}

func encodeIdentity(b []byte, id *Identity) []byte {
	w := lineWriter{b: append(b, '{'), first: true}
	w.uint("cgroup", id.Cgroup)
	w.str("comm", id.Comm)
	w.str("exe", id.Exe)
	w.uint("pid", uint64(id.PID))
	w.uint("uid", uint64(id.UID))
	return append(w.b, '}')
}

// appendString quotes s the RFC 8785 way: only '"', '\\' and control
// characters are escaped; invalid UTF-8 becomes U+FFFD so the line stays
// valid JSON and re-encodes to itself.
func appendString(b []byte, s string) []byte {
	const hexDigits = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				b = append(b, '\\', c)
			case c == '\b':
				b = append(b, '\\', 'b')
			case c == '\f':
				b = append(b, '\\', 'f')
			case c == '\n':
				b = append(b, '\\', 'n')
			case c == '\r':
				b = append(b, '\\', 'r')
			case c == '\t':
				b = append(b, '\\', 't')
			case c < 0x20:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			default:
				b = append(b, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, "\ufffd"...)
		} else {
			b = append(b, s[i:i+size]...)
		}
		i += size
	}
	return append(b, '"')
}

// lineHash is what the next record's prev and a checkpoint commit to.
func lineHash(line []byte) [sha256.Size]byte { return sha256.Sum256(line) }

// wireRecord mirrors Record with the names of the log, for the decoder.
type wireRecord struct {
	ArgsHash      string          `json:"args_hash"`
	Arguments     json.RawMessage `json:"arguments"`
	Authorization uint64          `json:"authorization"`
	Client        string          `json:"client"`
	Decision      Decision        `json:"decision"`
	Destination   string          `json:"destination"`
	Direction     string          `json:"direction"`
	ErrorCode     int64           `json:"error_code"`
	Exchange      uint64          `json:"exchange"`
	Flow          uint64          `json:"flow"`
	ID            string          `json:"id"`
	Identity      *wireIdentity   `json:"identity"`
	Iss           string          `json:"iss"`
	Kind          string          `json:"kind"`
	Level         int             `json:"level"`
	Method        string          `json:"method"`
	Outcome       string          `json:"outcome"`
	Prev          string          `json:"prev"`
	Reason        string          `json:"reason"`
	Rule          string          `json:"rule"`
	Seq           uint64          `json:"seq"`
	Server        string          `json:"server"`
	SpanID        string          `json:"span_id"`
	Sub           string          `json:"sub"`
	Time          string          `json:"time"`
	Tool          string          `json:"tool"`
	TraceID       string          `json:"trace_id"`
	Traceparent   string          `json:"traceparent"`
}

type wireIdentity struct {
	Cgroup uint64 `json:"cgroup"`
	Comm   string `json:"comm"`
	Exe    string `json:"exe"`
	PID    uint32 `json:"pid"`
	UID    uint32 `json:"uid"`
}

// maxLine bounds what the decoder and the segment reader accept.
const maxLine = 1 << 20

// DecodeRecord parses one log line (without its newline) strictly: the line
// must be exactly the canonical encoding of the record it holds, so unknown
// or duplicate keys, floats, escapes that are not needed, whitespace or keys
// out of order are all errors. Verify relies on this: two spellings of one
// record would give one record two hashes.
func DecodeRecord(line []byte) (*Record, error) {
	if len(line) > maxLine {
		return nil, fmt.Errorf("record of %d bytes exceeds %d", len(line), maxLine)
	}
	if err := checkKeys(line); err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	var w wireRecord
	if err := dec.Decode(&w); err != nil {
		return nil, fmt.Errorf("decode record: %w", err)
	}
	if dec.More() {
		return nil, errors.New("decode record: data after the object")
	}
	r, err := w.record()
	if err != nil {
		return nil, err
	}
	if again := encodeRecord(nil, r); !bytes.Equal(again, line) {
		return nil, fmt.Errorf("record is not in canonical form (first difference at byte %d)", firstDiff(again, line))
	}
	return r, nil
}

func (w *wireRecord) record() (*Record, error) {
	if w.Seq == 0 {
		return nil, errors.New("record has no seq")
	}
	if _, err := parseHash(w.Prev); err != nil {
		return nil, fmt.Errorf("record prev: %w", err)
	}
	t, err := time.Parse(timeLayout, w.Time)
	if err != nil {
		return nil, fmt.Errorf("record time: %w", err)
	}
	if w.Kind != KindAuthorization && w.Kind != KindOutcome {
		return nil, fmt.Errorf("record kind %q is neither %q nor %q", w.Kind, KindAuthorization, KindOutcome)
	}
	if len(w.Arguments) > 0 && !isCanonicalJSON(w.Arguments) {
		canon, err := jcs.Transform(w.Arguments)
		if err != nil {
			return nil, fmt.Errorf("record arguments: %w", err)
		}
		if !bytes.Equal(canon, w.Arguments) {
			return nil, errors.New("record arguments are not in RFC 8785 canonical form")
		}
	}
	r := &Record{
		Seq: w.Seq, Prev: w.Prev, Time: t,
		Kind: w.Kind, Flow: w.Flow, Exchange: w.Exchange, Client: w.Client,
		Destination: w.Destination, Server: w.Server, Level: w.Level, Method: w.Method,
		Direction: w.Direction, ID: w.ID, Tool: w.Tool, ArgsHash: w.ArgsHash,
		Arguments: w.Arguments, Rule: w.Rule, Decision: w.Decision, Outcome: w.Outcome,
		ErrorCode: w.ErrorCode, Reason: w.Reason, Authorization: w.Authorization,
		Traceparent: w.Traceparent, Iss: w.Iss, Sub: w.Sub, TraceID: w.TraceID, SpanID: w.SpanID,
	}
	if id := w.Identity; id != nil {
		r.Identity = &Identity{PID: id.PID, UID: id.UID, Comm: id.Comm, Exe: id.Exe, Cgroup: id.Cgroup}
	}
	return r, nil
}

// checkKeys rejects duplicate and unordered keys of the record and of its
// identity with a message naming the key (encoding/json alone keeps the last
// duplicate silently). Arguments are left to jcs, whose key order is by
// UTF-16 code unit rather than by byte.
func checkKeys(line []byte) error {
	type frame struct {
		object, expectKey bool
		last              string
	}
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.UseNumber()
	stack := []frame{{}}
	inArgs := false
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("decode record: %w", err)
		}
		if d, ok := tok.(json.Delim); ok && (d == '}' || d == ']') {
			stack = stack[:len(stack)-1]
			continue
		}
		top := &stack[len(stack)-1]
		if top.object && top.expectKey {
			k, _ := tok.(string)
			if !inArgs && top.last != "" && k <= top.last {
				if k == top.last {
					return fmt.Errorf("duplicate key %q", k)
				}
				return fmt.Errorf("key %q after %q: keys are not in canonical order", k, top.last)
			}
			top.last, top.expectKey = k, false
			if len(stack) == 2 {
				inArgs = k == "arguments"
			}
			continue
		}
		top.expectKey = true
		switch t := tok.(type) {
		case json.Delim:
			stack = append(stack, frame{object: t == '{', expectKey: true})
		case json.Number:
			if len(stack) == 2 && strings.ContainsAny(string(t), ".eE") {
				return fmt.Errorf("number %s is not an integer", t)
			}
		}
	}
}

func firstDiff(a, b []byte) int {
	n := min(len(a), len(b))
	for i := range n {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

func parseHash(s string) ([sha256.Size]byte, error) {
	var h [sha256.Size]byte
	if len(s) != hex.EncodedLen(sha256.Size) {
		return h, fmt.Errorf("hash %q is not %d hex digits", s, hex.EncodedLen(sha256.Size))
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return h, fmt.Errorf("hash %q is not lowercase hex", s)
		}
	}
	_, err := hex.Decode(h[:], []byte(s))
	return h, err
}

// HashArguments returns "sha256:<hex>" of the RFC 8785 canonical form of raw,
// so two clients spelling the same arguments differently hash alike. Empty
// input (a request without arguments) has no hash: "".
func HashArguments(raw json.RawMessage) (string, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return "", nil
	}
	canon := []byte(raw)
	if !isCanonicalJSON(raw) {
		var err error
		if canon, err = jcs.Transform(raw); err != nil {
			return "", fmt.Errorf("canonicalize arguments: %w", err)
		}
	}
	sum := sha256.Sum256(canon)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}

// MarshalJSON returns the record's canonical line, as the log holds it.
func (r *Record) MarshalJSON() ([]byte, error) { return encodeRecord(nil, r), nil }
