package intercept

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"

	"github.com/coreos/go-iptables/iptables"

	"mcpintercept/origin"
)

// iptablesRedirect steers with NAT REDIRECT in a chain of ours (MCPINTERCEPT in the nat table of
// iptables and ip6tables), jumped to from PREROUTING (routed clients) and OUTPUT (local processes).
// The chain returns for local destinations and for the bypass mark, then redirects each configured
// prefix and port range to the listener port. Conntrack keeps the original destination, which
// SO_ORIGINAL_DST reads back.
type iptablesRedirect struct{ o Options }

func newIptables(o Options) *iptablesRedirect { return &iptablesRedirect{o: o} }

func (r *iptablesRedirect) Name() origin.Mechanism { return origin.IptablesRedirect }

// Origin implements Mechanism: REDIRECT rewrote the destination; conntrack keeps the original.
func (r *iptablesRedirect) Origin(c *net.TCPConn) (origin.Origin, error) {
	dst, err := soOriginalDst(c)
	return originOf(origin.IptablesRedirect, dst, err)
}

// jumpSpec is the one rule we add to built-in chains; the comment lets an operator see whose it is.
var jumpSpec = []string{"-m", "comment", "--comment", "mcpintercept", "-j", IptChainName}

func (r *iptablesRedirect) Install(ctx context.Context) error {
	has4, has6 := false, false
	for _, p := range r.o.Destinations {
		if p.Addr().Is4() {
			has4 = true
		} else {
			has6 = true
		}
	}
	for _, proto := range []iptables.Protocol{iptables.ProtocolIPv4, iptables.ProtocolIPv6} {
		if (proto == iptables.ProtocolIPv4 && !has4) || (proto == iptables.ProtocolIPv6 && !has6) {
			continue
		}
		if err := r.installProto(proto); err != nil {
			r.Remove(ctx)
			return err
		}
	}
	return nil
}

func (r *iptablesRedirect) installProto(proto iptables.Protocol) error {
	ipt, err := iptables.NewWithProtocol(proto)
	if err != nil {
		return fmt.Errorf("%s: %w (is the iptables package installed?)", protoName(proto), err)
	}
	o := r.o
	if err := ipt.ClearChain("nat", IptChainName); err != nil {
		return fmt.Errorf("%s: create chain %s: %w", protoName(proto), IptChainName, err)
	}
	bypass := fmt.Sprintf("%#x/%#x", o.BypassMark, o.BypassMark)
	rules := [][]string{
		{"-m", "mark", "--mark", bypass, "-j", "RETURN"},
		{"-m", "addrtype", "--dst-type", "LOCAL", "-j", "RETURN"},
	}
	for _, p := range o.Destinations {
		if p.Addr().Is4() != (proto == iptables.ProtocolIPv4) {
			continue
		}
		for _, pr := range o.Ports {
			dport := strconv.Itoa(int(pr.From))
			if pr.To != pr.From {
				dport += ":" + strconv.Itoa(int(pr.To))
			}
			rules = append(rules, []string{"-d", p.String(), "-p", "tcp", "--dport", dport,
				"-j", "REDIRECT", "--to-ports", strconv.Itoa(int(o.Port))})
		}
	}
	for _, spec := range rules {
		if err := ipt.Append("nat", IptChainName, spec...); err != nil {
			return fmt.Errorf("%s: append rule: %w", protoName(proto), err)
		}
	}
	hooks := []string{"PREROUTING"}
	if o.Local {
		hooks = append(hooks, "OUTPUT")
	}
	for _, h := range hooks {
		if err := ipt.InsertUnique("nat", h, 1, jumpSpec...); err != nil {
			return fmt.Errorf("%s: jump from %s: %w", protoName(proto), h, err)
		}
	}
	return nil
}

func (r *iptablesRedirect) Remove(ctx context.Context) error {
	_, err := removeIptables()
	return err
}

// removeIptables deletes our jumps and chain from both protocols' nat tables, reporting what it
// removed. A missing iptables binary means nothing of ours can exist there.
func removeIptables() ([]string, error) {
	var removed []string
	var errs []error
	for _, proto := range []iptables.Protocol{iptables.ProtocolIPv4, iptables.ProtocolIPv6} {
		ipt, err := iptables.NewWithProtocol(proto)
		if err != nil {
			continue
		}
		for _, h := range []string{"PREROUTING", "OUTPUT"} {
			for {
				ok, err := ipt.Exists("nat", h, jumpSpec...)
				if err != nil || !ok {
					break
				}
				if err := ipt.Delete("nat", h, jumpSpec...); err != nil {
					errs = append(errs, fmt.Errorf("%s: delete jump from %s: %w", protoName(proto), h, err))
					break
				}
				removed = append(removed, fmt.Sprintf("%s nat %s jump to %s", protoName(proto), h, IptChainName))
			}
		}
		ok, err := ipt.ChainExists("nat", IptChainName)
		if err != nil || !ok {
			continue
		}
		if err := ipt.ClearAndDeleteChain("nat", IptChainName); err != nil {
			errs = append(errs, fmt.Errorf("%s: delete chain %s: %w", protoName(proto), IptChainName, err))
			continue
		}
		removed = append(removed, fmt.Sprintf("%s nat chain %s", protoName(proto), IptChainName))
	}
	return removed, errors.Join(errs...)
}

func protoName(p iptables.Protocol) string {
	if p == iptables.ProtocolIPv6 {
		return "ip6tables"
	}
	return "iptables"
}
