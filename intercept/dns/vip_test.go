package dns

import (
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"
)

type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time      { return c.t }
func (c *fakeClock) add(d time.Duration) { c.t = c.t.Add(d) }
func newClock() *fakeClock               { return &fakeClock{t: time.Unix(1_800_000_000, 0)} }
func pfx(s string) netip.Prefix          { return netip.MustParsePrefix(s) }
func lookup4(t *testing.T, tb *VIPTable, n string) netip.Addr {
	t.Helper()
	a, _, err := tb.Lookup(n, false)
	if err != nil {
		t.Fatalf("Lookup(%s): %v", n, err)
	}
	return a
}

func TestVIPStable(t *testing.T) {
	clk := newClock()
	tb, err := OpenVIPTable(VIPOptions{V4: pfx("198.18.0.0/24"), V6: pfx("fd00:5649::/64"), Hold: time.Hour, Quarantine: time.Hour, Now: clk.now})
	if err != nil {
		t.Fatal(err)
	}
	a := lookup4(t, tb, "mcp.example.com")
	if !pfx("198.18.0.0/24").Contains(a) || a == netip.MustParseAddr("198.18.0.0") || a == netip.MustParseAddr("198.18.0.255") {
		t.Fatalf("VIP %s outside the pool or network/broadcast", a)
	}
	for _, n := range []string{"mcp.example.com", "MCP.Example.COM", "mcp.example.com."} {
		if b := lookup4(t, tb, n); b != a {
			t.Fatalf("%s got %s, want the same VIP %s", n, b, a)
		}
	}
	b := lookup4(t, tb, "other.example.com")
	if b == a {
		t.Fatal("two names share a VIP")
	}
	v6, fresh, err := tb.Lookup("mcp.example.com", true)
	if err != nil || !fresh || !pfx("fd00:5649::/64").Contains(v6) {
		t.Fatalf("v6 = %s %v %v", v6, fresh, err)
	}
	if n, ok := tb.Name(a); !ok || n != "mcp.example.com" {
		t.Fatalf("Name(%s) = %q %v", a, n, ok)
	}
	if n, ok := tb.Name(v6); !ok || n != "mcp.example.com" {
		t.Fatalf("Name(%s) = %q %v", v6, n, ok)
	}
	if _, ok := tb.Name(netip.MustParseAddr("198.18.0.77")); ok && a != netip.MustParseAddr("198.18.0.77") && b != netip.MustParseAddr("198.18.0.77") {
		t.Fatal("an unbound VIP has a name")
	}
	// No v4 pool: no VIP, no error (the server answers NODATA).
	tb6, _ := OpenVIPTable(VIPOptions{V6: pfx("fd00:5649::/64"), Hold: time.Hour, Quarantine: time.Hour})
	if a, _, err := tb6.Lookup("x.test", false); a.IsValid() || err != nil {
		t.Fatalf("v4 lookup without a v4 pool = %s, %v", a, err)
	}
}

// TestVIPQuarantine: a VIP unused for hold is freed, stays reserved for quarantine (the same
// name asking again gets it back; another name never gets it), and only then goes to another.
func TestVIPQuarantine(t *testing.T) {
	clk := newClock()
	// A /30 has two usable addresses: .1 and .2.
	tb, err := OpenVIPTable(VIPOptions{V4: pfx("198.18.0.0/30"), Hold: time.Hour, Quarantine: 2 * time.Hour, Now: clk.now})
	if err != nil {
		t.Fatal(err)
	}
	a := lookup4(t, tb, "a.test")
	b := lookup4(t, tb, "b.test")
	clk.add(30 * time.Minute)
	lookup4(t, tb, "b.test") // b stays live
	clk.add(45 * time.Minute)
	tb.Sweep() // a: unused 75m > hold: freed, quarantined
	if _, _, err := tb.Lookup("c.test", false); !errors.Is(err, ErrPoolExhausted) {
		t.Fatalf("c.test during a's quarantine: %v, want exhausted (a's VIP is quarantined)", err)
	}
	// A client still holding a's answer dials it: the name is known, and live again.
	if n, ok := tb.Name(a); !ok || n != "a.test" {
		t.Fatalf("quarantined VIP name = %q %v", n, ok)
	}
	clk.add(61 * time.Minute)
	tb.Sweep() // a freed again (unused 61m)
	if got := lookup4(t, tb, "a.test"); got != a {
		t.Fatalf("a.test in quarantine got %s, want its old %s back", got, a)
	}
	clk.add(61 * time.Minute)
	tb.Sweep() // a freed
	clk.add(2*time.Hour + time.Minute)
	lookup4(t, tb, "b.test")
	tb.Sweep() // a's quarantine is over: forgotten
	c := lookup4(t, tb, "c.test")
	if c != a {
		t.Fatalf("c.test = %s, want the recycled %s", c, a)
	}
	if c == b {
		t.Fatal("live VIP re-mapped")
	}
	if _, ok := tb.Name(a); !ok {
		t.Fatal("recycled VIP has no name")
	}
	if n, _ := tb.Name(a); n != "c.test" {
		t.Fatalf("recycled VIP name %q", n)
	}
}

