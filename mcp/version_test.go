package mcp

import "testing"

func TestVersionCompare(t *testing.T) {
	tests := []struct {
		name string
		a, b Version
		want int
	}{
		{name: "same", a: V20250618, b: "2025-06-18", want: 0},
		{name: "older year", a: V20241105, b: V20250326, want: -1},
		{name: "newer month", a: V20251125, b: V20250618, want: 1},
		{name: "by date, not length", a: "2026-07-28", b: "2026-07-29", want: -1},
		{name: "future release is newer", a: "2027-01-01", b: Latest, want: 1},
		{name: "none is older than any", a: "", b: V20241105, want: -1},
		{name: "none equals none", a: "", b: "", want: 0},
		{name: "undated is newer than dated", a: "DRAFT-2026-v1", b: "2099-12-31", want: 1},
		{name: "undated digits too", a: "1.0", b: V20241105, want: 1},
		{name: "two undated compare as text", a: "draft-a", b: "draft-b", want: -1},
		{name: "undated is newer than none", a: "x", b: "", want: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.a.Compare(tt.b); got != tt.want {
				t.Errorf("%q.Compare(%q) = %d, want %d", tt.a, tt.b, got, tt.want)
			}
			if got := tt.b.Compare(tt.a); got != -tt.want {
				t.Errorf("%q.Compare(%q) = %d, want %d (antisymmetry)", tt.b, tt.a, got, -tt.want)
			}
		})
	}
}

func TestVersionDated(t *testing.T) {
	tests := []struct {
		v    Version
		want bool
	}{
		{V20241105, true}, {Latest, true}, {"2026-00-99", true}, // servers compare the form, not the calendar
		{"", false}, {"2026-7-28", false}, {"2026-07-28 ", false}, {"2026/07/28", false}, {"２０２６-07-28", false},
		{"20260728xx", false}, {"abcd-ef-gh", false},
	}
	for _, tt := range tests {
		if got := tt.v.Dated(); got != tt.want {
			t.Errorf("%q.Dated() = %v, want %v", tt.v, got, tt.want)
		}
	}
}

// TestVersionPredicates pins what each release changes, row by row: a new version is a new row.
func TestVersionPredicates(t *testing.T) {
	type preds struct{ batches, legacy, checksHeaders, caching, stateless bool }
	tests := []struct {
		v    Version
		want preds
	}{
		{"", preds{}},
		{V20241105, preds{legacy: true}},
		{V20250326, preds{batches: true}},
		{V20250618, preds{}},
		{V20251125, preds{}},
		{V20260728, preds{checksHeaders: true, caching: true, stateless: true}},
		{"2027-03-01", preds{checksHeaders: true, caching: true, stateless: true}},
		{"draft", preds{checksHeaders: true, caching: true, stateless: true}},
		{"2025-03-26 ", preds{checksHeaders: true, caching: true, stateless: true}}, // undated: no batches
	}
	for _, tt := range tests {
		got := preds{tt.v.BatchesAllowed(), tt.v.LegacySSE(), tt.v.ServerChecksHeaders(), tt.v.CachingHints(), tt.v.Stateless()}
		if got != tt.want {
			t.Errorf("%q: %+v, want %+v", tt.v, got, tt.want)
		}
	}
}

func TestVersionAtLeast(t *testing.T) {
	tests := []struct {
		v, min Version
		want   bool
	}{
		{V20260728, V20260728, true},
		{V20251125, V20260728, false},
		{"", V20241105, false}, // an unknown version satisfies no minimum
		{"", "", false},
		{"2030-01-01", V20260728, true},
	}
	for _, tt := range tests {
		if got := tt.v.AtLeast(tt.min); got != tt.want {
			t.Errorf("%q.AtLeast(%q) = %v, want %v", tt.v, tt.min, got, tt.want)
		}
	}
}
