package appliance

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"mcpintercept/origin"
)

// nopCloser is a buffer the data plane's link can write to and close.
type nopCloser struct{ *bytes.Buffer }

func (nopCloser) Close() error { return nil }

// TestReport: what the data plane announces is what the watchdog reads, whatever the crash cut.
func TestReport(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want childReport
	}{
		{name: "nothing installed", in: "", want: childReport{}},
		{name: "steering", in: "steering nftables-tproxy\n", want: childReport{Mechanism: origin.NftablesTProxy}},
		{name: "exec", in: "steering ebpf\ncgroup /sys/fs/cgroup/mcpintercept-7-1\n",
			want: childReport{Mechanism: origin.EBPF, Cgroups: []string{"/sys/fs/cgroup/mcpintercept-7-1"}}},
		{name: "a line cut by the crash", in: "steering iptables-redirect", want: childReport{Mechanism: origin.IptablesRedirect}},
		{name: "CRLF", in: "steering dns\r\n", want: childReport{Mechanism: origin.DNS}},
		{name: "sidecar beside the mechanism", in: "steering external\nsteering nftables-inbound\n", want: childReport{Mechanism: origin.External, Inbound: true}},
		{name: "unknown lines ignored", in: "hello\nsteering dns\n\n", want: childReport{Mechanism: origin.DNS}},
		{name: "empty values ignored", in: "steering \ncgroup\n", want: childReport{}},
		{name: "bounded", in: "steering dns\n" + strings.Repeat("x", 2*maxReport) + "\nsteering ebpf\n", want: childReport{Mechanism: origin.DNS}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := parseReport(strings.NewReader(tt.in))
			if got.Mechanism != tt.want.Mechanism || got.Inbound != tt.want.Inbound || !slices.Equal(got.Cgroups, tt.want.Cgroups) {
				t.Fatalf("parseReport(%.60q) = %+v, want %+v", tt.in, got, tt.want)
			}
		})
	}
	// The writer's side round-trips; a value with a newline is not written (it would forge a
	// line); a nil link (no watchdog) writes nothing and does not panic.
	var b bytes.Buffer
	l := &WatchdogLink{w: nopCloser{&b}}
	l.Steering(origin.EBPF)
	l.Cgroup("/sys/fs/cgroup/mcpintercept-1-1\nsteering external")
	l.Cgroup("/sys/fs/cgroup/mcpintercept-1-2")
	got := parseReport(&b)
	if got.Mechanism != origin.EBPF || !slices.Equal(got.Cgroups, []string{"/sys/fs/cgroup/mcpintercept-1-2"}) {
		t.Fatalf("round trip = %+v", got)
	}
	var none *WatchdogLink
	none.Steering(origin.EBPF)
	none.Cgroup("x")
}

// FuzzParseReport: whatever bytes come down the pipe, the parse terminates and reports only what
// is in them.
func FuzzParseReport(f *testing.F) {
	for _, s := range []string{"", "steering nftables-tproxy\n", "steering ebpf\ncgroup /a/mcpintercept-1-1\n", "cgroup", "steering  dns \r\n", "\x00\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		rep := parseReport(strings.NewReader(in))
		if rep.Mechanism != "" && !strings.Contains(in, string(rep.Mechanism)) {
			t.Fatalf("%q read as mechanism %q", in, rep.Mechanism)
		}
		for _, cg := range rep.Cgroups {
			if cg == "" || !strings.Contains(in, cg) || strings.ContainsAny(cg, "\n") {
				t.Fatalf("%q read as cgroup %q", in, cg)
			}
		}
	})
}

// TestWantWatchdog: run and exec outside systemd get a watchdog; systemd (NOTIFY_SOCKET: its
// ExecStopPost cleans up), the watchdog itself and the opt-out do not, nor do the commands that
// install nothing.
func TestWantWatchdog(t *testing.T) {
	tests := []struct {
		name    string
		command string
		env     map[string]string
		want    bool
	}{
		{name: "run", command: "run", want: true},
		{name: "exec", command: "exec", want: true},
		{name: "cleanup", command: "cleanup"},
		{name: "check", command: "check"},
		{name: "no command", command: ""},
		{name: "under systemd", command: "run", env: map[string]string{"NOTIFY_SOCKET": "/run/systemd/notify"}},
		{name: "the watchdog", command: "run", env: map[string]string{EnvWatchdog: WatchdogChild}},
		{name: "opted out", command: "exec", env: map[string]string{EnvWatchdog: "off"}},
		{name: "other values do not opt out", command: "run", env: map[string]string{EnvWatchdog: "on"}, want: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := WantWatchdog(tt.command, func(k string) string { return tt.env[k] }); got != tt.want {
				t.Fatalf("WantWatchdog(%q, %v) = %v, want %v", tt.command, tt.env, got, tt.want)
			}
		})
	}
}
