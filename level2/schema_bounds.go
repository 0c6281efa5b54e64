package level2

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strconv"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"
)

// Bounds on a learnt input schema, checked once before the schema is ever used to validate.
// The schema is the server's: a hostile or careless server must not be able to make the
// appliance recurse without end (a $ref that reaches itself on the same value overflows the
// goroutine stack, a fatal error recover cannot catch) or explode (nested anyOf through shared
// $defs costs 2^depth evaluations per value). A schema over a bound is refused: the tool's
// calls get -32602 naming the appliance, never an unbounded validation.
//
// Cycles: a $ref chain that returns to a schema without descending into the instance
// (through $ref, allOf, anyOf, oneOf, not, if/then/else, dependentSchemas) is refused: it never
// terminates on any value. A cycle that passes through properties, items or another keyword
// that moves to a child value is allowed: recursive tree types (a node whose children are
// nodes) are real, and such a cycle ends with the instance, whose depth is bounded
// (DefaultMaxDepth); its cost is charged to the per-call work budget (schema_budget.go).
const (
	maxSchemaJSONDepth = 128 // nesting of JSON objects/arrays in the raw schema, checked before decoding
	// maxSchemaParseWork bounds the library's decoding, which re-reads every subschema's bytes
	// at each level above it (Schema.UnmarshalJSON decodes its raw members again): its cost is
	// the sum over the bytes of their nesting depth. 512 Ki byte-levels is ~20 ms once per
	// listed tool (BenchmarkValidateHostileCompile); a 64 KiB schema of average depth 8 fits.
	maxSchemaParseWork = 512 << 10
	maxSchemaDepth     = 32   // nesting of subschemas in subschemas
	maxSchemaNodes     = 8192 // subschemas in one schema
	// maxInPlaceEvals bounds the evaluations one value costs at one schema before any keyword
	// moves to a child value: the size of the unfolded tree of $ref and combinators. A legitimate
	// schema's anyOf/oneOf/allOf lists stay in the tens; 2^18 is the exponential attack.
	maxInPlaceEvals = 1024
)

// errSchemaBound is the class of a schema refused by a bound.
var errSchemaBound = errors.New("input schema over a bound")

// schemaRefusal says which bound a schema broke, for the record and the client.
type schemaRefusal struct{ why string }

func (r *schemaRefusal) Error() string      { return r.why }
func (r *schemaRefusal) Unwrap() error      { return errSchemaBound }
func refuseSchema(f string, a ...any) error { return &schemaRefusal{why: fmt.Sprintf(f, a...)} }

// snode is one subschema with the edges validation follows from it, resolved once.
type snode struct {
	s    *jsonschema.Schema
	path string // JSON pointer from the root ("" for the root)

	// Evaluated on the same value. seq: the first failure returns (its message propagates).
	// anyOf: every branch runs and a failure joins all their messages. absorbed: failures are
	// discarded (oneOf, not, if).
	seq, anyOf, absorbed []*snode

	// Evaluated on child values.
	props                                      map[string]*snode
	patterns                                   []*snode
	patternRE                                  []*regexp.Regexp // the walk matches keys as the library does
	patternLen                                 []int            // program size of each pattern, for the regexp cost
	additional, unevalProps, propNames         *snode
	prefix                                     []*snode
	items, additionalItems, contains, unevItem *snode

	falsyAdditional bool  // additionalProperties false: the message lists every extra key
	work            int64 // static work units of one evaluation (schema_budget.go)
	wrapText        int64 // bytes of "validating <name>: " the library wraps its failures in
	local           int64 // static bound on the bytes of its own keywords' error message
	anyOfText       int64 // bytes of a failed anyOf's message besides its branches' messages
	enumBytes       int64 // size of enum and const values, compared against the instance
	enumLen         int
	stringChecks    bool // minLength/maxLength: the string is counted
	patternSelf     int  // program size of pattern when one applies to a string instance, else 0
	uniqueItems     bool

	closure int // evaluations of one value here before moving to a child value; 0 = not computed
	state   int8
}

