package mcp

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"unicode"
	"unicode/utf8"
)

// Errors the strict JSON scanner and the JSON-RPC decoder wrap. Test with errors.Is.
var (
	ErrSyntax         = errors.New("invalid JSON")
	ErrInvalidUTF8    = errors.New("invalid UTF-8")
	ErrLoneSurrogate  = errors.New("escaped lone surrogate")
	ErrDuplicateKey   = errors.New("duplicate object key")
	ErrCaseVariantKey = errors.New("object keys differ only in case")
	ErrTooDeep        = errors.New("nesting too deep")
	ErrTooLarge       = errors.New("body too large")
)

// JSONError locates a strictness or syntax failure in the document.
type JSONError struct {
	Offset int   // byte offset in the body where the problem was found
	Err    error // one of the Err* sentinels above
	Detail string
}

func (e *JSONError) Error() string {
	if e.Detail == "" {
		return fmt.Sprintf("json: %v at offset %d", e.Err, e.Offset)
	}
	return fmt.Sprintf("json: %v at offset %d: %s", e.Err, e.Offset, e.Detail)
}

func (e *JSONError) Unwrap() error { return e.Err }

// Scope is an object of a JSON-RPC message in which the decoder holds the members Level 2 reads
// to their exact spelling (see Members).
type Scope uint8

const (
	ScopeNone     Scope = iota // any other object: only duplicates and fold-equal pairs are refused
	ScopeEnvelope              // a JSON-RPC message object
	ScopeParams                // envelope.params
	ScopeMeta                  // envelope.params._meta
	ScopeError                 // envelope.error
	// ScopeTyped is an object a peer decodes into a protocol struct whatever the method (the
	// client info and capabilities of _meta, an error's URL elicitations): a lone key folding
	// to any protocol member name (ProtocolMembers) but spelt otherwise is refused. Params and
	// results are judged by their method's own types instead (checkTyped).
	ScopeTyped
	// ScopeIDMap is an object whose keys are ids (inputRequests, inputResponses): its keys are
	// the sender's, its values are typed.
	ScopeIDMap
	// ScopeErrorData is envelope.error.data, of which the Go SDK client reads members.
	ScopeErrorData
)

// Member names of the JSON-RPC envelope, in the order of envelope.spans.
const (
	memJSONRPC = iota
	memID
	memMethod
	memParams
	memResult
	memError
	numMembers
)

var envelopeKeys = [numMembers]string{"jsonrpc", "id", "method", "params", "result", "error"}

// watched lists, per scope, the names Level 2 reads. Folding is already enforced for every
// pair of keys inside one object; the watched lists add that a lone key folding to a watched name
// ("Method", "paramſ", "NAME") is refused, because a case-insensitive peer (Go's encoding/json
// into a struct, go-sdk before #805) would read it as that member while Level 2 would not.
var watched = [...][]string{
	ScopeEnvelope: envelopeKeys[:],
	ScopeParams:   {"name", "uri", "arguments", "_meta", "protocolVersion", "clientInfo", "capabilities", "cursor"},
	ScopeMeta: {
		MetaProtocolVersion, MetaClientInfo, MetaClientCapabilities,
		"progressToken", "traceparent", "tracestate",
	},
	ScopeError:     {"code", "message", "data"},
	ScopeErrorData: {"elicitations", "supported"},
}

// watchedFolded holds the folded forms of watched, computed once.
var watchedFolded = func() [][][]byte {
	out := make([][][]byte, len(watched))
	for c, names := range watched {
		for _, n := range names {
			out[c] = append(out[c], AppendFolded(nil, []byte(n)))
		}
	}
	return out
}()

// Members returns the names the decoder reads in objects of scope s, spelt as it requires them:
// a key there that folds to one of them (AppendFolded) but is spelt otherwise is refused with
// ErrCaseVariantKey. A rewriter that renames keys must not produce one of them either, or the
// message it writes no longer decodes. The slice is the caller's. In ScopeTyped the protocol
// member names are watched too, and in an MCP method's params and result its types' member
// names (see FoldsToMember, which covers both).
func (s Scope) Members() []string {
	if int(s) >= len(watched) {
		return nil
	}
	return slices.Clone(watched[s])
}

