package level2

import (
	"container/list"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/google/jsonschema-go/jsonschema"

	"mcpintercept/mcp"
)

// Tool input schemas learnt from tools/list responses, to check tools/call arguments before the
// server sees them (a route's validate_arguments). They are kept per server and session (per
// server alone for a stateless server, whose every client sees the same list), bounded and
// expiring: a server's list can change, and a session that ended must not hold memory.
const (
	DefaultSchemaEntries = 1000             // servers × sessions remembered
	maxToolsPerEntry     = 4096             // tools of one list remembered
	maxSchemaBytes       = 256 << 10        // one tool's inputSchema
	maxEntryBytes        = 8 << 20          // every schema of one entry
	DefaultSchemaTTL     = 30 * time.Minute // since the list was last seen
)

// schemaStore is the bounded, expiring memory of input schemas; safe for concurrent use.
type schemaStore struct {
	mu    sync.Mutex
	max   int
	ttl   time.Duration
	now   func() time.Time
	order *list.List // of *schemaEntry, most recent first
	byKey map[string]*list.Element
}

type schemaEntry struct {
	key   string
	seen  time.Time
	bytes int
	tools map[string]*toolSchema
}

// toolSchema is one tool's input schema: the raw bytes as listed, compiled on first use.
type toolSchema struct {
	raw      []byte
	once     sync.Once
	resolved *jsonschema.Resolved
	plan     *schemaPlan
	err      error // the schema could not be compiled: arguments are not checked against it
	refused  error // the schema is over a bound (schema_bounds.go): the tool's calls are refused
}

// oversizeSchema stands for a listed schema too large to keep: its calls are refused, since
// skipping them would let a server opt out of validation by padding its schema.
func oversizeSchema() *toolSchema {
	ts := &toolSchema{refused: refuseSchema("more than %d bytes", maxSchemaBytes)}
	ts.once.Do(func() {})
	return ts
}

func newSchemaStore(max int, ttl time.Duration) *schemaStore {
	if max <= 0 {
		max = DefaultSchemaEntries
	}
	if ttl <= 0 {
		ttl = DefaultSchemaTTL
	}
	return &schemaStore{max: max, ttl: ttl, now: time.Now, order: list.New(), byKey: map[string]*list.Element{}}
}

// learn records the schemas of one page of a tools/list; first is true for the first page (no
// cursor), which replaces what the entry held.
func (s *schemaStore) learn(key string, first bool, tools map[string][]byte) {
	if s == nil || len(tools) == 0 && !first {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var e *schemaEntry
	if el, ok := s.byKey[key]; ok {
		e = el.Value.(*schemaEntry)
		s.order.MoveToFront(el)
	} else {
		if s.order.Len() >= s.max {
			last := s.order.Back()
			s.order.Remove(last)
			delete(s.byKey, last.Value.(*schemaEntry).key)
		}
		e = &schemaEntry{key: key}
		s.byKey[key] = s.order.PushFront(e)
	}
	if first || e.tools == nil || s.now().Sub(e.seen) > s.ttl {
		e.tools, e.bytes = map[string]*toolSchema{}, 0
	}
	e.seen = s.now()
	for name, raw := range tools {
		if len(e.tools) >= maxToolsPerEntry || e.bytes+len(raw) > maxEntryBytes {
			break
		}
		if old, ok := e.tools[name]; ok {
			e.bytes -= len(old.raw)
		}
		ts := &toolSchema{raw: raw}
		if len(raw) > maxSchemaBytes {
			ts = oversizeSchema()
		}
		e.tools[name] = ts
		e.bytes += len(ts.raw)
	}
}

// forget drops an entry (the server said its list changed).
func (s *schemaStore) forget(key string) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if el, ok := s.byKey[key]; ok {
		s.order.Remove(el)
		delete(s.byKey, key)
	}
}

// lookup returns the schema of tool, or nil when it is not known (or expired).
func (s *schemaStore) lookup(key, tool string) *toolSchema {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	el, ok := s.byKey[key]
	if !ok {
		return nil
	}
	e := el.Value.(*schemaEntry)
	if s.now().Sub(e.seen) > s.ttl {
		s.order.Remove(el)
		delete(s.byKey, key)
		return nil
	}
	return e.tools[tool]
}

func (s *schemaStore) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.order.Len()
}

// compile resolves the schema once. No remote reference is ever fetched: a schema that needs
// one is not checked. The raw bytes are bounded before they are decoded and the resolved schema
// before it is used (planSchema): one over a bound is refused, never validated.
func (t *toolSchema) compile() (*jsonschema.Resolved, *schemaPlan, error) {
	t.once.Do(func() {
		if t.refused = checkRawSchema(t.raw); t.refused != nil {
			return
		}
		var sc jsonschema.Schema
		if err := json.Unmarshal(t.raw, &sc); err != nil {
			t.err = fmt.Errorf("inputSchema does not decode: %w", err)
			return
		}
		if t.resolved, t.err = sc.Resolve(nil); t.err != nil {
			return
		}
		t.plan, t.refused = planSchema(&sc)
	})
	return t.resolved, t.plan, t.err
}

