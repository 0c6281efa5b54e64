// Package upstream is how the appliance reaches the original destination: a dialer that carries
// the bypass mark (so no steering rule takes the appliance's own connections back into it), the
// deny list every dialled address is checked against whatever steered the flow, and the
// dial-time resolution of a name behind a virtual IP.
package upstream

import (
	"fmt"
	"net/netip"

	"mcpintercept/origin"
)

// DenyList is the set of prefixes the appliance never dials (config upstream_deny, plus the VIP
// pools under the dns mechanism): whatever steered a flow, an address in it is refused before
// any packet leaves (DNS rebinding to 127.0.0.1, SSRF to the cloud metadata service).
type DenyList struct {
	entries []denyEntry
}

type denyEntry struct {
	p    netip.Prefix
	what string // why it is listed, for the error ("upstream_deny", "VIP pool")
}

// NewDenyList lists prefixes under the label what.
func NewDenyList(what string, ps ...netip.Prefix) *DenyList {
	d := &DenyList{}
	d.Add(what, ps...)
	return d
}

// Add appends prefixes under the label what.
func (d *DenyList) Add(what string, ps ...netip.Prefix) {
	for _, p := range ps {
		if p.IsValid() {
			d.entries = append(d.entries, denyEntry{p.Masked(), what})
		}
	}
}

// Denial is why the deny list refused an address: the cause inside the *origin.Refusal that
// Check returns. Its message is the one the engine logs.
type Denial struct {
	Addr   netip.Addr
	Prefix netip.Prefix
	What   string
	Name   string // the name that resolved to Addr, "" when the address came from the flow
	// Embedded is the IPv4 address Addr carries (NAT64, 6to4, ...) when that is what the list
	// refused; Via names the form. Both are zero when Addr itself is listed.
	Embedded netip.Addr
	Via      string
}

func (e *Denial) Error() string {
	s := fmt.Sprintf("upstream address %s is in the deny list (%s, %s)", e.Addr, e.Prefix, e.What)
	if e.Embedded.IsValid() {
		s = fmt.Sprintf("upstream address %s embeds %s (%s), which is in the deny list (%s, %s)",
			e.Addr, e.Embedded, e.Via, e.Prefix, e.What)
	}
	if e.Name != "" {
		s += fmt.Sprintf(": %s resolved into it (DNS rebinding?)", e.Name)
	}
	return s
}

// ReasonDenied is the flow record's reason for a dial the deny list refused.
const ReasonDenied = "upstream_denied"

func (d *DenyList) refuse(e *Denial) error { return origin.Refuse(ReasonDenied, e) }

// Check returns an *origin.Refusal (its cause a *Denial) when a is in the list, or when a is an IPv6 address that carries
// an IPv4 address (see embeddedForms) in the list's IPv4 entries: 64:ff9b::7f00:1 reaches
// 127.0.0.1 through any NAT64 gateway on the path, so listing 127.0.0.0/8 must refuse it too.
// IPv4-mapped addresses (::ffff:127.0.0.1) are checked as the IPv4 address they carry.
func (d *DenyList) Check(a netip.Addr) error {
	if d == nil {
		return nil
	}
	a = a.Unmap().WithZone("")
	if e := d.match(a); e != nil {
		return d.refuse(&Denial{Addr: a, Prefix: e.p, What: e.what})
	}
	if !a.Is6() {
		return nil
	}
	for _, f := range embeddedForms {
		if !f.in.Contains(a) {
			continue
		}
		for _, v4 := range f.extract(a.As16()) {
			if e := d.match(v4); e != nil {
				return d.refuse(&Denial{Addr: a, Prefix: e.p, What: e.what, Embedded: v4, Via: f.name})
			}
		}
	}
	return nil
}

func (d *DenyList) match(a netip.Addr) *denyEntry {
	for i := range d.entries {
		if d.entries[i].p.Contains(a) {
			return &d.entries[i]
		}
	}
	return nil
}

// embeddedForm is an IPv6 prefix whose addresses carry an IPv4 address that a translator or
// tunnel on the path delivers to: a dial to it is a dial to that IPv4 address.
type embeddedForm struct {
	name    string
	in      netip.Prefix
	extract func(b [16]byte) []netip.Addr
}

