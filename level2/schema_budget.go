package level2

import (
	"fmt"
	"math"
	"regexp/syntax"

	"github.com/google/jsonschema-go/jsonschema"

	"mcpintercept/mcp"
)

// The work budget of one validation. Before the library validates a call's arguments, a walk
// over the same (subschema, value) pairs the library would visit adds up an upper bound of its
// cost; above the budget the call is refused instead of validated.
//
// Why the bound holds. The library's Validate (jsonschema-go validate.go) is one recursive
// function; every call evaluates one subschema on one value and recurses only through the edges
// planSchema recorded: $ref/$dynamicRef/allOf/anyOf/oneOf/not/if/then/else/dependentSchemas on
// the same value, properties/patternProperties/additionalProperties/unevaluatedProperties/
// propertyNames/prefixItems/items/additionalItems/contains/unevaluatedItems on a child value. The
// walk follows every one of those edges unconditionally (the library follows a subset: allOf and
// the child loops stop at the first failure, then/else is one of two, a property absent from the
// value is skipped), so its count of evaluations is at least the library's. Each evaluation's
// own work is the fixed overhead (costEval) plus what is proportional to data it touches: the
// value's keys or items (costKey each), the bytes of strings it measures, matches or compares
// (costByte; a regexp match costs up to len(input) x len(pattern) steps in Go's linear-time
// engine), the schema's own entries (costEntry). Error messages cannot grow with the arguments:
// values are handed to the library wrapped in types whose fmt output is a few bytes (instObject,
// instArray, instString), so a message is the schema's own text (bounded by the schema, counted
// by price) plus, for additionalProperties:false, the extra keys; the walk adds up the largest
// message each pair can produce (a failure returns one sequential child's message, or all of a
// failed anyOf's) and the bytes allocated to build and wrap them. The recursion is as deep as
// the walk's, which is bounded by maxEvalDepth: the goroutine stack stays at maxEvalDepth
// frames.
//
// Units are nanoseconds of the library's work on a 2020s x86 core, measured by the
// BenchmarkValidate* benchmarks (schema_bench_test.go); maxValidationWork is 8 ms of it, so any
// schema and arguments under the bounds take about 10 ms at most, and at most
// maxValidationAlloc bytes of messages plus per-evaluation bookkeeping.
const (
	maxValidationWork  = 8_000_000 // units (~ns) per call
	maxValidationAlloc = 4 << 20   // bytes of error messages per call (what a failing validation holds)
	maxEvalDepth       = 256       // nested evaluations (library stack frames) per call
	maxInstanceDepth   = mcp.DefaultMaxDepth

	costEval      = 400 // one evaluation: defer, stack push, annotations, map lookups
	costEntry     = 20  // one schema entry looked up (a property, a required name)
	costEnumEntry = 150 // one enum/const value compared (the library allocates two big.Rat per compare)
	costKey       = 60  // one key or item of the value iterated, noted and merged
	costByte      = 1   // one byte scanned, hashed or compared
	costRegexp    = 16  // one input byte through one instruction of a compiled regexp (Go's NFA)
	costAllocByte = 1   // one byte allocated (building a message, GC)

	allocEval  = 320 // bytes one evaluation allocates (annotations, closures, stack growth)
	allocKey   = 64  // bytes per key noted in an evaluated-properties map
	instFmtMax = 48  // bytes an argument value prints as in a message (instString.Format)
	msgFactor  = 6   // bytes allocated per byte of a failing evaluation's message (fmt buffers, wraps, joins)
	allocFail  = 192 // bytes of error values a failing evaluation allocates beside its message
)

// errBudget is the refusal of a call whose validation would cost more than the budget.
type errBudget struct{ what string }

func (e *errBudget) Error() string {
	return "validating these arguments would exceed the work budget (" + e.what + ")"
}

// inode is one argument value as the walk sees it: its shape and sizes.
type inode struct {
	kind     byte // 'o' object, 'a' array, 's' string, '-' other
	size     int64
	strLen   int
	keyBytes int64
	keys     []string
	vals     []*inode // objects: parallel to keys; arrays: the items
}