// Reads reports whether name, exactly as spelt, is one of Members (without allocating).
func (s Scope) Reads(name string) bool {
	return int(s) < len(watched) && slices.Contains(watched[s], name)
}

// span is a value's position in the body; end == 0 means absent.
type span struct{ start, end int }

func (s span) present() bool { return s.end > 0 }

// keyEnt is one key of an open object: its exact (unescaped) bytes in scanner.kbuf and its
// folded bytes in scanner.fbuf.
type keyEnt struct{ ks, ke, fs, fe int }

// scanner validates one JSON document in a single pass. It is strict where encoding/json is
// lenient: keys of one object must not be equal or equal under Unicode simple folding (the
// folding encoding/json uses to match struct fields), strings must be valid UTF-8 with no escaped
// lone surrogate, nesting and size are bounded, nothing may follow the value, and the grammar is
// RFC 8259 exactly. While scanning a JSON-RPC envelope it records where the members are.
type scanner struct {
	data     []byte
	pos      int
	depth    int
	maxDepth int
	ents     []keyEnt
	kbuf     []byte // exact keys of the open objects
	fbuf     []byte // folded keys of the open objects
	spans    [numMembers]span
	pspans   [numParamKeys]span // params members Message.Param is asked for (paramKeys)
	// region is memParams or memResult while the scan is inside the envelope's params or result
	// (0 elsewhere); suspect says a key there folds to a protocol member name but is spelt
	// otherwise. Only then is the value judged against its method's types (checkTyped): a
	// second walk that messages without such a key never pay.
	region  int
	suspect [numMembers]bool
}

var scannerPool = sync.Pool{New: func() any { return new(scanner) }}

func getScanner(data []byte, maxDepth int) *scanner {
	s := scannerPool.Get().(*scanner)
	s.data, s.pos, s.depth, s.maxDepth = data, 0, 0, maxDepth
	return s
}

func putScanner(s *scanner) {
	s.data = nil
	s.ents, s.kbuf, s.fbuf = s.ents[:0], s.kbuf[:0], s.fbuf[:0]
	if cap(s.kbuf) > 64<<10 || cap(s.fbuf) > 64<<10 || cap(s.ents) > 4096 {
		return // do not pin the memory of one huge document
	}
	scannerPool.Put(s)
}

func (s *scanner) fail(kind error, format string, args ...any) error {
	return &JSONError{Offset: s.pos, Err: kind, Detail: fmt.Sprintf(format, args...)}
}

func (s *scanner) ws() {
	for s.pos < len(s.data) {
		switch s.data[s.pos] {
		case ' ', '\t', '\n', '\r':
			s.pos++
		default:
			return
		}
	}
}

// value scans any JSON value starting at s.pos (whitespace already skipped).
func (s *scanner) value(c Scope) error {
	if s.pos >= len(s.data) {
		return s.fail(ErrSyntax, "unexpected end of input")
	}
	switch b := s.data[s.pos]; {
	case b == '{':
		return s.object(c)
	case b == '[':
		return s.array(c)
	case b == '"':
		_, err := s.str(nil, false)
		return err
	case b == 't':
		return s.literal("true")
	case b == 'f':
		return s.literal("false")
	case b == 'n':
		return s.literal("null")
	case b == '-' || (b >= '0' && b <= '9'):
		return s.number()
	default:
		return s.fail(ErrSyntax, "unexpected character %q", rune(b))
	}
}

func (s *scanner) literal(lit string) error {
	if len(s.data)-s.pos < len(lit) || string(s.data[s.pos:s.pos+len(lit)]) != lit {
		return s.fail(ErrSyntax, "invalid literal")
	}
	s.pos += len(lit)
	return nil
}

func (s *scanner) digits() int {
	n := 0
	for s.pos < len(s.data) && s.data[s.pos] >= '0' && s.data[s.pos] <= '9' {
		s.pos++
		n++
	}
	return n
}

