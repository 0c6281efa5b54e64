package intercept

import (
	"context"

	"mcpintercept/origin"
)

func init() {
	register(Factory{
		Name:        origin.NftablesTProxy,
		New:         func(o Options) (Mechanism, error) { return newNftables(o), nil },
		Transparent: func(Options) bool { return true },
		Recovery: func(Options) string {
			return "nftables tproxy in prerouting (and an output-chain mark plus policy routing for local processes) delivers the unmodified packet to a transparent listener; the accepted socket's local address is the original destination"
		},
		Sweeps: []Sweep{sweepNftables, sweepRouting},
	})
}

// The sweeps of our nftables table and of our policy routing (nftables-tproxy and dns).
var (
	sweepNftables = Sweep{Name: "nftables", Run: func(context.Context) ([]string, error) { return deleteNftTables() }}
	sweepRouting  = Sweep{Name: "policy routing", Run: func(context.Context) ([]string, error) { return removeRouting() }}
)
