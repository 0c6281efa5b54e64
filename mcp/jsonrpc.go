package mcp

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

// Keys of _meta that 2026-07-28 uses instead of the initialize handshake. The decoder holds them
// to this exact spelling (Scope.Members of ScopeMeta).
const (
	MetaProtocolVersion    = "io.modelcontextprotocol/protocolVersion"
	MetaClientInfo         = "io.modelcontextprotocol/clientInfo"
	MetaClientCapabilities = "io.modelcontextprotocol/clientCapabilities"
)

// Errors about the JSON-RPC envelope, the JSON itself being valid. Decode wraps them with a
// reason that never quotes the peer's bytes; test with errors.Is.
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

// MessageKind is what a JSON-RPC message is (not to be confused with Info.Kind, which says whether
// an HTTP request is MCP at all).
type MessageKind uint8

const (
	KindRequest      MessageKind = iota + 1 // method and id
	KindNotification                        // method, no id
	KindResponse                            // result
	KindError                               // error
)

func (k MessageKind) String() string {
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
	Kind MessageKind
	// ID is the id exactly as it was sent (`"a\u0062"`, `7`, `1e3`), to be echoed back byte for
	// byte; nil for a notification and for an error response whose id is null.
	ID     json.RawMessage
	Method string
	Params json.RawMessage // nil when absent; "null" is kept as sent
	Result json.RawMessage
	Error  *ErrorObject
	Raw    []byte // the whole message object

	// pidx locates the members of params named in paramKeys, as the scan found them
	// (offsets into Raw; end 0: absent); indexed says the scan filled it. A Message built
	// otherwise looks its params up by walking them.
	pidx    [numParamKeys]struct{ start, end int32 }
	indexed bool
	// suspectResult says the scan found a key in the result that folds to a protocol member
	// name but is spelt otherwise (CheckResult judges it once the method is known).
	suspectResult bool
}

// ErrorObject is the error member of an error response (JSON-RPC 2.0 section 5.1).
type ErrorObject struct {
	Code    int64           `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data,omitempty"` // as sent; nil when absent
}