func (s *scanner) number() error {
	if s.data[s.pos] == '-' {
		s.pos++
	}
	switch {
	case s.pos >= len(s.data):
		return s.fail(ErrSyntax, "truncated number")
	case s.data[s.pos] == '0':
		s.pos++
	case s.data[s.pos] >= '1' && s.data[s.pos] <= '9':
		s.digits()
	default:
		return s.fail(ErrSyntax, "invalid number")
	}
	if s.pos < len(s.data) && s.data[s.pos] == '.' {
		s.pos++
		if s.digits() == 0 {
			return s.fail(ErrSyntax, "invalid number fraction")
		}
	}
	if s.pos < len(s.data) && (s.data[s.pos] == 'e' || s.data[s.pos] == 'E') {
		s.pos++
		if s.pos < len(s.data) && (s.data[s.pos] == '+' || s.data[s.pos] == '-') {
			s.pos++
		}
		if s.digits() == 0 {
			return s.fail(ErrSyntax, "invalid number exponent")
		}
	}
	return nil
}

func (s *scanner) enter() error {
	s.depth++
	if s.depth > s.maxDepth {
		return s.fail(ErrTooDeep, "more than %d levels", s.maxDepth)
	}
	return nil
}

// array scans an array whose elements are typed when the array is a typed member's value (a
// list's entries, content blocks); otherwise they are in no scope.
func (s *scanner) array(c Scope) error {
	if c != ScopeTyped {
		c = ScopeNone
	}
	if err := s.enter(); err != nil {
		return err
	}
	s.pos++ // '['
	s.ws()
	if s.pos < len(s.data) && s.data[s.pos] == ']' {
		s.pos++
		s.depth--
		return nil
	}
	for {
		s.ws()
		if err := s.value(c); err != nil {
			return err
		}
		s.ws()
		if s.pos >= len(s.data) {
			return s.fail(ErrSyntax, "unexpected end of input in array")
		}
		switch s.data[s.pos] {
		case ',':
			s.pos++
		case ']':
			s.pos++
			s.depth--
			return nil
		default:
			return s.fail(ErrSyntax, "expected ',' or ']' in array")
		}
	}
}

// smallObject is the key count up to which duplicates are found by comparing with every earlier
// key; larger objects use a map so that a hostile object of many keys stays linear.
const smallObject = 16

func (s *scanner) object(c Scope) error {
	if err := s.enter(); err != nil {
		return err
	}
	s.pos++ // '{'
	base, kbase, fbase := len(s.ents), len(s.kbuf), len(s.fbuf)
	var index map[string]struct{}
	s.ws()
	if s.pos < len(s.data) && s.data[s.pos] == '}' {
		s.pos++
		s.depth--
		return nil
	}
	for {
		s.ws()
		if s.pos >= len(s.data) || s.data[s.pos] != '"' {
			return s.fail(ErrSyntax, "expected string key")
		}
		keyOff := s.pos
		ks := len(s.kbuf)
		var err error
		s.kbuf, err = s.str(s.kbuf, true)
		if err != nil {
			return err
		}
		ke := len(s.kbuf)
		fs := len(s.fbuf)
		s.fbuf = AppendFolded(s.fbuf, s.kbuf[ks:ke])
		ent := keyEnt{ks, ke, fs, len(s.fbuf)}
		if err := s.checkKey(base, ent, &index, keyOff); err != nil {
			return err
		}
		s.ents = append(s.ents, ent)
		key := s.kbuf[ks:ke]
		if s.region != 0 && !s.suspect[s.region] {
			if m, ok := protocolFolded[string(s.fbuf[ent.fs:ent.fe])]; ok && m != string(key) {
				s.suspect[s.region] = true
			}
		}
		if c != ScopeNone && c != ScopeIDMap {
			if err := s.checkWatched(c, ent, keyOff); err != nil {
				return err
			}
		}
		s.ws()
		if s.pos >= len(s.data) || s.data[s.pos] != ':' {
			return s.fail(ErrSyntax, "expected ':' after object key")
		}
		s.pos++
		s.ws()
		child, member := childScope(c, key, s.pos < len(s.data) && s.data[s.pos] == '{')
		start := s.pos
		if member == memParams || member == memResult {
			s.region = member
		}
		err = s.value(child)
		if c == ScopeEnvelope {
			s.region = 0
		}
		if err != nil {
			return err
		}
		if member >= 0 {
			s.spans[member] = span{start, s.pos}
		} else if c == ScopeParams {
			if pi := paramKey(key); pi >= 0 {
				s.pspans[pi] = span{start, s.pos}
			}
		}
		s.ws()
		if s.pos >= len(s.data) {
			return s.fail(ErrSyntax, "unexpected end of input in object")
		}
		switch s.data[s.pos] {
		case ',':
			s.pos++
		case '}':
			s.pos++
			s.depth--
			s.ents, s.kbuf, s.fbuf = s.ents[:base], s.kbuf[:kbase], s.fbuf[:fbase]
			return nil
		default:
			return s.fail(ErrSyntax, "expected ',' or '}' in object")
		}
	}
}

