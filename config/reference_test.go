package config

import (
	"os"
	"strings"
	"testing"
)

// TestReference holds docs/configuration.md to the schema: the committed reference is exactly
// what Reference generates, so a key added, removed or re-documented without regenerating it
// fails here (go test ./config/ -run TestReference -update rewrites it).
func TestReference(t *testing.T) {
	const path = "../docs/configuration.md"
	got := Reference()
	if *update {
		if err := os.MkdirAll("../docs", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (generate it: go test ./config/ -run TestReference -update)", err)
	}
	if string(want) != got {
		t.Fatalf("%s is stale: regenerate it with go test ./config/ -run TestReference -update", path)
	}
	// Every key the decoder knows is in it.
	for _, st := range configTable {
		if !strings.Contains(got, "| `"+st.keyPath()+"` |") {
			t.Errorf("key %s missing from the reference", st.keyPath())
		}
	}
	for _, k := range []string{"routes[].tls", "federation.downstreams[].url", "inbound.ports", "rule_sets.NAME[].when"} {
		if !strings.Contains(got, "| `"+k+"` |") {
			t.Errorf("key %s missing from the reference", k)
		}
	}
}
