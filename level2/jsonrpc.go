package level2

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
)

// Defaults for DecodeOptions' zero values.
const (
	DefaultMaxSize  = 4 << 20
	DefaultMaxDepth = 64
)

// Keys of _meta that 2026-07-28 uses instead of the initialize handshake.
const (
	metaProtocolVersion    = "io.modelcontextprotocol/protocolVersion"
	metaClientInfo         = "io.modelcontextprotocol/clientInfo"
	metaClientCapabilities = "io.modelcontextprotocol/clientCapabilities"
)

// Errors about the JSON-RPC envelope (the JSON itself being valid).
var (
	ErrInvalidMessage  = errors.New("invalid JSON-RPC message")
	ErrBatchNotAllowed = errors.New("JSON-RPC batch not allowed")
)

// DecodeOptions bound and shape decoding. The zero value is the strict default: no batches,
// DefaultMaxSize bytes, DefaultMaxDepth levels.
type DecodeOptions struct {
	MaxSize    int  // bytes; 0 means DefaultMaxSize
	MaxDepth   int  // nesting of objects and arrays, the message object being level 1; 0 means DefaultMaxDepth
	AllowBatch bool // accept a top-level array of messages (MCP 2025-03-26 only)
}

// Kind is what a JSON-RPC message is.
type Kind uint8

const (
	KindRequest      Kind = iota + 1 // method and id
	KindNotification                 // method, no id
	KindResponse                     // result
	KindError                        // error
)

func (k Kind) String() string {
	switch k {
	case KindRequest:
		return "request"
	case KindNotification:
		return "notification"
	case KindResponse:
		return "response"
	case KindError:
		return "error"
	}
	return "unknown"
}

// Message is one decoded JSON-RPC 2.0 message. Its raw fields are sub-slices of the body given to
// Decode: keep the body unchanged while the Message is in use.
type Message struct {
	Kind Kind
	// ID is the id exactly as it was sent (`"a\u0062"`, `7`, `1e3`), to be echoed back byte for
	// byte; nil for a notification and for an error response whose id is null.
	ID     json.RawMessage
	Method string
	Params json.RawMessage // nil when absent; "null" is kept as sent
	Result json.RawMessage
	Error  *Error
	Raw    []byte // the whole message object

	// pidx locates the members of params named in paramKeys, as the scan found them
	// (offsets into Raw; end 0: absent); indexed says the scan filled it. A Message built
	// otherwise looks its params up by walking them.
	pidx    [numParamKeys]struct{ start, end int32 }
	indexed bool
}

// Error is the error member of an error response.
type Error struct {
	Code    int64           `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data,omitempty"`
}

// Decode strictly decodes a body holding one JSON-RPC message, or with opt.AllowBatch a batch
// (a non-empty top-level array of message objects; batch then reports true).
//
// The scan is one pass of our own validating tokenizer; nothing is handed to encoding/json before
// it passed, because encoding/json is lenient exactly where peers disagree (case-insensitive and
// last-wins keys, U+FFFD for bad UTF-8 and lone surrogates). Rules, beyond RFC 8259 grammar:
//   - two keys of one object that are equal, or equal under Unicode simple folding, are refused
//     anywhere in the document (ErrDuplicateKey, ErrCaseVariantKey);
//   - a key that folds to a member Level 2 reads but is not spelled exactly ("Method",
//     "paramſ", params "Name", _meta "io.modelcontextprotocol/protocolversion") is refused;
//   - invalid UTF-8 (raw, in keys too) and escaped lone surrogates (\ud800) are refused;
//   - nesting beyond MaxDepth and bodies beyond MaxSize are refused; so is anything after the
//     value but whitespace, and a leading byte-order mark;
//   - jsonrpc must be "2.0", id a string or number (null only on an error response), method a
//     string, params an object, an array or null, exactly one of result and error on a response.
//
// Unknown envelope members with names of their own are ignored, as JSON-RPC peers do.
func Decode(body []byte, opt DecodeOptions) (msgs []*Message, batch bool, err error) {
	maxSize, maxDepth := opt.MaxSize, opt.MaxDepth
	if maxSize <= 0 {
		maxSize = DefaultMaxSize
	}
	if maxDepth <= 0 {
		maxDepth = DefaultMaxDepth
	}
	if len(body) > maxSize {
		return nil, false, &JSONError{Offset: maxSize, Err: ErrTooLarge, Detail: fmt.Sprintf("%d bytes, limit %d", len(body), maxSize)}
	}
	s := getScanner(body, maxDepth)
	defer putScanner(s)

	s.ws()
	if s.pos >= len(body) {
		return nil, false, s.fail(ErrSyntax, "empty body")
	}
	switch body[s.pos] {
	case '{':
		m, err := s.message()
		if err != nil {
			return nil, false, err
		}
		msgs = []*Message{m}
	case '[':
		if !opt.AllowBatch {
			return nil, false, fmt.Errorf("%w: this protocol version has no batches", ErrBatchNotAllowed)
		}
		if msgs, err = s.batch(); err != nil {
			return nil, false, err
		}
		batch = true
	default:
		if err := s.value(ctxNone); err != nil {
			return nil, false, err
		}
		return nil, false, fmt.Errorf("%w: not an object", ErrInvalidMessage)
	}
	s.ws()
	if s.pos != len(body) {
		return nil, false, s.fail(ErrSyntax, "data after the JSON value")
	}
	return msgs, batch, nil
}

