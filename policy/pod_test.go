package policy

import "testing"

// TestPodVariables: client.pod carries what the node agent knows of the client pod; a flow from
// outside any pod has no client.pod, so a rule that reads it does not match (and says so).
func TestPodVariables(t *testing.T) {
	pod := &Pod{Namespace: "agents", Name: "planner-0", UID: "u-1", ServiceAccount: "planner",
		Labels: map[string]string{"app": "planner", "mcp-tier": "untrusted"}}
	for _, tt := range []struct {
		name, when string
		pod        *Pod
		deny       bool
		absent     bool
	}{
		{"label", `client.pod.labels["mcp-tier"] == "untrusted"`, pod, true, false},
		{"label other value", `client.pod.labels["mcp-tier"] == "trusted"`, pod, false, false},
		{"label missing key", `"team" in client.pod.labels`, pod, false, false},
		{"namespace and name", `client.pod.namespace == "agents" && client.pod.name.startsWith("planner-")`, pod, true, false},
		{"uid and service account", `client.pod.uid == "u-1" && client.pod.service_account == "planner"`, pod, true, false},
		{"has pod", `has(client.pod)`, pod, true, false},
		{"no pod: has is false", `has(client.pod)`, nil, false, false},
		{"no pod: field absent", `client.pod.labels["mcp-tier"] == "untrusted"`, nil, false, true},
		{"empty labels", `size(client.pod.labels) == 0`, &Pod{Namespace: "a", Name: "b"}, true, false},
		{"service account absent when empty", `client.pod.service_account == ""`, &Pod{Namespace: "a", Name: "b"}, false, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := mustCompile(t, []RuleSpec{{Name: "r", Action: RuleDeny, When: tt.when}})
			in := &Input{Vars: Vars{Client: &Client{Address: "10.22.0.5", Port: 40000, Pod: tt.pod}}}
			d := s.Evaluate(in)
			if got := d.Action == ActionDeny; got != tt.deny {
				t.Fatalf("deny = %v (decision %+v), want %v", got, d, tt.deny)
			}
			if got := len(d.Absent) > 0; got != tt.absent {
				t.Fatalf("absent = %v, want %v", d.Absent, tt.absent)
			}
		})
	}
	// A field the pod object does not declare is refused when the rule is compiled.
	if _, err := Compile([]RuleSpec{{Name: "r", Action: RuleDeny, When: `client.pod.node == "n1"`}}); err == nil {
		t.Fatal("client.pod.node compiled; want an unknown-field error")
	}
}
