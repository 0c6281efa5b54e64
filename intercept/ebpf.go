package intercept

import (
	"context"
	"net/netip"

	"mcpintercept/origin"
)

func init() {
	register(Factory{
		Name: origin.EBPF,
		New:  newEBPFFromOptions,
		Recovery: func(Options) string {
			return "eBPF cgroup/connect4 and cgroup/connect6 on the steered cgroup record the original destination and the process (pid, uid, gid, comm, cgroup id) in socket storage and rewrite the destination to the loopback listener; a sockops program moves the record onto the accepted socket, where the engine reads it by file descriptor"
		},
		Sweeps: []Sweep{{Name: "ebpf", Run: func(context.Context) ([]string, error) { return CleanupEBPF() }}},
	})
}

// SkippedConnect is a destination the steered processes connected to that was left alone, how
// often and why (EBPF.Skipped).
type SkippedConnect struct {
	Dst    netip.AddrPort
	Reason string // SkipLoopback, SkipPort or SkipDestination
	Count  uint64
}

// Why a connect was left alone.
const (
	SkipLoopback    = "loopback destination (--no-loopback)"
	SkipPort        = "port not in the steered set"
	SkipDestination = "destination not in the steered set"
)
