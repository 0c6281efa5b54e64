package level2

import (
	"encoding/json"
	"strings"
	"testing"

	"mcpintercept/mcp"
)

// fuzzTarget is variantTarget with every leaf a *json.RawMessage, so that "encoding/json filled
// this field" is visible whatever the value's type.
type fuzzTarget struct {
	Path  *json.RawMessage `json:"path"`
	Mask  *json.RawMessage `json:"mask"`
	Token *json.RawMessage `json:"token"`
	A     *struct {
		B    *json.RawMessage `json:"b"`
		Kind *json.RawMessage `json:"kind"`
	} `json:"a"`
	Files []struct {
		Path *json.RawMessage `json:"path"`
	} `json:"files"`
}

// FuzzCaseVariant holds caseVariant to encoding/json, the decoder of a Go server: whenever
// encoding/json fills a field (at any depth) from arguments Level 2 accepts, and the exact
// keys of Level 2's own map do not lead to that field, caseVariant must refuse the arguments;
// and it refuses exactly when a key at a read position folds equal to the read key without
// being it (a reference written over Level 2's decoded map).
func FuzzCaseVariant(f *testing.F) {
	for _, s := range []string{
		`{"PATH":"/etc/passwd"}`, `{"path":"/etc/passwd"}`, `{"maſk":1}`, `{"MAS\u212a":1}`,
		`{"a":{"B":1}}`, `{"A":{"b":1}}`, `{"a":{"\u212aind":"z"}}`, `{"files":[{"path":"x"},{"Path":"y"}]}`,
		`{"files":[[{"PATH":1}]]}`, `{"tokeN":null}`, `{"other":{"PATH":1},"path":2}`, `{"a":[{"b":1}]}`,
		// Issue 29: escaped and look-alike spellings, variants beside exact keys, deep arrays.
		`{"P\u0041TH":"/etc"}`, `{"pat\u0068":"/etc"}`, `{"a":{"\u212Aind":"z","b":1}}`, `{"files":[{"path":"a"},[{"pAtH":"b"}]]}`,
		`{"mas\u212a":1,"path":"x"}`, `{"toKen":{"path":1}}`, `{"a":{"b":{"B":1}}}`, `{"рath":"cyrillic р, not a variant"}`,
		`{"Files":[{"path":"x"}]}`, `{"a":[[[{"KIND":"x"}]]]}`,
	} {
		f.Add([]byte(s))
	}
	paths := variantSet(f).ArgumentPaths()
	f.Fuzz(func(t *testing.T, args []byte) {
		if len(args) > 1<<14 || mcp.ValidateJSON(args, mcp.DefaultMaxDepth) != nil || !mcp.IsObject(args) {
			return // Level 2 refuses it before any rule is asked
		}
		why, got := caseVariant(args, paths)
		exact, _ := mcp.DecodeValue(args).(map[string]any)
		if ref := referenceVariant(exact, paths, 0); got != ref {
			t.Fatalf("caseVariant %v (%q), reference %v, on %s", got, why, ref, args)
		}
		var v fuzzTarget
		if err := json.Unmarshal(args, &v); err != nil {
			return // a Go server fails the call: nothing acts on these arguments
		}
		if f := filledByVariant(&v, exact); f != "" && !got {
			t.Fatalf("encoding/json fills %s from a key that is not its name, caseVariant passes %s", f, args)
		}
	})
}

// filledByVariant names a field of v that encoding/json filled although exact (the same
// arguments with keys as written) has no member of that name there.
func filledByVariant(v *fuzzTarget, exact map[string]any) string {
	has := func(m any, k string) (any, bool) {
		mm, ok := m.(map[string]any)
		if !ok {
			return nil, false
		}
		x, ok := mm[k]
		return x, ok
	}
	for name, set := range map[string]bool{"path": v.Path != nil, "mask": v.Mask != nil, "token": v.Token != nil} {
		if _, ok := has(exact, name); set && !ok {
			return name
		}
	}
	if v.A != nil {
		a, ok := has(exact, "a")
		if (v.A.B != nil || v.A.Kind != nil) && !ok {
			return "a"
		}
		if _, ok := has(a, "b"); v.A.B != nil && !ok {
			return "a.b"
		}
		if _, ok := has(a, "kind"); v.A.Kind != nil && !ok {
			return "a.kind"
		}
	}
	files, ok := has(exact, "files")
	list, _ := files.([]any)
	for i, e := range v.Files {
		if e.Path == nil {
			continue
		}
		if !ok || i >= len(list) {
			return "files"
		}
		if _, ok := has(list[i], "path"); !ok {
			return "files[].path"
		}
	}
	return ""
}

// referenceVariant is caseVariant over a decoded value: arrays transparent, keys compared
// exactly to follow a path and folded to find a variant.
func referenceVariant(v any, paths [][]string, depth int) bool {
	switch v := v.(type) {
	case []any:
		for _, e := range v {
			if referenceVariant(e, paths, depth) {
				return true
			}
		}
	case map[string]any:
		for k, x := range v {
			for _, p := range paths {
				if len(p) <= depth {
					continue
				}
				if k != p[depth] && strings.EqualFold(k, p[depth]) {
					return true
				}
				if k == p[depth] && len(p) > depth+1 && referenceVariant(x, [][]string{p}, depth+1) {
					return true
				}
			}
		}
	}
	return false
}