// DecodeMessage decodes a body that must hold exactly one message (batches refused).
func DecodeMessage(body []byte, opt DecodeOptions) (*Message, error) {
	opt.AllowBatch = false
	msgs, _, err := Decode(body, opt)
	if err != nil {
		return nil, err
	}
	return msgs[0], nil
}

func (s *scanner) batch() ([]*Message, error) {
	if err := s.enter(); err != nil {
		return nil, err
	}
	s.pos++ // '['
	var msgs []*Message
	for {
		s.ws()
		if s.pos >= len(s.data) {
			return nil, s.fail(ErrSyntax, "unexpected end of input in batch")
		}
		if s.data[s.pos] == ']' && len(msgs) == 0 {
			return nil, fmt.Errorf("%w: empty batch", ErrInvalidMessage)
		}
		if s.data[s.pos] != '{' {
			if err := s.value(ctxNone); err != nil {
				return nil, err
			}
			return nil, fmt.Errorf("%w: batch element %d is not an object", ErrInvalidMessage, len(msgs))
		}
		m, err := s.message()
		if err != nil {
			return nil, fmt.Errorf("batch element %d: %w", len(msgs), err)
		}
		msgs = append(msgs, m)
		s.ws()
		if s.pos >= len(s.data) {
			return nil, s.fail(ErrSyntax, "unexpected end of input in batch")
		}
		switch s.data[s.pos] {
		case ',':
			s.pos++
		case ']':
			s.pos++
			s.depth--
			return msgs, nil
		default:
			return nil, s.fail(ErrSyntax, "expected ',' or ']' in batch")
		}
	}
}

// message scans one envelope object and checks it as JSON-RPC 2.0.
func (s *scanner) message() (*Message, error) {
	s.spans, s.pspans = [numMembers]span{}, [numParamKeys]span{}
	start := s.pos
	if err := s.object(ctxEnvelope); err != nil {
		return nil, err
	}
	m := &Message{Raw: s.data[start:s.pos]}
	if len(m.Raw) <= math.MaxInt32 {
		m.indexed = true
		for i, sp := range s.pspans {
			if sp.present() {
				m.pidx[i].start, m.pidx[i].end = int32(sp.start-start), int32(sp.end-start)
			}
		}
	}
	raw := func(i int) []byte { return s.data[s.spans[i].start:s.spans[i].end] }
	has := func(i int) bool { return s.spans[i].present() }
	bad := func(format string, args ...any) (*Message, error) {
		return nil, fmt.Errorf("%w: "+format, append([]any{ErrInvalidMessage}, args...)...)
	}

	if !has(memJSONRPC) {
		return bad("no jsonrpc member")
	}
	if v := raw(memJSONRPC); v[0] != '"' || unquote(v) != "2.0" {
		return bad(`jsonrpc must be "2.0"`) // the value is the peer's: never quoted into a reason
	}
	idNull := false
	if has(memID) {
		switch v := raw(memID); v[0] {
		case '"':
			m.ID = v
		case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
			// Peers compare numeric ids as float64 values (the Go SDK truncates to int64): an id
			// that is not an integer, or past 2^53, could answer another request than Level 2
			// correlated it with.
			if _, ok := numericID(v); !ok {
				return bad("a numeric id must be an integer of magnitude below 2^53")
			}
			m.ID = v
		case 'n':
			idNull = true
		default:
			return bad("id must be a string or a number")
		}
	}
	if has(memParams) {
		switch v := raw(memParams); v[0] {
		case '{', '[', 'n':
			m.Params = v
		default:
			return bad("params must be an object or an array")
		}
	}
	switch {
	case has(memMethod):
		v := raw(memMethod)
		if v[0] != '"' {
			return bad("method must be a string")
		}
		m.Method = unquote(v)
		if has(memResult) || has(memError) {
			return bad("a request carries neither result nor error")
		}
		switch {
		case idNull:
			return bad("request id must not be null")
		case m.ID != nil:
			m.Kind = KindRequest
		default:
			m.Kind = KindNotification
		}
	case has(memResult) && has(memError):
		return bad("a response carries result or error, not both")
	case has(memResult) || has(memError):
		if has(memParams) {
			return bad("a response carries no params")
		}
		if !has(memID) {
			return bad("a response needs an id")
		}
		if has(memResult) {
			if idNull {
				return bad("a result needs a non-null id")
			}
			m.Kind, m.Result = KindResponse, raw(memResult)
			break
		}
		e, err := decodeError(raw(memError))
		if err != nil {
			return nil, err
		}
		m.Kind, m.Error = KindError, e
	default:
		return bad("neither method, result nor error")
	}
	return m, nil
}