// schemaPlan is a schema that passed the bounds, ready for budgeted validation.
type schemaPlan struct {
	root  *snode
	nodes int
}

// checkRawSchema bounds the raw bytes before encoding/json builds anything from them.
func checkRawSchema(raw []byte) error {
	if len(raw) > maxSchemaBytes {
		return refuseSchema("%d bytes, more than %d", len(raw), maxSchemaBytes)
	}
	d, work := jsonDepth(raw)
	if d > maxSchemaJSONDepth {
		return refuseSchema("JSON nesting deeper than %d", maxSchemaJSONDepth)
	}
	if work > maxSchemaParseWork {
		return refuseSchema("too large for its nesting (%d byte-levels to decode, more than %d)", work, maxSchemaParseWork)
	}
	return nil
}

// jsonDepth is the deepest nesting of objects and arrays in b (strings skipped) and the sum over
// its bytes of their depth, counted without recursion so that the check itself cannot be made
// to overflow.
func jsonDepth(b []byte) (int, int64) {
	depth, max, inStr := 0, 0, false
	var work int64
	for i := 0; i < len(b); i++ {
		work += int64(depth)
		c := b[i]
		switch {
		case inStr && c == '\\':
			i++
		case c == '"':
			inStr = !inStr
		case inStr:
		case c == '{' || c == '[':
			depth++
			if depth > max {
				max = depth
			}
		case c == '}' || c == ']':
			depth--
		}
	}
	return max, work
}

// planSchema checks a schema the library resolved against the bounds and records the edges
// validation will follow. It mirrors the library's resolution (validate.go and resolve.go of
// jsonschema-go): where it cannot be sure to reach the same targets it refuses rather than guess
// low.
func planSchema(root *jsonschema.Schema) (*schemaPlan, error) {
	b := &planBuilder{byPtr: map[*jsonschema.Schema]*snode{}, anchors: map[string][]*snode{}, dynAnchors: map[string][]*snode{}}
	b.draft7 = isDraft7(root.Schema)
	if err := b.collect(root, "", 0); err != nil {
		return nil, err
	}
	for _, n := range b.order {
		if err := b.link(n); err != nil {
			return nil, err
		}
	}
	rn := b.byPtr[root]
	for _, n := range b.order {
		if _, err := n.inPlaceClosure(); err != nil {
			return nil, err
		}
	}
	return &schemaPlan{root: rn, nodes: len(b.order)}, nil
}

func isDraft7(v string) bool {
	return v == "http://json-schema.org/draft-07/schema#" || v == "https://json-schema.org/draft-07/schema#"
}

type planBuilder struct {
	draft7     bool
	byPtr      map[*jsonschema.Schema]*snode
	order      []*snode
	anchors    map[string][]*snode
	dynAnchors map[string][]*snode
	root       *snode
}

// collect records every subschema with its path and anchors, bounding depth and count.
func (b *planBuilder) collect(s *jsonschema.Schema, path string, depth int) error {
	if depth > maxSchemaDepth {
		return refuseSchema("subschemas nested deeper than %d at %s", maxSchemaDepth, ptrText(path))
	}
	if len(b.order) >= maxSchemaNodes {
		return refuseSchema("more than %d subschemas", maxSchemaNodes)
	}
	if _, dup := b.byPtr[s]; dup {
		return refuseSchema("subschema %s appears twice", ptrText(path))
	}
	n := &snode{s: s, path: path}
	b.byPtr[s] = n
	b.order = append(b.order, n)
	if b.root == nil {
		b.root = n
	}
	if err := b.noteAnchors(n, depth); err != nil {
		return err
	}
	var err error
	eachChild(s, func(seg string, c *jsonschema.Schema) bool {
		if c == nil {
			err = refuseSchema("null subschema at %s", ptrText(path+"/"+seg))
			return false
		}
		err = b.collect(c, path+"/"+seg, depth+1)
		return err == nil
	})
	return err
}