// instObject, instArray and instString carry argument values into the library. They behave as
// the plain types for validation (the library looks at reflect kinds) but print as a short
// description: an argument can be megabytes and a failed anyOf prints it once per branch.
type (
	instObject map[string]any
	instArray  []any
	instString string
)

func (o instObject) Format(f fmt.State, _ rune) { fmt.Fprintf(f, "<object of %d members>", len(o)) }
func (a instArray) Format(f fmt.State, _ rune)  { fmt.Fprintf(f, "<array of %d items>", len(a)) }
func (s instString) Format(f fmt.State, _ rune) { fmt.Fprintf(f, "<string of %d bytes>", len(s)) }

// toInstance converts decoded arguments (maps, slices, strings, numbers, bools, nil) into the
// wrapped value for the library and the inode for the walk.
func toInstance(v any, depth int) (any, *inode, error) {
	if depth > maxInstanceDepth {
		return nil, nil, &errBudget{what: fmt.Sprintf("arguments nested deeper than %d", maxInstanceDepth)}
	}
	switch t := v.(type) {
	case map[string]any:
		out := make(instObject, len(t))
		n := &inode{kind: 'o', size: 2, keys: make([]string, 0, len(t)), vals: make([]*inode, 0, len(t))}
		for k, e := range t {
			w, c, err := toInstance(e, depth+1)
			if err != nil {
				return nil, nil, err
			}
			out[k] = w
			n.keys, n.vals = append(n.keys, k), append(n.vals, c)
			n.size += int64(len(k)) + 4 + c.size
			n.keyBytes += int64(len(k))
		}
		return out, n, nil
	case []any:
		out := make(instArray, len(t))
		n := &inode{kind: 'a', size: 2, vals: make([]*inode, len(t))}
		for i, e := range t {
			w, c, err := toInstance(e, depth+1)
			if err != nil {
				return nil, nil, err
			}
			out[i], n.vals[i] = w, c
			n.size += 1 + c.size
		}
		return out, n, nil
	case string:
		return instString(t), &inode{kind: 's', size: int64(len(t)) + 2, strLen: len(t)}, nil
	default:
		return v, &inode{kind: '-', size: 8}, nil
	}
}

// price sets the static parts of one evaluation of n: its work and its own message bound.
func (n *snode) price() {
	s := n.s
	entries := len(s.Properties) + len(s.Required) + len(s.DependentRequired) +
		len(s.DependencyStrings) + len(s.DependentSchemas) + len(s.DependencySchemas)
	for _, l := range s.DependentRequired {
		entries += len(l)
	}
	for _, l := range s.DependencyStrings {
		entries += len(l)
	}
	n.work = costEval + int64(entries)*costEntry + int64(len(s.Enum))*costEnumEntry
	if s.Const != nil {
		n.work += costEnumEntry
	}

	name := s.ID
	if name == "" {
		name = n.path
		if name == "" {
			name = "root"
		}
	}
	// validate returns at the first keyword that fails: its own message is one keyword's.
	var local int64
	kw := func(k int) { local = max(local, int64(k)) }
	if s.Type != "" || s.Types != nil {
		kw(64 + instFmtMax + len(s.Type) + sumLen(s.Types, 4))
	}
	if s.Enum != nil {
		e := len(fmt.Sprint(s.Enum))
		kw(48 + instFmtMax + e)
		n.enumBytes += int64(e)
		n.enumLen += len(s.Enum)
	}
	if s.Const != nil {
		c := len(fmt.Sprint(*s.Const))
		kw(48 + instFmtMax + c)
		n.enumBytes += int64(c)
		n.enumLen++
	}
	for _, f := range []*float64{s.MultipleOf, s.Minimum, s.Maximum, s.ExclusiveMinimum, s.ExclusiveMaximum} {
		if f != nil {
			// The value prints as an exact rational (up to ~1100 digits for a float64 such as
			// 5e-324) beside the bound printed with %f.
			kw(64 + 1200 + len(fmt.Sprintf("%f", *f)))
		}
	}
	if n.stringChecks {
		kw(96 + instFmtMax)
	}
	if s.Pattern != "" {
		kw(64 + instFmtMax + 4*len(s.Pattern))
	}
	if s.DynamicRef != "" {
		kw(48 + 4*len(s.DynamicRef))
	}
	if s.OneOf != nil {
		kw(64 + sumNames(s.OneOf))
	}
	if s.Not != nil {
		kw(48 + schemaName(s.Not))
	}
	if s.Contains != nil {
		kw(64 + instFmtMax + schemaName(s.Contains))
	}
	kw(96) // uniqueItems, minItems ... maxProperties: a fixed text and two integers
	if s.Required != nil {
		kw(48 + 4*sumLen(s.Required, 3))
	}
	for k, l := range s.DependentRequired {
		kw(64 + 4*len(k) + 4*sumLen(l, 3))
	}
	for k, l := range s.DependencyStrings {
		kw(64 + 4*len(k) + 4*sumLen(l, 3))
	}
	n.wrapText = int64(16 + len(name)) // "validating <name>: "
	n.local = local
	n.anyOfText = int64(64 + sumNames(s.AnyOf))
}

