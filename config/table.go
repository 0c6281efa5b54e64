package config

import (
	"fmt"
	"reflect"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// A setting is one key of the file format, described once: where it sits,
// how its value is decoded, what it defaults to and the rule its value must
// satisfy on its own. A table of settings over a struct S drives decoding
// (its paths give the sections and the order of "valid:" lists), defaults and
// per-key validation; rules that relate several keys live in validate.go.
type setting[S any] interface {
	keyPath() string // dotted, relative to the table's struct
	keyDoc() string  // what the key is for, in a few words
	// decode stores v, reporting its own problems; false when unusable.
	decode(d *decoder, s *S, v *yaml.Node, key string) bool
	// fill applies the default when given reports the key absent.
	fill(s *S, key string, given func(string) bool)
	// check reports what is wrong with the value on its own.
	check(v *validator, s *S, key string)
	// describe is the key's type and its default in s (a struct with every default applied),
	// "" when it has none: the configuration reference (Reference).
	describe(s *S) (typ, dflt string)
}

// table is the schema of one struct, in file order.
type table[S any] []setting[S]

// fields lists the keys of the mapping at prefix (sections included) for
// decoder.mapping, each decoding into s.
func (t table[S]) fields(d *decoder, s *S, prefix string) []field {
	var out []field
	seen := map[string]bool{}
	for _, st := range t {
		rest, ok := strings.CutPrefix(st.keyPath(), prefix)
		if !ok {
			continue
		}
		name, _, nested := strings.Cut(rest, ".")
		if seen[name] {
			continue
		}
		seen[name] = true
		if !nested {
			st := st
			out = append(out, field{name, func(v *yaml.Node, key string) bool { return st.decode(d, s, v, key) }})
			continue
		}
		sub := t.fields(d, s, prefix+name+".")
		out = append(out, field{name, func(v *yaml.Node, key string) bool { return d.mapping(v, key, sub) }})
	}
	return out
}

// fill applies every default, in table order (a default may depend on a key
// before it), under the key path at. given nil takes a zero value as absent,
// which is how a struct built in code leaves a key out.
func (t table[S]) fill(s *S, at string, given func(string) bool) {
	for _, st := range t {
		st.fill(s, join(at, st.keyPath()), given)
	}
}

// check runs the per-key rules under the key path at.
func (t table[S]) check(v *validator, s *S, at string) {
	for _, st := range t {
		st.check(v, s, join(at, st.keyPath()))
	}
}

// without leaves out the top-level keys named (and everything under them).
func (t table[S]) without(names ...string) table[S] {
	var out table[S]
	for _, st := range t {
		top, _, _ := strings.Cut(st.keyPath(), ".")
		if !slices.Contains(names, top) {
			out = append(out, st)
		}
	}
	return out
}

// leaf is a setting stored in one field of type T.
type leaf[S, T any] struct {
	path string
	doc  string
	get  func(*S) *T
	// parse decodes a value, range checks included (a number must fit T
	// before it is stored), and reports its own problems.
	parse func(d *decoder, v *yaml.Node, key string) (T, bool)
	dflt  func(*S) (T, bool)
	valid func(v *validator, key string, x T)
	// needs is the rule a set value has about the keys beside it (the route's level): it
	// returns the sibling key to name and why, "" when the value may stand.
	needs func(s *S, x T) (sibling, why string)
}

// key describes the setting at path stored where get points.
func key[S, T any](path, doc string, get func(*S) *T, parse func(*decoder, *yaml.Node, string) (T, bool)) leaf[S, T] {
	return leaf[S, T]{path: path, doc: doc, get: get, parse: parse}
}

// def is the value an absent key takes.
func (l leaf[S, T]) def(x T) leaf[S, T] {
	return l.defBy(func(*S) (T, bool) { return x, true })
}

// defBy computes the default from the keys before it; false leaves the
// key unset.
func (l leaf[S, T]) defBy(f func(*S) (T, bool)) leaf[S, T] {
	l.dflt = f
	return l
}

// checked adds the rule the value must satisfy (validation, and Validate for
// a config built in code).
func (l leaf[S, T]) checked(f func(T) string) leaf[S, T] {
	return l.checkedBy(func(v *validator, key string, x T) { v.check(key, f(x)) })
}

// checkedBy is checked for a rule that reports under keys of its own (list
// items).
func (l leaf[S, T]) checkedBy(f func(v *validator, key string, x T)) leaf[S, T] {
	l.valid = f
	return l
}

// needing adds a rule that relates a set (non-zero) value to the keys beside it: needs returns the
// sibling key (its last path element, e.g. "level") and why the value cannot stand with it, ""
// when it can. A key with such a rule is declared in one place, its rule included.
func (l leaf[S, T]) needing(needs func(s *S, x T) (sibling, why string)) leaf[S, T] {
	l.needs = needs
	return l
}

func (l leaf[S, T]) keyPath() string { return l.path }

func (l leaf[S, T]) describe(s *S) (string, string) {
	typ := typeName(reflect.TypeFor[T]())
	if l.dflt == nil {
		return typ, ""
	}
	return typ, showValue(reflect.ValueOf(l.get(s)).Elem())
}
func (l leaf[S, T]) keyDoc() string { return l.doc }

func (l leaf[S, T]) decode(d *decoder, s *S, v *yaml.Node, key string) bool {
	x, ok := l.parse(d, v, key)
	if ok {
		*l.get(s) = x
	}
	return ok
}

func (l leaf[S, T]) fill(s *S, key string, given func(string) bool) {
	if l.dflt == nil {
		return
	}
	if given == nil && !reflect.ValueOf(l.get(s)).Elem().IsZero() || given != nil && given(key) {
		return
	}
	if x, ok := l.dflt(s); ok {
		*l.get(s) = x
	}
}

func (l leaf[S, T]) check(v *validator, s *S, key string) {
	if l.valid != nil {
		l.valid(v, key, *l.get(s))
	}
	if l.needs != nil && !reflect.ValueOf(l.get(s)).Elem().IsZero() {
		if sibling, why := l.needs(s, *l.get(s)); why != "" {
			v.checkAlt(key, strings.TrimSuffix(key, l.path)+sibling, why)
		}
	}
}

// block is a setting whose value is a structure of its own (routes, rule
// sets, a rule's rate_limit), with its own decoding, defaults and checks.
type block[S any] struct {
	path     string
	doc      string
	decodeFn func(d *decoder, s *S, v *yaml.Node, key string) bool
	fillFn   func(s *S, key string, given func(string) bool)
	checkFn  func(v *validator, s *S, key string)
}

func (b block[S]) keyPath() string { return b.path }

func (b block[S]) describe(*S) (string, string) { return "section (see below)", "" }
func (b block[S]) keyDoc() string               { return b.doc }

func (b block[S]) decode(d *decoder, s *S, v *yaml.Node, key string) bool {
	return b.decodeFn(d, s, v, key)
}

func (b block[S]) fill(s *S, key string, given func(string) bool) {
	if b.fillFn != nil {
		b.fillFn(s, key, given)
	}
}

func (b block[S]) check(v *validator, s *S, key string) {
	if b.checkFn != nil {
		b.checkFn(v, s, key)
	}
}

// The decoders of leaf values. Each reports its problem at the value.

// scalar adapts a parse function that returns a message.
func scalar[T any](parse func(*yaml.Node) (T, string)) func(*decoder, *yaml.Node, string) (T, bool) {
	return func(d *decoder, v *yaml.Node, key string) (T, bool) {
		x, msg := parse(v)
		if msg != "" {
			d.fail(v, key, msg)
			var zero T
			return zero, false
		}
		return x, true
	}
}

// Decoders of the plain scalar kinds.
var (
	str      = scalar(parseString)
	boolean  = scalar(parseBool)
	duration = scalar(func(n *yaml.Node) (Duration, string) {
		t, msg := parseDuration(n)
		return Duration{t}, msg
	})
	rate = scalar(parseRate)
)

func parseBool(n *yaml.Node) (bool, string) {
	var b bool
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!bool" || n.Decode(&b) != nil {
		return false, "expected true or false, got " + describe(n)
	}
	return b, ""
}

