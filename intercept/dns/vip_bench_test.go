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
