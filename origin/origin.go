// Package origin is the value a steering mechanism hands the engine for each connection it
// accepted: where the connection was going, the name the client resolved when the mechanism knows
// it, and the process that opened it when the mechanism knows that. It is a leaf package so that
// intercept (which produces origins) and engine (which consumes them) share the type without
// either importing the other.
package origin

import (
	"fmt"
	"net"
	"net/netip"
)

// Origin is what a mechanism knows about one accepted connection.
type Origin struct {
	// Dst is the original destination: where the client connected before it was steered.
	Dst netip.AddrPort
	// Host is the name the client resolved to reach Dst, when the mechanism knows it (DNS
	// interception will: the name behind the virtual IP); "" otherwise.
	Host string
	// Identity is the process that made the connect, when the mechanism knows it (eBPF); nil
	// otherwise.
	Identity *Identity
	// Pod is the Kubernetes pod whose network namespace the connection came from, when the node
	// agent steered it (mcpintercept node-agent); nil otherwise.
	Pod *Pod
	// Mechanism is the contract name of the mechanism that steered the connection
	// (nftables-tproxy, iptables-redirect, ebpf, dns, external).
	Mechanism string
}

// Identity is who made a steered connect, as the BPF program saw it in connect(). PID, UID and
// GID are as seen from the initial namespaces (an appliance in a container's PID namespace would
// see other numbers in /proc).
type Identity struct {
	PID, UID, GID uint32
	Comm          string
	CgroupID      uint64
	// Exe is /proc/PID/exe at lookup time, "" when the process is gone.
	Exe string
}

// Pod is a Kubernetes pod as the node agent knows it: the client identity of every flow steered
// inside that pod's network namespace. Labels is shared by every flow of the pod and never
// modified once the pod is enrolled (a relabelled pod gets a new Pod value).
type Pod struct {
	Namespace, Name, UID string
	ServiceAccount       string
	Labels               map[string]string
}

// AddrPortOf converts a net.Addr of a TCP connection, unmapping IPv4-mapped IPv6 addresses so that
// logs and loop checks compare like with like.
func AddrPortOf(a net.Addr) (netip.AddrPort, error) {
	ta, ok := a.(*net.TCPAddr)
	if !ok || ta == nil {
		return netip.AddrPort{}, fmt.Errorf("not a TCP address: %v", a)
	}
	ap := ta.AddrPort()
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), nil
}