// noteAnchors indexes $anchor and $dynamicAnchor (draft 7: "$id": "#name"). A $id that sets a
// new base below the root would scope $refs differently; those are refused (tool schemas do not
// use them).
func (b *planBuilder) noteAnchors(n *snode, depth int) error {
	s := n.s
	if s.ID != "" && depth > 0 && !(b.draft7 && s.Ref != "") {
		if b.draft7 && strings.HasPrefix(s.ID, "#") {
			name := strings.TrimPrefix(s.ID, "#")
			b.anchors[name] = append(b.anchors[name], n)
		} else {
			return refuseSchema("$id below the root at %s is not supported", ptrText(n.path))
		}
	}
	if !b.draft7 {
		if s.Anchor != "" {
			b.anchors[s.Anchor] = append(b.anchors[s.Anchor], n)
		}
		if s.DynamicAnchor != "" {
			b.anchors[s.DynamicAnchor] = append(b.anchors[s.DynamicAnchor], n)
			b.dynAnchors[s.DynamicAnchor] = append(b.dynAnchors[s.DynamicAnchor], n)
		}
	}
	return nil
}

// link resolves n's references and sorts its subschemas by how validation uses them.
func (b *planBuilder) link(n *snode) error {
	s := n.s
	if s.Ref != "" {
		ts, err := b.resolveRef(s.Ref, false)
		if err != nil {
			return refuseSchema("$ref %q at %s: %v", s.Ref, ptrText(n.path), err)
		}
		n.seq = append(n.seq, ts...)
	}
	if s.DynamicRef != "" {
		ts, err := b.resolveRef(s.DynamicRef, true)
		if err != nil {
			return refuseSchema("$dynamicRef %q at %s: %v", s.DynamicRef, ptrText(n.path), err)
		}
		n.seq = append(n.seq, ts...)
	}
	get := func(c *jsonschema.Schema) *snode {
		if c == nil {
			return nil
		}
		return b.byPtr[c]
	}
	list := func(cs []*jsonschema.Schema) []*snode {
		out := make([]*snode, 0, len(cs))
		for _, c := range cs {
			out = append(out, b.byPtr[c])
		}
		return out
	}
	n.seq = append(n.seq, list(s.AllOf)...)
	for _, c := range []*jsonschema.Schema{s.Then, s.Else} {
		if c != nil {
			n.seq = append(n.seq, b.byPtr[c])
		}
	}
	for _, m := range []map[string]*jsonschema.Schema{s.DependentSchemas, s.DependencySchemas} {
		for _, c := range m {
			n.seq = append(n.seq, b.byPtr[c])
		}
	}
	n.anyOf = list(s.AnyOf)
	n.absorbed = list(s.OneOf)
	for _, c := range []*jsonschema.Schema{s.Not, s.If} {
		if c != nil {
			n.absorbed = append(n.absorbed, b.byPtr[c])
		}
	}
	if len(s.Properties) > 0 {
		n.props = make(map[string]*snode, len(s.Properties))
		for k, c := range s.Properties {
			n.props[k] = b.byPtr[c]
		}
	}
	for p, c := range s.PatternProperties {
		re, err := regexp.Compile(p)
		if err != nil {
			return refuseSchema("patternProperties %q at %s: %v", p, ptrText(n.path), err)
		}
		n.patterns = append(n.patterns, b.byPtr[c])
		n.patternRE = append(n.patternRE, re)
		n.patternLen = append(n.patternLen, regexpInsts(p))
	}
	n.additional, n.unevalProps, n.propNames = get(s.AdditionalProperties), get(s.UnevaluatedProperties), get(s.PropertyNames)
	n.falsyAdditional = s.AdditionalProperties != nil && s.AdditionalProperties.Not != nil
	n.prefix = list(append(append([]*jsonschema.Schema(nil), s.PrefixItems...), s.ItemsArray...))
	n.items, n.additionalItems, n.contains, n.unevItem = get(s.Items), get(s.AdditionalItems), get(s.Contains), get(s.UnevaluatedItems)
	n.stringChecks = s.MinLength != nil || s.MaxLength != nil
	if s.Pattern != "" {
		n.patternSelf = regexpInsts(s.Pattern)
	}
	n.uniqueItems = s.UniqueItems
	n.price()
	return nil
}