func TestVIPExhaustion(t *testing.T) {
	tb, err := OpenVIPTable(VIPOptions{V4: pfx("198.18.0.0/30"), Hold: time.Hour, Quarantine: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	lookup4(t, tb, "a.test")
	lookup4(t, tb, "b.test")
	if _, _, err := tb.Lookup("c.test", false); !errors.Is(err, ErrPoolExhausted) {
		t.Fatalf("third name in a /30: %v", err)
	}
	// max_names bounds a huge pool too (a flood of random names under a wildcard).
	tb2, _ := OpenVIPTable(VIPOptions{V6: pfx("fd00::/64"), MaxNames: 3, Hold: time.Hour, Quarantine: time.Hour})
	for i, n := range []string{"a", "b", "c", "d"} {
		_, _, err := tb2.Lookup(n+".test", true)
		if (i < 3) != (err == nil) {
			t.Fatalf("name %d: %v", i, err)
		}
	}
}

// TestVIPPersistence: the table is on disk before an answer leaves, and a reopened table (a
// restart) gives every name the VIP it had; a crash (no Close) loses nothing either.
func TestVIPPersistence(t *testing.T) {
	dir := t.TempDir()
	opt := VIPOptions{V4: pfx("198.18.0.0/16"), V6: pfx("fd00:5649::/64"), Hold: time.Hour, Quarantine: time.Hour, StateDir: dir}
	tb, err := OpenVIPTable(opt)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]netip.Addr{}
	for _, n := range []string{"a.test", "b.test", "c.test"} {
		want[n] = lookup4(t, tb, n)
	}
	v6, _, _ := tb.Lookup("a.test", true)
	// Crash: no Close.
	tb2, err := OpenVIPTable(opt)
	if err != nil {
		t.Fatal(err)
	}
	for n, a := range want {
		if got := lookup4(t, tb2, n); got != a {
			t.Fatalf("after restart %s = %s, want %s", n, got, a)
		}
	}
	if got, fresh, _ := tb2.Lookup("a.test", true); got != v6 || fresh {
		t.Fatalf("after restart a.test AAAA = %s (fresh %v), want %s", got, fresh, v6)
	}
	if err := tb2.Close(); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dir, vipJournal))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("journal %v %v", fi, err)
	}
	// A torn last line (crash mid-append) is skipped; the pool shrank: bindings outside it go.
	f, _ := os.OpenFile(filepath.Join(dir, vipJournal), os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(`{"name":"torn.test","v4":"198.`)
	f.Close()
	opt.V4 = netip.PrefixFrom(want["a.test"], 30).Masked()
	tb3, err := OpenVIPTable(opt)
	if err != nil {
		t.Fatal(err)
	}
	if n, ok := tb3.Name(want["a.test"]); !ok || n != "a.test" {
		t.Fatalf("a.test lost after pool change: %q %v", n, ok)
	}
	for _, n := range []string{"b.test", "c.test"} {
		if opt.V4.Contains(want[n]) {
			continue
		}
		if _, ok := tb3.Name(want[n]); ok {
			t.Fatalf("%s kept a VIP outside the pool", n)
		}
	}
}
