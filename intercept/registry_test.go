package intercept

import (
	"slices"
	"testing"

	"mcpintercept/origin"
)

// TestRegistryCoversEveryMechanism: every contract name has a factory, in contract order, with
// a recovery statement; external declares both of its deliveries.
func TestRegistryCoversEveryMechanism(t *testing.T) {
	var names []origin.Mechanism
	for _, f := range Factories() {
		names = append(names, f.Name)
		if f.Recovery(Options{Mechanism: f.Name}) == "" {
			t.Errorf("%s: empty recovery statement", f.Name)
		}
	}
	if !slices.Equal(names, origin.Mechanisms()) {
		t.Fatalf("registered %v, want %v", names, origin.Mechanisms())
	}
	var declared []origin.Mechanism
	for _, d := range Declare() {
		declared = append(declared, d.Mechanism)
	}
	want := append(origin.Mechanisms(), origin.External)
	if !slices.Equal(declared, want) {
		t.Fatalf("declared %v, want %v", declared, want)
	}
}

// TestTransparent: TPROXY-style delivery needs IP_TRANSPARENT listeners; NAT-style and eBPF do not.
func TestTransparent(t *testing.T) {
	tests := []struct {
		name string
		o    Options
		want bool
	}{
		{name: "nftables-tproxy", o: Options{Mechanism: origin.NftablesTProxy}, want: true},
		{name: "dns", o: Options{Mechanism: origin.DNS}, want: true},
		{name: "external local-address", o: Options{Mechanism: origin.External}, want: true},
		{name: "external so-original-dst", o: Options{Mechanism: origin.External, NATed: true}, want: false},
		{name: "iptables-redirect", o: Options{Mechanism: origin.IptablesRedirect}, want: false},
		{name: "ebpf", o: Options{Mechanism: origin.EBPF}, want: false},
		{name: "unknown", o: Options{Mechanism: "nope"}, want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Transparent(tt.o); got != tt.want {
				t.Errorf("Transparent = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestSweepsShared: mechanisms that install the same objects share a sweep, so cleanup runs it
// once; external installs nothing and sweeps nothing.
func TestSweepsShared(t *testing.T) {
	sweeps := func(m origin.Mechanism) []string {
		f, ok := Lookup(m)
		if !ok {
			t.Fatalf("%s not registered", m)
		}
		var s []string
		for _, w := range f.Sweeps {
			s = append(s, w.Name)
		}
		return s
	}
	if a, b := sweeps(origin.NftablesTProxy), sweeps(origin.DNS); !slices.Equal(a, b) || len(a) == 0 {
		t.Errorf("nftables-tproxy sweeps %v, dns %v: want the same, not none", a, b)
	}
	if s := sweeps(origin.External); len(s) != 0 {
		t.Errorf("external sweeps %v", s)
	}
	if _, err := New(Options{Mechanism: "nope"}); err == nil {
		t.Error("an unknown mechanism was built")
	}
}