// checkKey refuses a key equal, or equal under folding, to an earlier key of the same object.
func (s *scanner) checkKey(base int, ent keyEnt, index *map[string]struct{}, off int) error {
	folded := s.fbuf[ent.fs:ent.fe]
	n := len(s.ents) - base
	var clash = -1
	if *index == nil && n < smallObject {
		for i := base; i < len(s.ents); i++ {
			e := s.ents[i]
			if string(s.fbuf[e.fs:e.fe]) == string(folded) {
				clash = i
				break
			}
		}
	} else {
		if *index == nil {
			*index = make(map[string]struct{}, 2*smallObject)
			for i := base; i < len(s.ents); i++ {
				e := s.ents[i]
				(*index)[string(s.fbuf[e.fs:e.fe])] = struct{}{}
			}
		}
		if _, dup := (*index)[string(folded)]; dup {
			for i := base; i < len(s.ents); i++ {
				if e := s.ents[i]; string(s.fbuf[e.fs:e.fe]) == string(folded) {
					clash = i
					break
				}
			}
		} else {
			(*index)[string(folded)] = struct{}{}
		}
	}
	if clash < 0 {
		return nil
	}
	key := s.kbuf[ent.ks:ent.ke]
	prev := s.ents[clash]
	s.pos = off
	if string(s.kbuf[prev.ks:prev.ke]) == string(key) {
		return s.fail(ErrDuplicateKey, "%q", key)
	}
	return s.fail(ErrCaseVariantKey, "%q and %q", s.kbuf[prev.ks:prev.ke], key)
}

func (s *scanner) checkWatched(c Scope, ent keyEnt, off int) error {
	folded := s.fbuf[ent.fs:ent.fe]
	key := s.kbuf[ent.ks:ent.ke]
	if c == ScopeTyped {
		if m, ok := protocolFolded[string(folded)]; ok && m != string(key) {
			s.pos = off
			return s.fail(ErrCaseVariantKey, "%q is not the member %q", key, m)
		}
	}
	if int(c) >= len(watchedFolded) {
		return nil
	}
	for i, w := range watchedFolded[c] {
		if string(w) == string(folded) && watched[c][i] != string(key) {
			s.pos = off
			return s.fail(ErrCaseVariantKey, "%q is not the member %q", key, watched[c][i])
		}
	}
	return nil
}

// paramKeys are the members of params that Level 2 looks up on every message (Message.Param):
// the scan records where they are, so that a lookup is no second walk over the params (which
// skips every argument string again).
var paramKeys = [...]string{"name", "uri", "arguments", "_meta", "protocolVersion", "clientInfo",
	"capabilities", "cursor", "inputResponses", "requestState"}

const numParamKeys = len(paramKeys)

func paramKey(key []byte) int {
	for i, k := range paramKeys {
		if string(key) == k {
			return i
		}
	}
	return -1
}