// embeddedForms are the IPv6 forms that reach an IPv4 address, each checked against the IPv4
// entries of the list (listing the IPv6 prefix itself would break NAT64 for every public
// address on an IPv6-only network):
//
//	prefix            form                          where the IPv4 address is
//	64:ff9b::/96      NAT64 well-known (RFC 6052)   the last 32 bits
//	64:ff9b:1::/48    NAT64 local use (RFC 8215)    per RFC 6052 2.2 for a /48, /56, /64 or /96
//	                                                network-specific prefix inside it: every
//	                                                reading the address is well formed for is
//	                                                checked (the operator's length is not known)
//	2002::/16         6to4 (RFC 3056)               bits 16..47: the relay/router it tunnels to
//	2001::/32         Teredo (RFC 4380)             the last 32 bits inverted: the client's
//	                                                mapped address, where a relay delivers
//	::/96             IPv4-compatible (RFC 4291     the last 32 bits (deprecated, but some
//	                  2.5.5.1, deprecated)          stacks still route it as IPv4)
//	::ffff:0:0:0/96   IPv4-translated (RFC 2765)    the last 32 bits (SIIT translators)
//
// IPv4-mapped ::ffff:0:0/96 needs no entry: Check unmaps it first.
var embeddedForms = []embeddedForm{
	{"NAT64 64:ff9b::/96", netip.MustParsePrefix("64:ff9b::/96"), last32},
	{"NAT64 local-use 64:ff9b:1::/48", netip.MustParsePrefix("64:ff9b:1::/48"), nat64LocalUse},
	{"6to4 2002::/16", netip.MustParsePrefix("2002::/16"), func(b [16]byte) []netip.Addr {
		return []netip.Addr{netip.AddrFrom4([4]byte(b[2:6]))}
	}},
	{"Teredo 2001::/32", netip.MustParsePrefix("2001::/32"), func(b [16]byte) []netip.Addr {
		return []netip.Addr{netip.AddrFrom4([4]byte{^b[12], ^b[13], ^b[14], ^b[15]})}
	}},
	{"IPv4-compatible ::/96", netip.MustParsePrefix("::/96"), func(b [16]byte) []netip.Addr {
		// :: and ::1 are the unspecified and loopback addresses, not IPv4-compatible ones
		// (RFC 4291 2.5.2, 2.5.3): their own entries (::/128, ::1/128) decide them.
		if a := netip.AddrFrom16(b); a.IsUnspecified() || a.IsLoopback() {
			return nil
		}
		return last32(b)
	}},
	{"IPv4-translated ::ffff:0:0:0/96", netip.MustParsePrefix("::ffff:0:0:0/96"), last32},
}

func last32(b [16]byte) []netip.Addr { return []netip.Addr{netip.AddrFrom4([4]byte(b[12:16]))} }

// nat64LocalUse reads the IPv4 address as RFC 6052 section 2.2 places it for each prefix
// length that fits inside 64:ff9b:1::/48. A shorter-prefix reading counts only when the address
// is well formed for it (bits 64..71, the "u" octet, and the suffix after the IPv4 address
// zero, as RFC 6052 requires): otherwise every /96 address would also read as some 0.x.y.z.
func nat64LocalUse(b [16]byte) []netip.Addr {
	// The /96 reading goes last: where a shorter one is well formed, the /96 reading is
	// 0.0.0.0, and the refusal should name what the address reaches.
	last := netip.AddrFrom4([4]byte(b[12:16])) // /96
	if b[8] != 0 {
		return []netip.Addr{last}
	}
	var out []netip.Addr
	zero := func(from int) bool {
		for _, c := range b[from:] {
			if c != 0 {
				return false
			}
		}
		return true
	}
	if zero(11) {
		out = append(out, netip.AddrFrom4([4]byte{b[6], b[7], b[9], b[10]})) // /48
	}
	if zero(12) {
		out = append(out, netip.AddrFrom4([4]byte{b[7], b[9], b[10], b[11]})) // /56
	}
	if zero(13) {
		out = append(out, netip.AddrFrom4([4]byte{b[9], b[10], b[11], b[12]})) // /64
	}
	return append(out, last)
}

// Prefixes are the listed prefixes, in order.
func (d *DenyList) Prefixes() []netip.Prefix {
	out := make([]netip.Prefix, len(d.entries))
	for i, e := range d.entries {
		out[i] = e.p
	}
	return out
}