func sumLen(l []string, extra int) int {
	t := 0
	for _, s := range l {
		t += len(s) + extra
	}
	return t
}

// schemaName is the length of what the library prints for a subschema (its String method).
func schemaName(s *jsonschema.Schema) int {
	return max(len(s.ID), len(s.Anchor)+8, len(s.DynamicAnchor)+8, 20)
}

func sumNames(l []*jsonschema.Schema) int {
	t := 0
	for _, s := range l {
		t += schemaName(s) + 2
	}
	return t
}

// cost is the walk's bound for one (subschema, value) pair: msg, the longest error message it
// can return; alloc, the bytes of error messages it can allocate; allocOK, those it can
// allocate when it succeeds (failures of branches it absorbs).
type cost struct{ msg, alloc, allocOK int64 }

// walker adds up an upper bound of the library's work on one call, stopping at the budget.
type walker struct {
	work  int64
	depth int
	over  string
}

// budgetValidation returns nil when validating v against the plan stays within the budget.
func budgetValidation(p *schemaPlan, v *inode) error {
	w := &walker{}
	c := w.eval(p.root, v)
	alloc := sat(c.alloc + msgFactor*c.msg) // the final message is read once more (Error)
	if w.over == "" && alloc > maxValidationAlloc {
		w.over = "memory"
	}
	if w.over == "" && w.work+alloc*costAllocByte > maxValidationWork {
		w.over = "work"
	}
	if w.over != "" {
		return &errBudget{what: w.over}
	}
	return nil
}

func sat(x int64) int64 { return min(max(x, 0), math.MaxInt64/4) }

// charge adds work and reports whether the walk must stop.
func (w *walker) charge(units int64) bool {
	w.work = sat(w.work + units)
	if w.work > maxValidationWork && w.over == "" {
		w.over = "work"
	}
	return w.over != ""
}

// eval bounds the evaluation of n on v, as validate.go's state.validate performs it.
func (w *walker) eval(n *snode, v *inode) cost {
	if w.over != "" {
		return cost{}
	}
	if w.depth >= maxEvalDepth {
		w.over = fmt.Sprintf("evaluations nested deeper than %d", maxEvalDepth)
		return cost{}
	}
	w.depth++
	defer func() { w.depth-- }()
	if w.charge(n.work + w.local(n, v)) {
		return cost{}
	}
	// Bookkeeping (annotations, closures, evaluated-property maps) is garbage as soon as the
	// evaluation returns: it costs time, charged as work, not memory held.
	garbage := int64(allocEval)
	if v.kind == 'o' {
		garbage += allocKey * int64(len(v.keys))
	}
	if w.charge(garbage * costAllocByte) {
		return cost{}
	}
	var acc accum
	for _, c := range n.seq {
		acc.seq(w.eval(c, v))
	}
	if len(n.anyOf) > 0 {
		anyMsg := n.anyOfText
		for _, c := range n.anyOf {
			r := w.eval(c, v)
			anyMsg = sat(anyMsg + r.msg + 2)
			acc.ok = sat(acc.ok + r.alloc)
		}
		acc.worst = max(acc.worst, anyMsg)
	}
	for _, c := range n.absorbed {
		acc.ok = sat(acc.ok + w.eval(c, v).alloc)
	}
	switch v.kind {
	case 'a':
		w.items(n, v, &acc)
	case 'o':
		w.members(n, v, &acc)
	}
	own := n.local
	if n.falsyAdditional && v.kind == 'o' {
		own = max(own, 64+4*v.keyBytes+4*int64(len(v.keys)))
	}
	msg := sat(n.wrapText + max(own, acc.worst))
	return cost{msg: msg, allocOK: acc.ok, alloc: sat(acc.ok + acc.delta + allocFail + msgFactor*msg)}
}