// decodeError reads an already validated error member. The scanner refused case variants of
// code, message and data inside it, so encoding/json's folding matches nothing but the exact
// names here.
func decodeError(v []byte) (*Error, error) {
	if v[0] != '{' {
		return nil, fmt.Errorf("%w: error must be an object", ErrInvalidMessage)
	}
	var e struct {
		Code    json.RawMessage `json:"code"`
		Message *string         `json:"message"`
		Data    json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(v, &e); err != nil {
		return nil, fmt.Errorf("%w: error member: %v", ErrInvalidMessage, err)
	}
	if len(e.Code) == 0 || e.Message == nil {
		return nil, fmt.Errorf("%w: error needs a code and a message", ErrInvalidMessage)
	}
	code, err := strconv.ParseInt(string(e.Code), 10, 64)
	if err != nil {
		return nil, fmt.Errorf("%w: error code is not an integer", ErrInvalidMessage)
	}
	return &Error{Code: code, Message: *e.Message, Data: e.Data}, nil
}

// IDText is the id for logs and correlation: a string id unquoted, a number as sent, "" when
// there is none.
func (m *Message) IDText() string {
	if len(m.ID) == 0 {
		return ""
	}
	if m.ID[0] == '"' {
		return unquote(m.ID)
	}
	return string(m.ID)
}

// param returns the raw value of a top-level member of params, when params is an object.
func (m *Message) param(name string) ([]byte, bool) {
	if len(m.Params) == 0 || m.Params[0] != '{' {
		return nil, false
	}
	if m.indexed {
		for i, k := range paramKeys {
			if k == name {
				at := m.pidx[i]
				if at.end == 0 {
					return nil, false
				}
				return m.Raw[at.start:at.end], true
			}
		}
	}
	return member(m.Params, name)
}

// Name is what a request acts on: params.name for tools/call and prompts/get, params.uri for
// resources/read, resources/subscribe and resources/unsubscribe; "" otherwise or when absent.
func (m *Message) Name() string {
	var key string
	switch m.Method {
	case "tools/call", "prompts/get":
		key = "name"
	case "resources/read", "resources/subscribe", "resources/unsubscribe":
		key = "uri"
	default:
		return ""
	}
	v, ok := m.param(key)
	if !ok || v[0] != '"' {
		return ""
	}
	return unquote(v)
}

// Arguments is params.arguments as a map (nil when absent or not an object). Integers that fit
// int64 become int64, other numbers float64, so that policy compares them without rounding.
func (m *Message) Arguments() map[string]any {
	return m.paramMap("arguments")
}

// Meta is params._meta (nil when absent or not an object).
func (m *Message) Meta() map[string]any {
	return m.paramMap("_meta")
}

// ClientInfo is the client's implementation info: initialize params.clientInfo, or from
// 2026-07-28 on _meta["io.modelcontextprotocol/clientInfo"] of any request.
func (m *Message) ClientInfo() map[string]any {
	if m.Method == "initialize" {
		if v := m.paramMap("clientInfo"); v != nil {
			return v
		}
	}
	v, ok := m.metaMember(metaClientInfo)
	if !ok {
		return nil
	}
	out, _ := decodeAny(v).(map[string]any)
	return out
}

// ProtocolVersion is the version a request claims: initialize params.protocolVersion, or
// _meta["io.modelcontextprotocol/protocolVersion"] (2026-07-28); "" when absent.
func (m *Message) ProtocolVersion() string {
	if m.Method == "initialize" {
		if v, ok := m.param("protocolVersion"); ok && v[0] == '"' {
			return unquote(v)
		}
	}
	if v, ok := m.metaMember(metaProtocolVersion); ok && v[0] == '"' {
		return unquote(v)
	}
	return ""
}

func (m *Message) metaMember(name string) ([]byte, bool) {
	meta, ok := m.param("_meta")
	if !ok || meta[0] != '{' {
		return nil, false
	}
	return member(meta, name)
}

func (m *Message) paramMap(name string) map[string]any {
	v, ok := m.param(name)
	if !ok || v[0] != '{' {
		return nil
	}
	out, _ := decodeAny(v).(map[string]any)
	return out
}

// decodeAny decodes a value the scan validated into maps, slices, strings, bools, nil, int64
// (integers that fit) and float64. Duplicates and case variants were refused by the scan and
// strings are unescaped by the scan's own rules, so this reads exactly what the scan read.
func decodeAny(v []byte) any {
	out, _ := parseValue(v, 0)
	return out
}

func parseValue(b []byte, i int) (any, int) {
	i = skipWS(b, i)
	if i >= len(b) {
		return nil, i
	}
	switch b[i] {
	case '{':
		m := make(map[string]any)
		i = skipWS(b, i+1)
		for i < len(b) && b[i] == '"' {
			ke := skipString(b, i)
			key := unquote(b[i:ke])
			i = skipWS(b, ke) + 1 // ':'
			var v any
			v, i = parseValue(b, i)
			m[key] = v
			i = skipWS(b, i)
			if i < len(b) && b[i] == ',' {
				i = skipWS(b, i+1)
			}
		}
		return m, i + 1 // '}'
	case '[':
		a := []any{}
		i = skipWS(b, i+1)
		for i < len(b) && b[i] != ']' {
			var v any
			v, i = parseValue(b, i)
			a = append(a, v)
			i = skipWS(b, i)
			if i < len(b) && b[i] == ',' {
				i++
			}
		}
		return a, i + 1
	case '"':
		e := skipString(b, i)
		return unquote(b[i:e]), e
	case 't':
		return true, i + 4
	case 'f':
		return false, i + 5
	case 'n':
		return nil, i + 4
	}
	e := skipValue(b, i)
	return number(b[i:e]), e
}

// number converts a validated JSON number: int64 when it is an integer that fits, else float64.
func number(n []byte) any {
	if bytes.IndexAny(n, ".eE") < 0 {
		if v, err := strconv.ParseInt(string(n), 10, 64); err == nil {
			return v
		}
	}
	f, _ := strconv.ParseFloat(string(n), 64)
	return f
}

// member finds a top-level member of a validated object without allocating.
func member(obj []byte, name string) ([]byte, bool) {
	i := 1
	for {
		i = skipWS(obj, i)
		if i >= len(obj) || obj[i] != '"' {
			return nil, false
		}
		ke := skipString(obj, i)
		key := obj[i:ke]
		i = skipWS(obj, ke)
		i = skipWS(obj, i+1) // ':'
		ve := skipValue(obj, i)
		if keyEquals(key, name) {
			return obj[i:ve], true
		}
		i = skipWS(obj, ve)
		if i >= len(obj) || obj[i] != ',' {
			return nil, false
		}
		i++
	}
}

func keyEquals(quoted []byte, name string) bool {
	if bytes.IndexByte(quoted, '\\') < 0 {
		return string(quoted[1:len(quoted)-1]) == name
	}
	return unquote(quoted) == name
}

func skipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the index after the closing quote of the validated string at b[i]. It
// jumps from quote to quote (bytes.IndexByte is vectorised: the member lookups of every message
// skip long argument strings with it); a quote closes the string when an even number of
// backslashes precedes it, since in a valid string each backslash run is pairs of escaped
// backslashes, plus one more when it escapes the quote.
func skipString(b []byte, i int) int {
	j := i + 1
	for j < len(b) {
		k := bytes.IndexByte(b[j:], '"')
		if k < 0 {
			break
		}
		q := j + k
		n := 0
		for p := q - 1; p > i && b[p] == '\\'; p-- {
			n++
		}
		if n%2 == 0 {
			return q + 1
		}
		j = q + 1
	}
	return len(b)
}

// skipValue returns the index after the validated value starting at b[i].
func skipValue(b []byte, i int) int {
	if i >= len(b) {
		return i
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for ; i < len(b); i++ {
			switch b[i] {
			case '"':
				i = skipString(b, i) - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
		}
		return len(b)
	default:
		for i < len(b) && b[i] != ',' && b[i] != '}' && b[i] != ']' && b[i] != ' ' && b[i] != '\t' && b[i] != '\n' && b[i] != '\r' {
			i++
		}
		return i
	}
}

// EncodeError builds a JSON-RPC 2.0 error response. id is echoed exactly as the request sent it
// (null when nil); data is marshalled as JSON and left out when nil or not marshalable.
func EncodeError(id json.RawMessage, code int, message string, data any) []byte {
	var b bytes.Buffer
	b.WriteString(`{"jsonrpc":"2.0","id":`)
	if len(id) == 0 {
		b.WriteString("null")
	} else {
		b.Write(id)
	}
	b.WriteString(`,"error":{"code":`)
	b.WriteString(strconv.Itoa(code))
	b.WriteString(`,"message":`)
	b.Write(marshalNoEscape(message))
	if data != nil {
		if d := marshalNoEscape(data); d != nil {
			b.WriteString(`,"data":`)
			b.Write(d)
		}
	}
	b.WriteString("}}")
	return b.Bytes()
}

// marshalNoEscape marshals without HTML escaping (the result is JSON, not HTML).
func marshalNoEscape(v any) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}