// ptr decodes into a pointer, for a key whose absence must stay apparent
// after defaults (an explicit false or 0).
func ptr[T any](parse func(*decoder, *yaml.Node, string) (T, bool)) func(*decoder, *yaml.Node, string) (*T, bool) {
	return func(d *decoder, v *yaml.Node, key string) (*T, bool) {
		x, ok := parse(d, v, key)
		if !ok {
			return nil, false
		}
		return &x, true
	}
}

// integer range-checks while decoding: check must reject anything that does
// not fit T, so the conversion cannot wrap.
func integer[T uint16 | uint32 | int | int64](check func(int64) string) func(*decoder, *yaml.Node, string) (T, bool) {
	return scalar(func(n *yaml.Node) (T, string) {
		i, msg := parseInt(n)
		if msg == "" {
			msg = check(i)
		}
		return T(i), msg
	})
}

// size reads a byte count: an integer, or a string with a binary unit ("100MiB").
func size(check func(int64) string) func(*decoder, *yaml.Node, string) (int64, bool) {
	return scalar(func(n *yaml.Node) (int64, string) {
		i, msg := parseSize(n)
		if msg == "" {
			msg = check(i)
		}
		return i, msg
	})
}

// intKey is an integer setting whose range is checked when decoded and when
// validated.
func intKey[S any, T uint16 | uint32 | int | int64](path, doc string, get func(*S) *T, check func(int64) string) leaf[S, T] {
	return key(path, doc, get, integer[T](check)).checked(func(x T) string { return check(int64(x)) })
}

