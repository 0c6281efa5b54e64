package chain

import (
	"slices"
	"testing"
)

// The chain's order is the contract DESIGN and the README state: classification first, the
// token check before any policy or body stage, Level 1 policy, Level 2, then spans and audit
// (whose records carry the spans' ids). The engine adds its record writer after these.
func TestStagesOrder(t *testing.T) {
	var names []string
	for _, f := range Stages(Deps{}) {
		names = append(names, f.Name)
	}
	want := []string{"classify", "credentials", "token", "header-policy", "level2", "trace", "audit", "credentials-out"}
	if !slices.Equal(names, want) {
		t.Fatalf("chain %q, want %q", names, want)
	}
	levels := map[string][]bool{ // served at levels 1 and 2
		"classify": {true, true}, "token": {true, true}, "header-policy": {true, false},
		"level2": {false, true}, "trace": {true, true}, "audit": {true, false},
		"credentials": {true, true}, "credentials-out": {true, true},
	}
	for _, f := range Stages(Deps{}) {
		got := []bool{f.Levels(1), f.Levels(2)}
		if !slices.Equal(got, levels[f.Name]) {
			t.Errorf("%s serves levels 1,2 = %v, want %v", f.Name, got, levels[f.Name])
		}
	}
}
