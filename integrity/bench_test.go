package integrity

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// realisticTools is n tools as servers list them: a title, a paragraph of description, an
// input schema of a few described properties, an output schema for some, annotations.
func realisticTools(n int) []Def {
	defs := make([]Def, n)
	for i := range defs {
		name := fmt.Sprintf("search_issues_%04d", i)
		t := map[string]any{
			"name":  name,
			"title": fmt.Sprintf("Search issues (%d)", i),
			"description": "Search the issues of a repository by text, label, state and assignee. Returns at most " +
				"`limit` issues, newest first, each with its number, title, state, labels and URL. Use it before " +
				"opening a new issue to find duplicates; prefer narrow queries.",
			"inputSchema": map[string]any{
				"type": "object",
				"properties": map[string]any{
					"repo":     map[string]any{"type": "string", "description": "owner/name of the repository"},
					"query":    map[string]any{"type": "string", "description": "text to search for in titles and bodies"},
					"labels":   map[string]any{"type": "array", "items": map[string]any{"type": "string"}, "description": "labels every issue must carry"},
					"state":    map[string]any{"type": "string", "enum": []string{"open", "closed", "all"}, "default": "open"},
					"limit":    map[string]any{"type": "integer", "minimum": 1, "maximum": 100, "default": 20},
					"assignee": map[string]any{"type": "string"},
				},
				"required":             []string{"repo", "query"},
				"additionalProperties": false,
			},
			"annotations": map[string]any{"readOnlyHint": true, "openWorldHint": true, "title": "Search issues"},
			"_meta":       map[string]any{"example.com/version": "1.4.2"},
		}
		if i%3 == 0 {
			t["outputSchema"] = map[string]any{"type": "object", "properties": map[string]any{
				"issues": map[string]any{"type": "array", "items": map[string]any{"type": "object"}}}}
		}
		raw, _ := json.Marshal(t)
		defs[i] = Def{Kind: KindTool, Name: name, Raw: raw}
	}
	return defs
}

// BenchmarkObserve1000 is the per-list cost of one tools/list of 1,000 tools: steady (the same
// list again, the common case) and first_sight (a guard that has seen nothing: canonical form,
// field hashes, scan and pin for each).
func BenchmarkObserve1000(b *testing.B) {
	defs := realisticTools(1000)
	size := 0
	for _, d := range defs {
		size += len(d.Raw)
	}
	b.Run("steady", func(b *testing.B) {
		g, _ := Open(Options{})
		rg := g.Route(RouteOptions{Mode: ModeLearn})
		rg.Observe(srvA, "client", defs, true)
		b.SetBytes(int64(size))
		b.ReportAllocs()
		for b.Loop() {
			vs, evs := rg.Observe(srvA, "client", defs, true)
			if len(evs) != 0 || !vs[999].Pinned {
				b.Fatal(evs, vs[999])
			}
		}
	})
	b.Run("first_sight", func(b *testing.B) {
		b.SetBytes(int64(size))
		b.ReportAllocs()
		for b.Loop() {
			g, _ := Open(Options{})
			rg := g.Route(RouteOptions{Mode: ModeLearn})
			if vs, _ := rg.Observe(srvA, "client", defs, true); !vs[999].Pinned {
				b.Fatal(vs[999])
			}
		}
	})
}

// BenchmarkScan1MiB scans one definition with a 1 MiB description (default patterns).
func BenchmarkScan1MiB(b *testing.B) {
	body := strings.Repeat("Returns the weather for a city; pass the name as it is spelt locally. ", 1<<20/70)
	raw := json.RawMessage(`{"name":"weather","description":"` + body + `"}`)
	b.SetBytes(int64(len(raw)))
	b.ReportAllocs()
	for b.Loop() {
		if f := Scan(raw, DefaultPatterns); f != nil {
			b.Fatal(f)
		}
	}
}

// BenchmarkScan1MiBText scans one definition with a 1 MiB description that is mostly not ASCII
// (accented Latin, Cyrillic, Greek, CJK, Hangul, emoji): every rune takes the classification
// past ASCII.
func BenchmarkScan1MiBText(b *testing.B) {
	body := strings.Repeat("Météo à Zürich, Москва, Αθήνα, 東京, 서울 ☀🌧 — le nom tel qu'il s'écrit. ", 1<<20/110)
	raw := json.RawMessage(`{"name":"weather","description":"` + body + `"}`)
	if f := Scan(raw, DefaultPatterns); f != nil {
		b.Fatal(f)
	}
	b.SetBytes(int64(len(raw)))
	b.ReportAllocs()
	for b.Loop() {
		if f := Scan(raw, DefaultPatterns); f != nil {
			b.Fatal(f)
		}
	}
}