// list decodes a sequence, item by item. It stores nothing unless every item
// is usable, so that the indexes in later validation errors match the file.
// An empty list is stored as nil, like an absent one, so that a config
// written back out reads the same.
func list[T any](item func(*yaml.Node) (T, string)) func(*decoder, *yaml.Node, string) ([]T, bool) {
	return func(d *decoder, v *yaml.Node, key string) ([]T, bool) {
		if v.Kind != yaml.SequenceNode {
			d.fail(v, key, "expected a list, got "+describe(v))
			return nil, false
		}
		if !d.count(v, key, len(v.Content)) {
			return nil, false
		}
		var out []T
		if len(v.Content) > 0 {
			out = make([]T, 0, len(v.Content))
		}
		ok := true
		for i, it := range v.Content {
			it = deref(it)
			k := fmt.Sprintf("%s[%d]", key, i)
			d.keys[k], d.vals[k] = it, it
			x, msg := item(it)
			if msg != "" {
				d.fail(it, k, msg)
				d.bad[k] = true
				ok = false
				continue
			}
			out = append(out, x)
		}
		return out, ok
	}
}

// each checks every item of a list under its own key.
func each[T any](check func(T) string) func(*validator, string, []T) {
	return func(v *validator, key string, xs []T) {
		for i, x := range xs {
			v.check(fmt.Sprintf("%s[%d]", key, i), check(x))
		}
	}
}

// unique is each for a list whose items must also differ; show spells an
// item in the message about its duplicate.
func unique[T comparable](check func(T) string, show func(T) string) func(*validator, string, []T) {
	return func(v *validator, key string, xs []T) {
		for i, x := range xs {
			k := fmt.Sprintf("%s[%d]", key, i)
			if check != nil {
				if msg := check(x); msg != "" {
					v.check(k, msg)
					continue
				}
			}
			if j := slices.Index(xs[:i], x); j >= 0 {
				v.check(k, fmt.Sprintf("duplicate of %s[%d] (%s)", key, j, show(x)))
			}
		}
	}
}
