package dns

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkVIPQuotaRefusal is the cost of refusing a client at its quota when the table holds
// 60000 other idle names older than the quarantine (the worst case of the recycling scan: none
// of them is the client's).
func BenchmarkVIPQuotaRefusal(b *testing.B) {
	clk := newClock()
	tb, err := OpenVIPTable(VIPOptions{V4: pfx("10.0.0.0/8"), Hold: 24 * time.Hour, Quarantine: time.Hour,
		MaxNames: 65536, ClientQuota: 8, Now: clk.now})
	if err != nil {
		b.Fatal(err)
	}
	me := Claim{Client: "10.0.0.66"}
	for i := range 8 {
		tb.LookupFor(fmt.Sprintf("mine%d.test", i), false, me)
	}
	clk.add(time.Minute)
	for i := range 60000 {
		tb.LookupFor(fmt.Sprintf("n%d.test", i), false, Claim{Client: fmt.Sprintf("c%d", i%1000)})
	}
	clk.add(2 * time.Hour)
	for i := range 8 {
		tb.LookupFor(fmt.Sprintf("mine%d.test", i), false, me) // the client's names are the newest
	}
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if _, _, err := tb.LookupFor(fmt.Sprintf("x%d.test", i), false, me); err == nil {
			b.Fatal("not refused")
		}
	}
}

// BenchmarkVIPRecycle is the cost of a new name in a full pool whose oldest binding is idle.
func BenchmarkVIPRecycle(b *testing.B) {
	clk := newClock()
	tb, err := OpenVIPTable(VIPOptions{V4: pfx("198.18.0.0/24"), Hold: 24 * time.Hour, Quarantine: time.Hour, Now: clk.now})
	if err != nil {
		b.Fatal(err)
	}
	for i := range 254 {
		tb.Lookup(fmt.Sprintf("n%d.test", i), false)
	}
	clk.add(2 * time.Hour)
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if _, _, err := tb.Lookup(fmt.Sprintf("x%d.test", i), false); err != nil {
			b.Fatal(err)
		}
		clk.add(2 * time.Hour)
	}
}

// BenchmarkVIPAssign is the cost of binding a new name (no journal) by assignment and pool
// occupancy: a roomy v4 /16 and v6 /64 with 1000 names bound, and a v4 /20 90% full, where
// sequential walks a cluster and hash probes its own slots. Each new name is removed again, so
// the occupancy stays what the case says.
func BenchmarkVIPAssign(b *testing.B) {
	for _, tc := range []struct {
		name    string
		pool    string
		v6      bool
		prefill int
	}{
		{name: "v4-16-roomy", pool: "198.18.0.0/16", prefill: 1000},
		{name: "v4-20-90pct", pool: "198.18.0.0/20", prefill: 3685},
		{name: "v6-64-roomy", pool: "fd00:5649::/64", v6: true, prefill: 1000},
	} {
		for _, assign := range []string{AssignSequential, AssignHash} {
			b.Run(tc.name+"/"+assign, func(b *testing.B) {
				opt := VIPOptions{Hold: time.Hour, Quarantine: time.Hour, Assignment: assign, MaxNames: 1 << 20}
				if tc.v6 {
					opt.V6 = pfx(tc.pool)
				} else {
					opt.V4 = pfx(tc.pool)
				}
				tb, err := OpenVIPTable(opt)
				if err != nil {
					b.Fatal(err)
				}
				for i := range tc.prefill {
					if _, _, err := tb.Lookup(fmt.Sprintf("p%d.test", i), tc.v6); err != nil {
						b.Fatal(err)
					}
				}
				for i := 0; b.Loop(); i++ {
					n := fmt.Sprintf("x%d.test", i)
					if _, _, err := tb.Lookup(n, tc.v6); err != nil {
						b.Fatal(err)
					}
					tb.mu.Lock()
					tb.removeLocked(tb.byName[n])
					tb.mu.Unlock()
				}
			})
		}
	}
}
