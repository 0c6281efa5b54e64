package integrity

import (
	"slices"
	"strings"
)

// PinKey names a definition of a pin file.
type PinKey struct {
	Server string
	Kind   Kind
	Name   string
}

// PinsOf reads a pin file the way the appliance does (a guard with no state directory, which
// keeps everything in memory) and returns its pins (`mcpintercept tools diff --pins`).
func PinsOf(path string) (map[PinKey]DefState, error) {
	g, err := Open(Options{PinFile: path})
	if err != nil {
		return nil, err
	}
	defer g.Close()
	out := map[PinKey]DefState{}
	for _, s := range g.Snapshot() {
		for _, d := range s.Defs {
			if d.Pin != "" {
				out[PinKey{s.Server, d.Kind, d.Name}] = d
			}
		}
	}
	return out, nil
}

// PinDiff is a definition two sets of pins disagree on: pinned by one only, or by both at other
// hashes (then Changed are the fields whose hashes differ, when both list fields).
type PinDiff struct {
	PinKey
	InA, InB   bool
	PinA, PinB string
	Changed    []string
}

// DiffPins lists the definitions a and b disagree on, by server, kind and name.
func DiffPins(a, b map[PinKey]DefState) []PinDiff {
	keys := make([]PinKey, 0, len(a)+len(b))
	for k := range b {
		keys = append(keys, k)
	}
	for k := range a {
		if _, ok := b[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, func(x, y PinKey) int {
		return strings.Compare(x.Server+"\x00"+string(x.Kind)+"\x00"+x.Name, y.Server+"\x00"+string(y.Kind)+"\x00"+y.Name)
	})
	var out []PinDiff
	for _, k := range keys {
		da, inA := a[k]
		db, inB := b[k]
		if inA && inB && da.Pin == db.Pin {
			continue
		}
		d := PinDiff{PinKey: k, InA: inA, InB: inB, PinA: da.Pin, PinB: db.Pin}
		if inA && inB {
			d.Changed = changedFields(da.Fields, db.Fields)
		}
		out = append(out, d)
	}
	return out
}

// changedFields are the fields whose hashes differ between a and b, when both have them.
func changedFields(a, b map[string]string) []string {
	if len(a) == 0 || len(b) == 0 {
		return nil
	}
	var out []string
	for f, h := range a {
		if b[f] != h {
			out = append(out, f)
		}
	}
	for f := range b {
		if _, ok := a[f]; !ok {
			out = append(out, f)
		}
	}
	slices.Sort(out)
	return out
}
