package policy

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// TestReadmeProvenanceTable holds README's "Who may set each field" table to the schema: every
// field a rule can read is a row there with the provenance declared here, so the document an
// operator writes rules from cannot drift from what the appliance enforces.
func TestReadmeProvenanceTable(t *testing.T) {
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Skipf("README.md not beside the package: %v", err)
	}
	readme := string(b)
	for _, f := range Fields() {
		row := fmt.Sprintf("| `%s` | %d | %s |", f.Path, f.Level, f.Prov)
		if !strings.Contains(readme, row) {
			t.Errorf("README.md has no provenance row starting %q", row)
		}
	}
}
