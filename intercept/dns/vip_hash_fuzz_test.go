package dns

import (
	"fmt"
	"net/netip"
	"testing"
	"time"
)

// FuzzHashAssign drives a hash-assigned table through a sequence of operations read from ops,
// two bytes each: lookups of a few dozen names in either family, dials of a bound VIP, and
// clock steps with sweeps (which free, quarantine and forget). Whatever the sequence, every VIP
// given out lies in its pool off the network (and IPv4 broadcast) address, no two names in the
// table hold one VIP, a name keeps its VIP while it stays in the table, and a second table fed
// the same sequence answers the same (the assignment is a function of the names and their order).
func FuzzHashAssign(f *testing.F) {
	f.Add(uint8(29), uint8(124), []byte{0, 1, 0, 2, 0, 3, 0, 4, 0, 5, 0, 6, 0, 7})
	f.Add(uint8(30), uint8(126), []byte{0, 1, 0, 1, 2, 9, 3, 0, 0, 2, 0, 3})
	f.Add(uint8(24), uint8(64), []byte{1, 1, 1, 2, 0, 1, 4, 7, 3, 3, 0, 5})
	f.Fuzz(func(t *testing.T, bits4, bits6 uint8, ops []byte) {
		if len(ops) > 400 {
			ops = ops[:400]
		}
		p4 := netip.PrefixFrom(netip.MustParseAddr("198.18.0.0"), 16+int(bits4)%15)  // /16 … /30
		p6 := netip.PrefixFrom(netip.MustParseAddr("fd00:5649::"), 32+int(bits6)%95) // /32 … /126
		run := func() []string {
			clk := newClock()
			tb, err := OpenVIPTable(VIPOptions{V4: p4, V6: p6, Hold: time.Hour, Quarantine: time.Hour,
				MaxNames: 64, Assignment: AssignHash, Now: clk.now})
			if err != nil {
				t.Fatal(err)
			}
			type key struct {
				name string
				v6   bool
			}
			have := map[key]netip.Addr{} // VIPs given out, while their name is in the table
			var trace []string
			for i := 0; i+1 < len(ops); i += 2 {
				op, arg := ops[i]%4, ops[i+1]
				switch op {
				case 0, 1: // lookup
					v6 := op == 1
					name := fmt.Sprintf("n%d.test", arg%40)
					vip, _, err := tb.Lookup(name, v6)
					trace = append(trace, fmt.Sprint(name, v6, vip, err))
					if err != nil {
						continue
					}
					pool := p4
					if v6 {
						pool = p6
					}
					if !pool.Contains(vip) || vip == pool.Addr() {
						t.Fatalf("%s got %s outside %s or on its network address", name, vip, pool)
					}
					if !v6 && vip == broadcast(pool) {
						t.Fatalf("%s got the broadcast address %s", name, vip)
					}
					k := key{name, v6}
					if old, ok := have[k]; ok && old != vip {
						t.Fatalf("%s re-mapped from %s to %s while in the table", name, old, vip)
					}
					have[k] = vip
				case 2: // a dial of a VIP that name was given
					k := key{fmt.Sprintf("n%d.test", arg%40), arg >= 128}
					if vip, ok := have[k]; ok {
						n, ok := tb.Name(vip)
						trace = append(trace, fmt.Sprint("dial ", vip, n, ok))
						if !ok || n != k.name {
							t.Fatalf("Name(%s) = %q %v, want %s", vip, n, ok, k.name)
						}
					}
				case 3: // time passes
					clk.add(time.Duration(arg) * time.Minute)
					tb.Sweep()
				}
				tb.mu.Lock()
				seen := map[netip.Addr]string{}
				for n, e := range tb.byName {
					for _, a := range []netip.Addr{e.V4, e.V6} {
						if !a.IsValid() {
							continue
						}
						if other, dup := seen[a]; dup {
							tb.mu.Unlock()
							t.Fatalf("%s and %s both hold %s", n, other, a)
						}
						seen[a] = n
						if tb.byAddr[a] != e {
							tb.mu.Unlock()
							t.Fatalf("byAddr[%s] is not %s's entry", a, n)
						}
					}
				}
				for k := range have {
					if e := tb.byName[k.name]; e == nil || !e.addr(k.v6).IsValid() {
						delete(have, k) // forgotten: it may come back elsewhere
					}
				}
				tb.mu.Unlock()
			}
			return trace
		}
		a, b := run(), run()
		if fmt.Sprint(a) != fmt.Sprint(b) {
			t.Fatalf("two tables fed the same sequence differ:\n%v\n%v", a, b)
		}
	})
}

func broadcast(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().As4()
	host := 32 - p.Bits()
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3]) | (1<<host - 1)
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}