// accum gathers children's costs: the worst message among sequential children (one failure
// returns), the allocation when all succeed, and the most one failing child adds to it.
type accum struct{ worst, ok, delta int64 }

func (a *accum) seq(c cost) {
	a.worst = max(a.worst, c.msg)
	a.ok = sat(a.ok + c.allocOK)
	a.delta = max(a.delta, c.alloc-c.allocOK)
}

// local is the work of n on v that depends on the value: bytes compared, measured or matched.
func (w *walker) local(n *snode, v *inode) int64 {
	u := int64(0)
	if n.enumLen > 0 {
		u += min(n.enumBytes, int64(n.enumLen)*v.size) * costByte
	}
	switch v.kind {
	case 's':
		if n.stringChecks {
			u += int64(v.strLen) * costByte
		}
		if n.patternSelf > 0 {
			u += regexpCost(v.strLen, n.patternSelf)
		}
	case 'a':
		u += int64(len(v.vals)) * costKey
		if n.uniqueItems {
			u += v.size*costByte + int64(len(v.vals))*costKey
		}
	case 'o':
		u += int64(len(v.keys)) * costKey * int64(2+len(n.patterns))
	}
	return u
}

// regexpCost bounds one match of a compiled program of insts instructions over n bytes: Go's
// regexp runs in time linear in the input times the size of the program (its NFA may step
// every instruction for every byte).
func regexpCost(n, insts int) int64 {
	return 200 + int64(n+1)*int64(insts)*costRegexp
}

// regexpInsts is the size of pattern's compiled program, as package regexp compiles it; the
// pattern's length says little ("a{1000}" is 7 bytes and 1000 instructions).
func regexpInsts(pattern string) int {
	re, err := syntax.Parse(pattern, syntax.Perl)
	if err != nil {
		return len(pattern) + 1 // the library refused it when resolving; never matched
	}
	prog, err := syntax.Compile(re.Simplify())
	if err != nil {
		return len(pattern) + 1
	}
	return len(prog.Inst)
}

// items charges the keywords that evaluate an array's items.
func (w *walker) items(n *snode, v *inode, acc *accum) {
	for i, e := range v.vals {
		if i < len(n.prefix) {
			acc.seq(w.eval(n.prefix[i], e))
		}
		for _, c := range []*snode{n.items, n.additionalItems, n.unevItem} {
			if c != nil {
				acc.seq(w.eval(c, e))
			}
		}
		if n.contains != nil {
			acc.ok = sat(acc.ok + w.eval(n.contains, e).alloc)
		}
		if w.over != "" {
			return
		}
	}
}

// members charges the keywords that evaluate an object's members and names.
func (w *walker) members(n *snode, v *inode, acc *accum) {
	for i, k := range v.keys {
		e := v.vals[i]
		if c := n.props[k]; c != nil {
			acc.seq(w.eval(c, e))
		}
		for j, c := range n.patterns {
			// Charged before it runs: the match costs the walk what it costs the library.
			if w.charge(regexpCost(len(k), n.patternLen[j])) {
				return
			}
			if n.patternRE[j].MatchString(k) {
				acc.seq(w.eval(c, e))
			}
		}
		for _, c := range []*snode{n.additional, n.unevalProps} {
			if c != nil {
				acc.seq(w.eval(c, e))
			}
		}
		if n.propNames != nil {
			acc.seq(w.eval(n.propNames, &inode{kind: 's', size: int64(len(k)) + 2, strLen: len(k)}))
		}
		if w.over != "" {
			return
		}
	}
}
