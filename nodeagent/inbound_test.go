package nodeagent

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"mcpintercept/origin"
)

// TestInboundPorts: the annotation's port list is read exactly, and anything else is an error
// naming the annotation (the pod is then served without inbound interception).
func TestInboundPorts(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want []origin.PortRange
		err  bool
	}{
		{in: "", want: nil},
		{in: "3001", want: []origin.PortRange{{From: 3001, To: 3001}}},
		{in: " 3001 , 8080-8081", want: []origin.PortRange{{From: 3001, To: 3001}, {From: 8080, To: 8081}}},
		{in: "0", err: true},
		{in: "65536", err: true},
		{in: "8081-8080", err: true},
		{in: "http", err: true},
		{in: "3001,", err: true},
		{in: "1-2-3", err: true},
		{in: strings.Repeat("1,", 64) + "1", err: true},
	} {
		p := &Pod{Annotations: map[string]string{InboundPortsAnnotation: tt.in}}
		got, err := p.InboundPorts()
		if (err != nil) != tt.err || !slices.Equal(got, tt.want) {
			t.Errorf("InboundPorts(%q) = %v, %v; want %v (error %v)", tt.in, got, err, tt.want, tt.err)
		}
		if err != nil && !strings.Contains(err.Error(), InboundPortsAnnotation) {
			t.Errorf("InboundPorts(%q): error %q does not name the annotation", tt.in, err)
		}
	}
}

// TestPodIPs: a pod's addresses come from status.podIP and status.podIPs, once each, IPv4-mapped
// addresses unmapped (an inbound client is looked up by them).
func TestPodIPs(t *testing.T) {
	pod, _, err := ParseObject([]byte(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a","namespace":"n"},
		"status":{"podIP":"10.1.0.5","podIPs":[{"ip":"10.1.0.5"},{"ip":"fd00::5"},{"ip":"::ffff:10.1.0.6"}]}}`))
	if err != nil {
		t.Fatal(err)
	}
	want := []netip.Addr{netip.MustParseAddr("10.1.0.5"), netip.MustParseAddr("fd00::5"), netip.MustParseAddr("10.1.0.6")}
	if !slices.Equal(pod.IPs, want) {
		t.Fatalf("IPs %v, want %v", pod.IPs, want)
	}
}

// FuzzInboundPorts: any annotation value gives ranges with 0 < From <= To, or an error.
func FuzzInboundPorts(f *testing.F) {
	for _, s := range []string{"3001", "3001,8080-8081", "0", "8081-8080", "a,b", "1-65535", " 22 ,  "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := (&Pod{Annotations: map[string]string{InboundPortsAnnotation: s}}).InboundPorts()
		if err != nil {
			return
		}
		for _, r := range got {
			if r.From == 0 || r.To < r.From {
				t.Fatalf("%q gave %v", s, got)
			}
		}
	})
}
