package intercept

import (
	"errors"
	"fmt"
	"net"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// policyRouting is "ip rule add fwmark MARK lookup TABLE" plus "ip route add local default dev lo
// table TABLE", per family: it makes marked packets local so the TPROXY socket receives them, and
// re-routes marked output packets through lo into prerouting. Everything carries RouteProtocol.
type policyRouting struct {
	mark     uint32
	table    int
	priority int
}

func (p *policyRouting) install(v4, v6 bool) error {
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		return fmt.Errorf("policy routing: find lo: %w", err)
	}
	type fam struct {
		on     bool
		family int
		dst    *net.IPNet
	}
	for _, f := range []fam{
		{v4, netlink.FAMILY_V4, &net.IPNet{IP: net.IPv4zero.To4(), Mask: net.CIDRMask(0, 32)}},
		{v6, netlink.FAMILY_V6, &net.IPNet{IP: net.IPv6zero, Mask: net.CIDRMask(0, 128)}},
	} {
		if !f.on {
			continue
		}
		r := netlink.NewRule()
		r.Family = f.family
		r.Mark = p.mark
		mask := uint32(0xffffffff)
		r.Mask = &mask
		r.Table = p.table
		r.Priority = p.priority
		r.Protocol = RouteProtocol
		if err := netlink.RuleAdd(r); err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("policy routing: add rule fwmark %#x lookup %d: %w", p.mark, p.table, err)
		}
		rt := &netlink.Route{
			LinkIndex: lo.Attrs().Index,
			Dst:       f.dst,
			Table:     p.table,
			Type:      unix.RTN_LOCAL,
			Scope:     unix.RT_SCOPE_HOST,
			Protocol:  RouteProtocol,
			Family:    f.family,
		}
		if err := netlink.RouteReplace(rt); err != nil {
			return fmt.Errorf("policy routing: add local route to lo in table %d: %w", p.table, err)
		}
	}
	return nil
}

func (p *policyRouting) remove() error {
	_, err := removeRouting()
	return err
}

// removeRouting deletes every ip rule and route tagged with RouteProtocol, in every table and
// family, and reports what it removed.
func removeRouting() ([]string, error) {
	var removed []string
	var errs []error
	for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		rules, err := netlink.RuleList(fam)
		if err != nil {
			errs = append(errs, fmt.Errorf("list rules: %w", err))
			continue
		}
		for _, r := range rules {
			if r.Protocol != RouteProtocol {
				continue
			}
			r := r
			if err := netlink.RuleDel(&r); err != nil && !errors.Is(err, unix.ENOENT) {
				errs = append(errs, fmt.Errorf("delete rule %v: %w", r, err))
				continue
			}
			removed = append(removed, fmt.Sprintf("ip rule (%s) pref %d fwmark %#x lookup %d", famName(fam), r.Priority, r.Mark, r.Table))
		}
		routes, err := netlink.RouteListFiltered(fam, &netlink.Route{Protocol: RouteProtocol},
			netlink.RT_FILTER_TABLE|netlink.RT_FILTER_PROTOCOL)
		if err != nil {
			errs = append(errs, fmt.Errorf("list routes: %w", err))
			continue
		}
		for _, rt := range routes {
			rt := rt
			if err := netlink.RouteDel(&rt); err != nil && !errors.Is(err, unix.ESRCH) {
				errs = append(errs, fmt.Errorf("delete route %v: %w", rt, err))
				continue
			}
			removed = append(removed, fmt.Sprintf("ip route (%s) local %v dev lo table %d", famName(fam), rt.Dst, rt.Table))
		}
	}
	return removed, joinErrs(errs)
}

func famName(f int) string {
	if f == netlink.FAMILY_V6 {
		return "ipv6"
	}
	return "ipv4"
}

func joinErrs(errs []error) error { return errors.Join(errs...) }
