package config

import (
	"strings"
	"testing"
)

// TestNodeAgentAllowPodOptOut: node_agent.allow_pod_opt_out is off unless the file says true,
// and anything but a boolean is an error on its line.
func TestNodeAgentAllowPodOptOut(t *testing.T) {
	for _, tt := range []struct {
		name    string
		src     string
		want    bool
		wantErr string
	}{
		{name: "absent: off", src: "", want: false},
		{name: "true", src: "node_agent:\n  allow_pod_opt_out: true\n", want: true},
		{name: "false", src: "node_agent:\n  allow_pod_opt_out: false\n", want: false},
		{name: "not a boolean", src: "node_agent:\n  allow_pod_opt_out: maybe\n", wantErr: "node_agent.allow_pod_opt_out"},
		{name: "a list", src: "node_agent:\n  allow_pod_opt_out: [true]\n", wantErr: "node_agent.allow_pod_opt_out"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse("na.yaml", []byte(minimal+tt.src), Overrides{})
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one naming %s", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.NodeAgent.AllowPodOptOut != tt.want {
				t.Errorf("AllowPodOptOut = %v, want %v", c.NodeAgent.AllowPodOptOut, tt.want)
			}
		})
	}
}