// verdict is the outcome of checking one call's arguments.
type verdict struct {
	problem string // where and why the arguments do not conform ("" when they do)
	schema  string // why the schema is refused (a bound of schema_bounds.go), "" when it is not
	budget  string // why these arguments are refused unchecked (the work budget), "" when not
	checked bool   // false: the schema cannot be used and the arguments were not checked
}

// validate checks args against the schema within the bounds of schema_bounds.go and the work
// budget of schema_budget.go. It never quotes an argument value: problems name the failing
// place and keyword only.
func (t *toolSchema) validate(args map[string]any) verdict {
	rs, plan, err := t.compile()
	if t.refused != nil {
		return verdict{schema: t.refused.Error(), checked: true}
	}
	if err != nil {
		return verdict{}
	}
	if args == nil {
		args = map[string]any{}
	}
	inst, tree, err := toInstance(args, 1)
	if err == nil {
		err = budgetValidation(plan, tree)
	}
	if err != nil {
		return verdict{budget: err.Error(), checked: true}
	}
	verr := rs.Validate(inst)
	if verr == nil {
		return verdict{checked: true}
	}
	if strings.Contains(verr.Error(), "cannot validate version") {
		return verdict{}
	}
	return verdict{problem: describeSchemaError(verr.Error()), checked: true}
}

var (
	validatingRE = regexp.MustCompile(`validating ([^:]*): `)
	wantTypeRE   = regexp.MustCompile(`has type "([a-z]+)", want (.+)$`)
)

// describeSchemaError turns the library's message ("validating root: validating
// /properties/a: type: two has type "string", want "number"") into the failing instance path and
// the keyword, leaving out the instance's value (it may be a secret, and it goes to the log).
func describeSchemaError(msg string) string {
	if i := strings.IndexByte(msg, '\n'); i >= 0 {
		msg = msg[:i]
	}
	schemaPath := ""
	rest := msg
	for {
		m := validatingRE.FindStringSubmatchIndex(rest)
		if m == nil || m[0] != 0 {
			break
		}
		schemaPath = rest[m[2]:m[3]]
		rest = rest[m[1]:]
	}
	keyword, detail, _ := strings.Cut(rest, ":")
	keyword = strings.TrimSpace(keyword)
	out := instancePath(schemaPath) + ": " + keyword
	switch keyword {
	case "type":
		if m := wantTypeRE.FindStringSubmatch(detail); m != nil {
			out += " is " + m[1] + ", want " + m[2]
		}
	case "required", "additionalProperties", "unexpected additional properties":
		out += ":" + oneLine(detail)
	}
	if strings.HasPrefix(rest, "unexpected additional properties") {
		out = instancePath(schemaPath) + ": " + oneLine(rest)
	}
	return out
}

// instancePath turns a schema location (/properties/a/items) into the argument it constrains
// (arguments.a[*]).
func instancePath(schemaPath string) string {
	p := "arguments"
	if schemaPath == "" || schemaPath == "root" {
		return p
	}
	segs := strings.Split(strings.TrimPrefix(schemaPath, "/"), "/")
	for i := 0; i < len(segs); i++ {
		switch segs[i] {
		case "properties", "patternProperties":
			if i+1 < len(segs) {
				p += "." + strings.ReplaceAll(strings.ReplaceAll(segs[i+1], "~1", "/"), "~0", "~")
				i++
			}
		case "items", "additionalItems":
			p += "[*]"
		case "prefixItems":
			if i+1 < len(segs) {
				p += "[" + segs[i+1] + "]"
				i++
			}
		case "additionalProperties":
			p += ".*"
		case "allOf", "anyOf", "oneOf", "$defs", "definitions":
			i++ // the index or name that follows says nothing about the instance
		}
	}
	return p
}

// toolSchemas extracts name → inputSchema from a tools/list result.
func toolSchemas(result []byte) map[string][]byte {
	arr, ok := mcp.Member(result, "tools")
	if !ok || len(arr) == 0 || arr[0] != '[' {
		return nil
	}
	out := map[string][]byte{}
	for _, e := range mcp.Elements(arr) {
		t := arr[e[0]:e[1]]
		if !mcp.IsObject(t) {
			continue
		}
		name, ok := mcp.StringMember(t, "name")
		if !ok {
			continue
		}
		sc, ok := mcp.Member(t, "inputSchema")
		if !ok || !mcp.IsObject(sc) {
			continue
		}
		if len(sc) > maxSchemaBytes {
			out[name] = sc[:maxSchemaBytes+1] // only its length is kept (learn)
			continue
		}
		out[name] = append([]byte(nil), sc...)
	}
	return out
}