// resolveRef finds what a fragment-only $ref ("#", "#/json/pointer", "#anchor") names. A
// $dynamicRef also reaches every $dynamicAnchor of its name: which one depends on the stack at
// validation time, so all are charged.
func (b *planBuilder) resolveRef(ref string, dynamic bool) ([]*snode, error) {
	u, err := url.Parse(ref)
	if err != nil {
		return nil, fmt.Errorf("not a URI reference: %w", err)
	}
	if u.Scheme != "" || u.Host != "" || u.Path != "" || u.RawQuery != "" || u.Opaque != "" {
		return nil, errors.New("only references within the schema (#...) are supported")
	}
	frag := u.Fragment
	if frag == "" || strings.HasPrefix(frag, "/") {
		t, err := b.pointer(frag)
		if err != nil {
			return nil, err
		}
		return []*snode{t}, nil
	}
	out := append([]*snode(nil), b.anchors[frag]...)
	if dynamic {
		out = append(out, b.dynAnchors[frag]...)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no anchor %q", frag)
	}
	return out, nil
}

// pointer follows a JSON pointer from the root through schema keywords, as the library's
// dereferenceJSONPointer does.
func (b *planBuilder) pointer(ptr string) (*snode, error) {
	if ptr == "" {
		return b.root, nil
	}
	segs := strings.Split(ptr[1:], "/")
	cur := b.root.s
	for i := 0; i < len(segs); i++ {
		kw := unescapePtr(segs[i])
		arg := ""
		if i+1 < len(segs) {
			arg = unescapePtr(segs[i+1])
		}
		next, used, ok := childAt(cur, kw, arg, i+1 < len(segs))
		if !ok || next == nil {
			return nil, fmt.Errorf("pointer %q does not reach a subschema", ptr)
		}
		if used {
			i++
		}
		cur = next
	}
	n, ok := b.byPtr[cur]
	if !ok {
		return nil, fmt.Errorf("pointer %q reaches an unknown subschema", ptr)
	}
	return n, nil
}

// childAt is the subschema under keyword kw (and, for a list or map keyword, its index or key
// arg); used says whether arg was consumed.
func childAt(s *jsonschema.Schema, kw, arg string, hasArg bool) (c *jsonschema.Schema, used, ok bool) {
	switch kw {
	case "additionalItems":
		return s.AdditionalItems, false, true
	case "additionalProperties":
		return s.AdditionalProperties, false, true
	case "contains":
		return s.Contains, false, true
	case "contentSchema":
		return s.ContentSchema, false, true
	case "else":
		return s.Else, false, true
	case "if":
		return s.If, false, true
	case "not":
		return s.Not, false, true
	case "propertyNames":
		return s.PropertyNames, false, true
	case "then":
		return s.Then, false, true
	case "unevaluatedItems":
		return s.UnevaluatedItems, false, true
	case "unevaluatedProperties":
		return s.UnevaluatedProperties, false, true
	case "items":
		if s.Items != nil {
			return s.Items, false, true
		}
		return index(s.ItemsArray, arg, hasArg)
	case "allOf":
		return index(s.AllOf, arg, hasArg)
	case "anyOf":
		return index(s.AnyOf, arg, hasArg)
	case "oneOf":
		return index(s.OneOf, arg, hasArg)
	case "prefixItems":
		return index(s.PrefixItems, arg, hasArg)
	case "$defs":
		return key(s.Defs, arg, hasArg)
	case "definitions":
		return key(s.Definitions, arg, hasArg)
	case "properties":
		return key(s.Properties, arg, hasArg)
	case "patternProperties":
		return key(s.PatternProperties, arg, hasArg)
	case "dependentSchemas":
		return key(s.DependentSchemas, arg, hasArg)
	case "dependencies":
		return key(s.DependencySchemas, arg, hasArg)
	}
	return nil, false, false
}