// Decode strictly decodes a body holding one JSON-RPC message, or with opt.AllowBatch a batch
// (a non-empty top-level array of message objects; batch then reports true). A failure of the
// JSON itself is a *JSONError (its Err one of ErrSyntax, ErrInvalidUTF8, ErrLoneSurrogate,
// ErrDuplicateKey, ErrCaseVariantKey, ErrTooDeep, ErrTooLarge); a valid document that is no
// JSON-RPC message wraps ErrInvalidMessage or ErrBatchNotAllowed. msgs is nil on any error.
//
// The scan is one pass of our own validating tokenizer; nothing is handed to encoding/json before
// it passed, because encoding/json is lenient exactly where peers disagree (case-insensitive and
// last-wins keys, U+FFFD for bad UTF-8 and lone surrogates). Rules, beyond RFC 8259 grammar:
//   - two keys of one object that are equal, or equal under Unicode simple folding, are refused
//     anywhere in the document (ErrDuplicateKey, ErrCaseVariantKey);
//   - a key that folds to a member Level 2 reads but is not spelled exactly ("Method",
//     "paramſ", params "Name", _meta "io.modelcontextprotocol/protocolversion") is refused
//     (Scope.Members lists them), and so is, in the params of an MCP method (Methods), a key
//     that folds to a member of its params type or of a struct they hold ("Mode" in
//     elicitation/create); a result is judged so by Message.CheckResult, given the method of
//     the request it answers;
//   - invalid UTF-8 (raw, in keys too) and escaped lone surrogates (\ud800) are refused;
//   - nesting beyond MaxDepth and bodies beyond MaxSize are refused; so is anything after the
//     value but whitespace, and a leading byte-order mark;
//   - jsonrpc must be "2.0", id a string or number (null only on an error response), a numeric
//     id an integer below 2^53 in magnitude however it is spelt (NumericID), method a string,
//     params an object, an array or null, exactly one of result and error on a response, and an
//     error an object with an integer code and a string message.
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
		if err := s.value(ScopeNone); err != nil {
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
			if err := s.value(ScopeNone); err != nil {
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
	s.region, s.suspect = 0, [numMembers]bool{}
	start := s.pos
	if err := s.object(ScopeEnvelope); err != nil {
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
	if v := raw(memJSONRPC); v[0] != '"' || Unquote(v) != "2.0" {
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
			if _, ok := NumericID(v); !ok {
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
		m.Method = Unquote(v)
		if has(memResult) || has(memError) {
			return bad("a request carries neither result nor error")
		}
		if s.suspect[memParams] {
			// Peers decode an MCP method's params into its struct: a lone case variant of one
			// of its members is read as the member, which Level 2 would not see.
			if err := checkTyped(m.Params, s.spans[memParams].start, paramsType(m.Method)); err != nil {
				return nil, err
			}
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
			m.suspectResult = s.suspect[memResult]
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
func decodeError(v []byte) (*ErrorObject, error) {
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
	return &ErrorObject{Code: code, Message: *e.Message, Data: e.Data}, nil
}

// IDText is the id for logs and correlation: a string id unquoted, a number as sent, "" when
// there is none.
func (m *Message) IDText() string {
	if len(m.ID) == 0 {
		return ""
	}
	if m.ID[0] == '"' {
		return Unquote(m.ID)
	}
	return string(m.ID)
}

// MaxExactID is where float64, which the Go and TypeScript SDKs decode every numeric id into,
// stops holding every integer: ids at or past it could be read as another id by a peer.
const MaxExactID = 1 << 53

// NumericID reads a JSON number id the way the peers compare it: as a float64. The Go SDK
// truncates it to an int64 (1.5 is read as 1), JavaScript and Python compare by value (1.0 == 1).
// The decoder therefore accepts only ids whose value is an integer below 2^53 in magnitude, whatever
// their spelling (1, 1.0, 1e0, 10E-1 are the same id), and refuses the rest in both directions.
func NumericID(text []byte) (int64, bool) {
	f, err := strconv.ParseFloat(string(text), 64)
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) || f != math.Trunc(f) || math.Abs(f) >= MaxExactID {
		return 0, false
	}
	return int64(f), true
}

// Param returns the raw value of the top-level member name of params, when params is an object.
// The members Level 2 reads on every message were located by the scan, so looking one up costs
// no second walk over the arguments.
func (m *Message) Param(name string) ([]byte, bool) {
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
	return Member(m.Params, name)
}

// Name is what a request acts on: params.name for tools/call and prompts/get, params.uri for
// resources/read, resources/subscribe and resources/unsubscribe; "" otherwise or when absent.
func (m *Message) Name() string {
	key := SubjectOf(m.Method)
	if key == "" {
		return ""
	}
	v, ok := m.Param(key)
	if !ok || v[0] != '"' {
		return ""
	}
	return Unquote(v)
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
	if m.Method == MethodInitialize {
		if v := m.paramMap("clientInfo"); v != nil {
			return v
		}
	}
	v, ok := m.metaMember(MetaClientInfo)
	if !ok {
		return nil
	}
	out, _ := DecodeValue(v).(map[string]any)
	return out
}

// ProtocolVersion is the version a request claims: initialize params.protocolVersion, or
// _meta["io.modelcontextprotocol/protocolVersion"] (2026-07-28); "" when absent.
func (m *Message) ProtocolVersion() string {
	if m.Method == MethodInitialize {
		if v, ok := m.Param("protocolVersion"); ok && v[0] == '"' {
			return Unquote(v)
		}
	}
	if v, ok := m.metaMember(MetaProtocolVersion); ok && v[0] == '"' {
		return Unquote(v)
	}
	return ""
}

func (m *Message) metaMember(name string) ([]byte, bool) {
	meta, ok := m.Param("_meta")
	if !ok || meta[0] != '{' {
		return nil, false
	}
	return Member(meta, name)
}

func (m *Message) paramMap(name string) map[string]any {
	v, ok := m.Param(name)
	if !ok || v[0] != '{' {
		return nil
	}
	out, _ := DecodeValue(v).(map[string]any)
	return out
}

// DecodeValue decodes v, a value the decoder validated (a member of a Message, a body
// ValidateJSON accepted), into maps, slices, strings, bools, nil, int64 (integers that fit) and
// float64. Duplicates and case variants were refused by the scan and strings are unescaped by the
// scan's own rules, so this reads exactly what the scan read. On other input the result is
// unspecified.
func DecodeValue(v []byte) any {
	out, _ := parseValue(v, 0)
	return out
}

func parseValue(b []byte, i int) (any, int) {
	i = SkipSpace(b, i)
	if i >= len(b) {
		return nil, i
	}
	switch b[i] {
	case '{':
		m := make(map[string]any)
		i = SkipSpace(b, i+1)
		for i < len(b) && b[i] == '"' {
			ke := SkipString(b, i)
			key := Unquote(b[i:ke])
			i = SkipSpace(b, ke) + 1 // ':'
			var v any
			v, i = parseValue(b, i)
			m[key] = v
			i = SkipSpace(b, i)
			if i < len(b) && b[i] == ',' {
				i = SkipSpace(b, i+1)
			}
		}
		return m, i + 1 // '}'
	case '[':
		a := []any{}
		i = SkipSpace(b, i+1)
		for i < len(b) && b[i] != ']' {
			var v any
			v, i = parseValue(b, i)
			a = append(a, v)
			i = SkipSpace(b, i)
			if i < len(b) && b[i] == ',' {
				i++
			}
		}
		return a, i + 1
	case '"':
		e := SkipString(b, i)
		return Unquote(b[i:e]), e
	case 't':
		return true, i + 4
	case 'f':
		return false, i + 5
	case 'n':
		return nil, i + 4
	}
	e := SkipValue(b, i)
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

// Quote is s as a JSON string, with <, > and & as they are (the output is JSON, not HTML).
// Invalid UTF-8 in s becomes U+FFFD, so the result always passes the decoder.
func Quote(s string) []byte { return marshalNoEscape(s) }

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

// CheckResult judges a response's result as the result of method, which only the request it
// answers names: a key that folds to a member name of the method's result type (or of a struct
// it holds) but is spelt otherwise is refused with a *JSONError wrapping ErrCaseVariantKey, since
// a case-insensitive peer (encoding/json into the protocol structs) reads it as that member while
// Level 2 reads members by their exact keys. The result of a method that is not MCP's (Methods)
// is its sender's own and always passes. Decode does not call it: it cannot know the method.
func (m *Message) CheckResult(method string) error {
	if m.Kind != KindResponse || (m.indexed && !m.suspectResult) {
		return nil
	}
	return checkTyped(m.Result, 0, resultType(method))
}

// CheckClientResult judges a response a client sends: it answers one of the server's requests
// (sampling, elicitation, roots), whose method the message does not name, so it is judged by
// the members of the results of all of them, as the Go SDK judges a retry's inputResponses.
func (m *Message) CheckClientResult() error {
	if m.Kind != KindResponse || (m.indexed && !m.suspectResult) {
		return nil
	}
	return checkTyped(m.Result, 0, protocolTypes[clientResultType])
}
