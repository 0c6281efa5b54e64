package intercept

import (
	"context"

	"mcpintercept/origin"
)

func init() {
	register(Factory{
		Name: origin.IptablesRedirect,
		New:  func(o Options) (Mechanism, error) { return newIptables(o), nil },
		Recovery: func(Options) string {
			return "iptables nat REDIRECT rewrites the destination to the listener; the original destination is read from conntrack with getsockopt SO_ORIGINAL_DST (IPv4) / IP6T_SO_ORIGINAL_DST (IPv6)"
		},
		Sweeps: []Sweep{{Name: "iptables", Run: func(context.Context) ([]string, error) { return removeIptables() }}},
	})
}
