package intercept

import (
	"context"
	"errors"
)

// Cleanup removes everything any mcpintercept daemon could have installed in this network
// namespace — our nftables table, our iptables chains and jumps, and every ip rule and route
// tagged with RouteProtocol, and eBPF leftovers (pins, links no live process holds, cgroups of dead
// `exec` runs) — without needing its configuration, so it also works after SIGKILL.
// It is idempotent and returns a line per removed object.
func Cleanup(ctx context.Context) ([]string, error) {
	var removed []string
	var errs []error
	for _, step := range []func() ([]string, error){deleteNftTables, removeIptables, removeRouting, CleanupEBPF} {
		r, err := step()
		removed = append(removed, r...)
		if err != nil {
			errs = append(errs, err)
		}
	}
	return removed, errors.Join(errs...)
}
