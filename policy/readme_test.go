package policy

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// TestReadmeProvenanceTable holds the "Who may set each field" table (docs/level1.md) to the schema: every
// field a rule can read is a row there with the provenance declared here, so the document an
// operator writes rules from cannot drift from what the appliance enforces.
func TestReadmeProvenanceTable(t *testing.T) {
	b, err := os.ReadFile("../docs/level1.md")
	if err != nil {
		t.Fatalf("the provenance table's document: %v", err)
	}
	readme := string(b)
	for _, f := range Fields() {
		row := fmt.Sprintf("| `%s` | %d | %s |", f.Path, f.Level, f.Prov)
		if !strings.Contains(readme, row) {
			t.Errorf("docs/level1.md has no provenance row starting %q", row)
		}
	}
}
