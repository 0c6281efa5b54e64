package main

import (
	"bytes"
	"strings"
	"testing"

	"mcpintercept/config"
)

// nopCloser is a buffer the data plane's link can write to and close.
type nopCloser struct{ *bytes.Buffer }

func (nopCloser) Close() error { return nil }

// TestReport: what the data plane writes is what the supervisor reads, and a data plane that died
// before its orderly exit is told from one that ran it.
func TestReport(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want childReport
	}{
		{name: "died before installing", in: "", want: childReport{}},
		{name: "died while steering", in: "steering nftables-tproxy\n", want: childReport{Mechanism: config.NftablesTProxy}},
		{name: "orderly exit", in: "steering ebpf\nexited\n", want: childReport{Mechanism: config.EBPF, Exited: true}},
		{name: "exited without steering (a usage error)", in: "exited\n", want: childReport{Exited: true}},
		{name: "a line cut by the death", in: "steering iptables-redirect\nexi", want: childReport{Mechanism: config.IptablesRedirect}},
		{name: "unknown lines ignored", in: "hello\nsteering dns\n\n", want: childReport{Mechanism: config.DNS}},
		{name: "empty mechanism ignored", in: "steering \n", want: childReport{}},
		{name: "bounded", in: "steering dns\n" + strings.Repeat("x", 2*maxReport) + "\nexited\n", want: childReport{Mechanism: config.DNS}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := parseReport(strings.NewReader(tt.in)); got != tt.want {
				t.Fatalf("parseReport(%q) = %+v, want %+v", tt.in, got, tt.want)
			}
		})
	}
	// The writer's side round-trips; a nil link (unsupervised) writes nothing and does not panic.
	var b bytes.Buffer
	l := &supervisorLink{w: nopCloser{&b}}
	l.steering(config.IptablesRedirect)
	l.exited()
	if got := parseReport(&b); got != (childReport{Mechanism: config.IptablesRedirect, Exited: true}) {
		t.Fatalf("round trip = %+v", got)
	}
	var none *supervisorLink
	none.steering(config.EBPF)
	none.exited()
}

// FuzzParseReport: whatever bytes come down the pipe, the parse terminates, and it reports an
// orderly exit only when an "exited" line is there (a false "exited" would skip the cleanup).
func FuzzParseReport(f *testing.F) {
	for _, s := range []string{"", "steering nftables-tproxy\n", "steering ebpf\nexited\n", "exited", "steering  dns \r\nexited\r\n", "\x00\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		rep := parseReport(strings.NewReader(in))
		if rep.Exited && !strings.Contains(in, reportExited) {
			t.Fatalf("%q read as an orderly exit", in)
		}
		if rep.Mechanism != "" && !strings.Contains(in, string(rep.Mechanism)) {
			t.Fatalf("%q read as mechanism %q", in, rep.Mechanism)
		}
	})
}