func index(l []*jsonschema.Schema, arg string, hasArg bool) (*jsonschema.Schema, bool, bool) {
	if !hasArg || len(arg) > 1 && arg[0] == '0' {
		return nil, false, false
	}
	i, err := strconv.Atoi(arg)
	if err != nil || i < 0 || i >= len(l) {
		return nil, false, false
	}
	return l[i], true, true
}

func key(m map[string]*jsonschema.Schema, arg string, hasArg bool) (*jsonschema.Schema, bool, bool) {
	c, ok := m[arg]
	return c, true, ok && hasArg
}

// eachChild calls f with every direct subschema and its pointer segment(s), in the library's
// keyword set (resolve.go checkStructure); f returns false to stop.
func eachChild(s *jsonschema.Schema, f func(seg string, c *jsonschema.Schema) bool) {
	one := func(kw string, c *jsonschema.Schema) bool { return c == nil || f(kw, c) }
	many := func(kw string, l []*jsonschema.Schema) bool {
		for i, c := range l {
			if !f(kw+"/"+strconv.Itoa(i), c) {
				return false
			}
		}
		return true
	}
	byKey := func(kw string, m map[string]*jsonschema.Schema) bool {
		for k, c := range m {
			if !f(kw+"/"+escapePtr(k), c) {
				return false
			}
		}
		return true
	}
	_ = one("additionalItems", s.AdditionalItems) && one("additionalProperties", s.AdditionalProperties) &&
		one("contains", s.Contains) && one("contentSchema", s.ContentSchema) && one("else", s.Else) &&
		one("if", s.If) && one("items", s.Items) && one("not", s.Not) && one("propertyNames", s.PropertyNames) &&
		one("then", s.Then) && one("unevaluatedItems", s.UnevaluatedItems) &&
		one("unevaluatedProperties", s.UnevaluatedProperties) &&
		many("allOf", s.AllOf) && many("anyOf", s.AnyOf) && many("oneOf", s.OneOf) &&
		many("prefixItems", s.PrefixItems) && many("items", s.ItemsArray) &&
		byKey("$defs", s.Defs) && byKey("definitions", s.Definitions) && byKey("properties", s.Properties) &&
		byKey("patternProperties", s.PatternProperties) && byKey("dependentSchemas", s.DependentSchemas) &&
		byKey("dependencies", s.DependencySchemas)
}

var ptrEscaper = strings.NewReplacer("~", "~0", "/", "~1")
var ptrUnescaper = strings.NewReplacer("~1", "/", "~0", "~")

func escapePtr(s string) string   { return ptrEscaper.Replace(s) }
func unescapePtr(s string) string { return ptrUnescaper.Replace(s) }

// ptrText names a subschema for people: "#" for the root, else "#/pointer".
func ptrText(path string) string { return "#" + path }

// inPlaceClosure is the number of evaluations one value costs at n before any keyword moves to
// a child value (n itself, its $ref targets and combinators, unfolded). Finding n again while
// computing it is a cycle that never consumes the instance: refused.
func (n *snode) inPlaceClosure() (int, error) {
	switch n.state {
	case 2:
		return n.closure, nil
	case 1:
		return 0, refuseSchema("$ref cycle at %s", ptrText(n.path))
	}
	n.state = 1
	total := 1
	for _, l := range [][]*snode{n.seq, n.anyOf, n.absorbed} {
		for _, c := range l {
			k, err := c.inPlaceClosure()
			if err != nil {
				return 0, err
			}
			total += k
			if total > maxInPlaceEvals {
				return 0, refuseSchema("combinator fan-out: %s evaluates one value more than %d times", ptrText(n.path), maxInPlaceEvals)
			}
		}
	}
	n.state, n.closure = 2, total
	return total, nil
}
