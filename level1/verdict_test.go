package level1

import (
	"strings"
	"testing"

	"mcpintercept/policy"
)

// A request allowed with fields absent keeps its shadow rules' marks: a dry run is visible in the
// record whatever headers the client sent (policy test replays those records).
func TestVerdictOfKeepsShadowMarks(t *testing.T) {
	d := policy.Decision{Action: policy.ActionAllow, Absent: []string{"mcp.name"},
		Shadow: []policy.ShadowHit{{Rule: "no-echo", Would: policy.ActionDeny, Reason: "echo is off"}}}
	v := VerdictOf(d)
	if !strings.HasPrefix(v.Reason, "fields absent: mcp.name") || !strings.Contains(v.Reason, "would_deny by no-echo (shadow)") {
		t.Fatalf("reason %q", v.Reason)
	}
}
