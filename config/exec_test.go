package config

import (
	"strings"
	"testing"
)

// A file read for exec needs no mechanism (ebpf) and no ebpf.cgroup (exec's is its own); a
// mechanism the file names is kept.
func TestOverridesExec(t *testing.T) {
	const routes = "routes:\n  - name: r\n    match: {ports: [443]}\n    tls: passthrough\n"
	for _, tc := range []struct {
		name, file string
		exec       bool
		mech       Mechanism
		err        string
	}{
		{"no mechanism, exec", routes, true, EBPF, ""},
		{"ebpf without cgroup, exec", "mechanism: ebpf\n" + routes, true, EBPF, ""},
		{"ebpf without cgroup, run", "mechanism: ebpf\n" + routes, false, "", "ebpf.cgroup"},
		{"file's mechanism kept", "mechanism: nftables-tproxy\nintercept: {destinations: [10.0.0.0/8], ports: [443]}\n" + routes, true, NftablesTProxy, ""},
		{"file's mechanism still validated", "mechanism: nftables-tproxy\n" + routes, true, "", "intercept.destinations"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Parse("x.yaml", []byte(tc.file), Overrides{Exec: tc.exec})
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.Mechanism != tc.mech {
				t.Errorf("mechanism %s, want %s", c.Mechanism, tc.mech)
			}
		})
	}
}