// childScope gives the context of a member's value (object says the value is an object) and, in
// an envelope, which member it is.
func childScope(c Scope, key []byte, object bool) (Scope, int) {
	switch c {
	case ScopeEnvelope:
		for i, k := range envelopeKeys {
			if string(key) == k {
				switch i {
				case memParams:
					return ScopeParams, i
				case memResult:
					// Judged by the type of its request's method, which the message does
					// not name (Message.CheckResult).
					return ScopeNone, i
				case memError:
					return ScopeError, i
				}
				return ScopeNone, i
			}
		}
	case ScopeParams:
		// The rest of params is judged by its method's types once the method is known (a
		// custom method's params are the sender's own).
		if string(key) == "_meta" {
			return ScopeMeta, -1
		}
	case ScopeTyped:
		return typedChild(key, object), -1
	case ScopeMeta:
		if string(key) == MetaClientInfo || string(key) == MetaClientCapabilities {
			return ScopeTyped, -1
		}
	case ScopeError:
		if string(key) == "data" {
			return ScopeErrorData, -1
		}
	case ScopeErrorData:
		if string(key) == "elicitations" {
			return ScopeTyped, -1
		}
	case ScopeIDMap:
		return ScopeTyped, -1
	}
	return ScopeNone, -1
}

// typedChild is the scope of the value of member key of a typed object: typed again when the
// peers decode it into a struct, none when into a map or an any (free-form values whose keys are
// the sender's, such as a tool's arguments or inputSchema), or when the member is not one of the
// protocol's.
func typedChild(key []byte, object bool) Scope {
	switch string(key) {
	case "_meta", "structuredContent", "inputSchema", "outputSchema", "requestedSchema", "data",
		"experimental", "extensions", "metadata", "input", "progressToken", "requestId":
		return ScopeNone
	case "arguments", "content":
		// A tool's or prompt's arguments and an elicitation result's content are maps; a
		// prompt's argument list and a result's content blocks are arrays of structs.
		if object {
			return ScopeNone
		}
		return ScopeTyped
	case "inputRequests", "inputResponses":
		return ScopeIDMap
	}
	if protocolExact[string(key)] {
		return ScopeTyped
	}
	return ScopeNone
}

// plainASCII marks the bytes a string holds as they are: printable ASCII but '"' and '\\'.
var plainASCII = func() (t [256]bool) {
	for b := 0x20; b < utf8.RuneSelf; b++ {
		t[b] = b != '"' && b != '\\'
	}
	return t
}()

// str scans a string starting at the opening quote. With want it appends the unescaped
// contents to dst. Invalid UTF-8, control characters and escaped lone surrogates are refused:
// encoding/json would silently turn them into U+FFFD while other peers keep or reject them, and
// any such disagreement on a key or a name is a smuggling hole.
func (s *scanner) str(dst []byte, want bool) ([]byte, error) {
	s.pos++ // opening quote
	start := s.pos
	for s.pos < len(s.data) {
		// Fast path over plain ASCII, in locals so the loop keeps them in registers.
		data, i := s.data, s.pos
		for i < len(data) && plainASCII[data[i]] {
			i++
		}
		s.pos = i
		if i >= len(data) {
			break
		}
		b := data[i]
		switch {
		case b == '"':
			if want {
				dst = append(dst, s.data[start:s.pos]...)
			}
			s.pos++
			return dst, nil
		case b == '\\':
			if want {
				dst = append(dst, s.data[start:s.pos]...)
			}
			var err error
			if dst, err = s.escape(dst, want); err != nil {
				return dst, err
			}
			start = s.pos
		case b < 0x20:
			return dst, s.fail(ErrSyntax, "control character in string")
		case b < utf8.RuneSelf:
			s.pos++
		default:
			r, n := utf8.DecodeRune(s.data[s.pos:])
			if r == utf8.RuneError && n == 1 {
				return dst, s.fail(ErrInvalidUTF8, "in string")
			}
			s.pos += n
		}
	}
	return dst, s.fail(ErrSyntax, "unterminated string")
}

func (s *scanner) escape(dst []byte, want bool) ([]byte, error) {
	s.pos++ // backslash
	if s.pos >= len(s.data) {
		return dst, s.fail(ErrSyntax, "truncated escape")
	}
	c := s.data[s.pos]
	s.pos++
	var out byte
	switch c {
	case '"', '\\', '/':
		out = c
	case 'b':
		out = '\b'
	case 'f':
		out = '\f'
	case 'n':
		out = '\n'
	case 'r':
		out = '\r'
	case 't':
		out = '\t'
	case 'u':
		r, ok := s.hex4()
		if !ok {
			return dst, s.fail(ErrSyntax, "invalid \\u escape")
		}
		switch {
		case r >= 0xDC00 && r <= 0xDFFF:
			return dst, s.fail(ErrLoneSurrogate, "low surrogate \\u%04x without a high one", r)
		case r >= 0xD800 && r <= 0xDBFF:
			if len(s.data)-s.pos < 2 || s.data[s.pos] != '\\' || s.data[s.pos+1] != 'u' {
				return dst, s.fail(ErrLoneSurrogate, "high surrogate \\u%04x not followed by a low one", r)
			}
			s.pos += 2
			r2, ok := s.hex4()
			if !ok {
				return dst, s.fail(ErrSyntax, "invalid \\u escape")
			}
			if r2 < 0xDC00 || r2 > 0xDFFF {
				return dst, s.fail(ErrLoneSurrogate, "high surrogate \\u%04x followed by \\u%04x", r, r2)
			}
			r = 0x10000 + (r-0xD800)<<10 + (r2 - 0xDC00)
		}
		if want {
			dst = utf8.AppendRune(dst, r)
		}
		return dst, nil
	default:
		s.pos--
		return dst, s.fail(ErrSyntax, "invalid escape \\%c", c)
	}
	if want {
		dst = append(dst, out)
	}
	return dst, nil
}

func (s *scanner) hex4() (rune, bool) {
	r, ok := Hex4(s.data[s.pos:])
	if ok {
		s.pos += 4
	}
	return r, ok
}

// Hex4 is the code unit of a JSON \u escape: the 4 hex digits b starts with (either case).
func Hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[:4] {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}

// AppendFolded appends the folded form of a valid UTF-8 key: two keys fold equal exactly when
// bytes.EqualFold says so, which is the rule encoding/json uses to match keys to struct fields
// (including U+017F ſ ~ s and U+212A K ~ k), and the rule by which the decoder refuses two keys
// of one object (ErrCaseVariantKey). A key that is not valid UTF-8 folds to an unspecified form.
func AppendFolded(dst, key []byte) []byte {
	for i := 0; i < len(key); {
		c := key[i]
		if c < utf8.RuneSelf {
			if 'a' <= c && c <= 'z' {
				c -= 'a' - 'A'
			}
			dst = append(dst, c)
			i++
			continue
		}
		r, n := utf8.DecodeRune(key[i:])
		dst = utf8.AppendRune(dst, foldRune(r))
		i += n
	}
	return dst
}

// foldRune returns the smallest rune of r's simple-folding orbit.
func foldRune(r rune) rune {
	for {
		r2 := unicode.SimpleFold(r)
		if r2 <= r {
			return r2
		}
		r = r2
	}
}

// Unquote returns the contents of the JSON string raw (quotes included), unescaped by the
// decoder's own rules, so that it reads what Decode read. raw must be a string that Decode or
// ValidateJSON accepted (a sub-slice of a validated body); other input gives an unspecified
// result and may panic.
func Unquote(raw []byte) string {
	inner := raw[1 : len(raw)-1]
	hasEsc := false
	for _, b := range inner {
		if b == '\\' {
			hasEsc = true
			break
		}
	}
	if !hasEsc {
		return string(inner)
	}
	s := scanner{data: raw}
	out, _ := s.str(make([]byte, 0, len(inner)), true)
	return string(out)
}

// ValidateJSON checks that body is one strict JSON document of any type, by every rule of Decode
// that is about JSON rather than JSON-RPC: RFC 8259 grammar exactly, no duplicate or fold-equal
// keys in one object, valid UTF-8 with no escaped lone surrogate, at most maxDepth levels of
// nesting, nothing after the value but JSON whitespace. Its errors are *JSONError. The fuzz
// tests hold its grammar to encoding/json's.
func ValidateJSON(body []byte, maxDepth int) error {
	s := getScanner(body, maxDepth)
	defer putScanner(s)
	s.ws()
	if err := s.value(ScopeNone); err != nil {
		return err
	}
	s.ws()
	if s.pos != len(body) {
		return s.fail(ErrSyntax, "data after the JSON value")
	}
	return nil
}
