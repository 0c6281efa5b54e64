package dns

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"net/netip"
	"strings"
	"testing"
	"time"
)

// countObs counts what the table reports (the Metrics' hooks, without Prometheus).
type countObs struct{ collisions [2]int }

func (o *countObs) recycled(string)  {}
func (o *countObs) nearFull(bool)    {}
func (o *countObs) collided(v6 bool) { o.collisions[b2i(v6)]++ }

func b2i(v6 bool) int {
	if v6 {
		return 1
	}
	return 0
}

// specHome is slot_0 as vip_hash.go documents it, computed here from the text rather than the
// code: SHA-256 of "mcpintercept-vip", 0, the pool, 0, the canonical name, 0, uint32be(0); its
// first 8 bytes big-endian (the whole digest above 64 host bits) modulo the usable addresses,
// plus 1, added to the pool's address.
func specHome(pool netip.Prefix, name string) netip.Addr {
	pool = pool.Masked()
	var msg bytes.Buffer
	msg.WriteString("mcpintercept-vip\x00" + pool.String() + "\x00" + CanonicalName(name) + "\x00")
	binary.Write(&msg, binary.BigEndian, uint32(0))
	sum := sha256.Sum256(msg.Bytes())
	hostBits := pool.Addr().BitLen() - pool.Bits()
	usable := new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), uint(hostBits)), big.NewInt(1))
	if pool.Addr().Is4() {
		usable.Sub(usable, big.NewInt(1))
	}
	h := new(big.Int).SetBytes(sum[:8])
	if hostBits > 64 {
		h.SetBytes(sum[:])
	}
	off := h.Mod(h, usable)
	off.Add(off, big.NewInt(1))
	v := new(big.Int).Add(new(big.Int).SetBytes(pool.Addr().AsSlice()), off)
	a, _ := netip.AddrFromSlice(v.FillBytes(make([]byte, pool.Addr().BitLen()/8)))
	return a
}

func hashTable(t testing.TB, opt VIPOptions) (*VIPTable, *countObs) {
	t.Helper()
	opt.Assignment = AssignHash
	if opt.Hold == 0 {
		opt.Hold, opt.Quarantine = time.Hour, time.Hour
	}
	tb, err := OpenVIPTable(opt)
	if err != nil {
		t.Fatal(err)
	}
	o := &countObs{}
	tb.SetObserver(o)
	return tb, o
}

func names(n int, format string) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf(format, i)
	}
	return out
}

// TestVIPHashReplicasAgree: two tables with their own state directories (two replicas that
// never talk), given the same names in different orders and spellings, give every name that
// collided in neither the VIP the documented function gives it, hence the same VIP; a restart
// reloads the same mapping.
func TestVIPHashReplicasAgree(t *testing.T) {
	for _, tc := range []struct {
		name   string
		v4, v6 netip.Prefix
		n      int
	}{
		{name: "v4 /16 and v6 /64", v4: pfx("198.18.0.0/16"), v6: pfx("fd00:5649::/64"), n: 300},
		{name: "v4 /22 (some collisions)", v4: pfx("198.18.4.0/22"), n: 300},
		{name: "v6 /48 (wider than 64 host bits)", v6: pfx("fd00:5649:1::/48"), n: 100},
		{name: "v6 /120", v6: pfx("fd00:5649:2::/120"), n: 60},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dirA, dirB := t.TempDir(), t.TempDir()
			optA := VIPOptions{V4: tc.v4, V6: tc.v6, StateDir: dirA, MaxNames: 10000, ClientQuota: 10000, PatternQuota: 10000}
			optB := optA
			optB.StateDir = dirB
			a, obsA := hashTable(t, optA)
			b, obsB := hashTable(t, optB)
			ns := names(tc.n, "tool%d.mcp.example.com")
			type key struct {
				name string
				v6   bool
			}
			gotA, gotB := map[key]netip.Addr{}, map[key]netip.Addr{}
			fams := []bool{}
			if tc.v4.IsValid() {
				fams = append(fams, false)
			}
			if tc.v6.IsValid() {
				fams = append(fams, true)
			}
			for _, v6 := range fams {
				for _, n := range ns {
					vip, _, err := a.Lookup(n, v6)
					if err != nil {
						t.Fatal(err)
					}
					gotA[key{n, v6}] = vip
				}
			}
			// B: reversed, upper-case with a trailing dot, v6 first.
			for i := len(fams) - 1; i >= 0; i-- {
				for j := len(ns) - 1; j >= 0; j-- {
					vip, _, err := b.Lookup(strings.ToUpper(ns[j])+".", fams[i])
					if err != nil {
						t.Fatal(err)
					}
					gotB[key{ns[j], fams[i]}] = vip
				}
			}
			agree, displaced := 0, [2]int{}
			for k, va := range gotA {
				pool := tc.v4
				if k.v6 {
					pool = tc.v6
				}
				home := specHome(pool, k.name)
				if hv, _ := HashVIP(pool, k.name); hv != home {
					t.Fatalf("HashVIP(%s, %s) = %s, the documented function gives %s", pool, k.name, hv, home)
				}
				vb := gotB[k]
				atHomeA, atHomeB := va == home, vb == home
				if !atHomeA {
					displaced[0]++
				}
				if !atHomeB {
					displaced[1]++
				}
				if atHomeA != atHomeB {
					continue // collided in one replica only: may differ
				}
				if atHomeA && va != vb {
					t.Fatalf("%s: replica A %s, replica B %s", k.name, va, vb)
				}
				if va == vb {
					agree++
				}
			}
			// Every disagreement is a name off its first slot in at least one replica.
			if min := len(gotA) - displaced[0] - displaced[1]; agree < min || agree == 0 {
				t.Fatalf("%d of %d names agree, want at least %d (displaced: %v)", agree, len(gotA), min, displaced)
			}
			t.Logf("%d of %d names agree; off their first slot: A %d, B %d", agree, len(gotA), displaced[0], displaced[1])
			if got := obsA.collisions[0] + obsA.collisions[1]; got != displaced[0] {
				t.Errorf("replica A counted %d collisions, %d names are off their first slot", got, displaced[0])
			}
			if got := obsB.collisions[0] + obsB.collisions[1]; got != displaced[1] {
				t.Errorf("replica B counted %d collisions, %d names are off their first slot", got, displaced[1])
			}
			// A restart (crash: no Close) reloads every binding, collided ones included.
			a2, _ := hashTable(t, optA)
			for k, va := range gotA {
				if got, fresh, err := a2.Lookup(k.name, k.v6); got != va || fresh || err != nil {
					t.Fatalf("after restart %s = %s (fresh %v, %v), want %s", k.name, got, fresh, err, va)
				}
			}
		})
	}
}

// TestVIPHashSameOrderAgreesEverywhere: replicas that bind the same names in the same order agree
// on every name, colliding ones included (the contract for names that collide).
func TestVIPHashSameOrderAgreesEverywhere(t *testing.T) {
	opt := VIPOptions{V4: pfx("198.18.0.0/26"), MaxNames: 1000, ClientQuota: 1000, PatternQuota: 1000}
	a, obs := hashTable(t, opt)
	b, _ := hashTable(t, opt)
	for _, n := range names(60, "n%d.test") { // 60 of 62 slots: many collisions
		va, vb := lookup4(t, a, n), lookup4(t, b, n)
		if va != vb {
			t.Fatalf("%s: %s and %s", n, va, vb)
		}
	}
	if obs.collisions[0] == 0 {
		t.Fatal("60 names in 62 slots and no collision counted")
	}
}

// TestVIPHashCollision: a /29 (six usable addresses) filled by names in two orders: no two live
// names ever share a VIP, nothing outside the pool or on its network or broadcast address is
// given out, every name off its first slot is counted and the first logged, and a seventh name
// finds the pool exhausted.
func TestVIPHashCollision(t *testing.T) {
	pool := pfx("198.18.0.8/29")
	ns := names(6, "c%d.test")
	for _, tc := range []struct {
		name  string
		order []int
	}{
		{name: "forward", order: []int{0, 1, 2, 3, 4, 5}},
		{name: "reverse", order: []int{5, 4, 3, 2, 1, 0}},
		{name: "shuffled", order: []int{3, 0, 5, 1, 4, 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs bytes.Buffer
			tb, obs := hashTable(t, VIPOptions{V4: pool, StateDir: t.TempDir(), ClientQuota: 100, PatternQuota: 100,
				Log: slog.New(slog.NewTextHandler(&logs, nil))})
			seen := map[netip.Addr]string{}
			displaced := 0
			for _, i := range tc.order {
				a := lookup4(t, tb, ns[i])
				if !pool.Contains(a) || a == pool.Addr() || a == netip.MustParseAddr("198.18.0.15") {
					t.Fatalf("%s got %s: outside the pool or its network/broadcast address", ns[i], a)
				}
				if other, dup := seen[a]; dup {
					t.Fatalf("%s and %s share %s", ns[i], other, a)
				}
				seen[a] = ns[i]
				if a != specHome(pool, ns[i]) {
					displaced++
				}
			}
			if displaced == 0 {
				t.Fatal("six names filled a /29 with no collision: the test proves nothing (pick other names)")
			}
			if obs.collisions[0] != displaced {
				t.Fatalf("counted %d collisions, %d names are off their first slot", obs.collisions[0], displaced)
			}
			if n := strings.Count(logs.String(), "VIP hash collision"); n != 1 {
				t.Fatalf("collision logged %d times, want once:\n%s", n, logs.String())
			}
			if _, _, err := tb.Lookup("seventh.test", false); !errors.Is(err, ErrPoolExhausted) {
				t.Fatalf("seventh name in a full /29: %v", err)
			}
			if obs.collisions[0] != displaced {
				t.Fatal("a name that got no VIP was counted as a collision")
			}
			for a, n := range seen {
				if got, ok := tb.Name(a); !ok || got != n {
					t.Fatalf("Name(%s) = %q, want %q", a, got, n)
				}
			}
		})
	}
}

// homeTwin finds a name other than name whose first slot in pool is name's.
func homeTwin(t *testing.T, pool netip.Prefix, name string) string {
	t.Helper()
	home := specHome(pool, name)
	for i := range 10000 {
		n := fmt.Sprintf("twin%d.test", i)
		if specHome(pool, n) == home {
			return n
		}
	}
	t.Fatal("no twin found")
	return ""
}

// TestVIPHashHoldAndQuarantine: a held name's slot and a quarantined name's slot are never given
// to a name that hashes there; the quarantined name gets its own slot back, and once it is
// forgotten the slot goes to the next name that hashes there.
func TestVIPHashHoldAndQuarantine(t *testing.T) {
	pool := pfx("198.18.0.0/28")
	clk := newClock()
	tb, obs := hashTable(t, VIPOptions{V4: pool, Hold: time.Hour, Quarantine: 2 * time.Hour, Now: clk.now,
		ClientQuota: 100, PatternQuota: 100})
	a := lookup4(t, tb, "a.test")
	if a != specHome(pool, "a.test") {
		t.Fatalf("a.test in an empty table got %s, want its first slot %s", a, specHome(pool, "a.test"))
	}
	twin := homeTwin(t, pool, "a.test")
	// Held (live): the twin goes elsewhere.
	if got := lookup4(t, tb, twin); got == a {
		t.Fatalf("%s got a.test's live VIP %s", twin, a)
	}
	if obs.collisions[0] != 1 {
		t.Fatalf("collisions %d, want 1", obs.collisions[0])
	}
	clk.add(61 * time.Minute)
	lookup4(t, tb, twin)
	tb.Sweep() // a.test freed: quarantined
	twin2 := ""
	for i := range 10000 {
		n := fmt.Sprintf("other%d.test", i)
		if specHome(pool, n) == a {
			twin2 = n
			break
		}
	}
	if got := lookup4(t, tb, twin2); got == a {
		t.Fatalf("%s got a.test's quarantined VIP %s", twin2, a)
	}
	if got := lookup4(t, tb, "a.test"); got != a {
		t.Fatalf("a.test in quarantine got %s, want its own %s back", got, a)
	}
	// Forget a.test: freed after hold, then past the quarantine.
	clk.add(61 * time.Minute)
	lookup4(t, tb, twin)
	lookup4(t, tb, twin2)
	tb.Sweep()
	clk.add(2*time.Hour + time.Minute)
	lookup4(t, tb, twin)
	lookup4(t, tb, twin2)
	tb.Sweep()
	if _, ok := tb.Name(a); ok {
		t.Fatal("a.test not forgotten after its quarantine")
	}
	twin3 := ""
	for i := range 10000 {
		n := fmt.Sprintf("third%d.test", i)
		if specHome(pool, n) == a {
			twin3 = n
			break
		}
	}
	if got := lookup4(t, tb, twin3); got != a {
		t.Fatalf("%s got %s, want the free slot %s", twin3, got, a)
	}
}

// TestVIPAssignmentOption: the option's values, and sequential ("" too) keeping today's search.
func TestVIPAssignmentOption(t *testing.T) {
	for _, tc := range []struct {
		name       string
		assignment string
		wantErr    bool
	}{
		{name: "default", assignment: ""},
		{name: "sequential", assignment: AssignSequential},
		{name: "hash", assignment: AssignHash},
		{name: "unknown", assignment: "random", wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tb, err := OpenVIPTable(VIPOptions{V4: pfx("198.18.0.0/16"), Hold: time.Hour, Quarantine: time.Hour, Assignment: tc.assignment})
			if tc.wantErr {
				if err == nil {
					t.Fatal("accepted")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := lookup4(t, tb, "mcp.example.com")
			want, _ := HashVIP(pfx("198.18.0.0/16"), "mcp.example.com")
			if tc.assignment != AssignHash {
				seq, _ := OpenVIPTable(VIPOptions{V4: pfx("198.18.0.0/16")})
				seq.mu.Lock()
				want, _ = seq.searchLocked("mcp.example.com", pfx("198.18.0.0/16"))
				seq.mu.Unlock()
			}
			if got != want {
				t.Fatalf("got %s, want %s", got, want)
			}
		})
	}
}

// TestVIPHashAdopt: a replica that never answered a name binds it when a flow to the VIP
// another replica derived for it arrives naming it, and only then: not another name's VIP, not
// a VIP off the name's sequence, not under sequential, and within the client's quota.
func TestVIPHashAdopt(t *testing.T) {
	pool := pfx("198.18.0.0/24")
	a, _ := hashTable(t, VIPOptions{V4: pool, ClientQuota: 2, PatternQuota: 100})
	b, _ := hashTable(t, VIPOptions{V4: pool, ClientQuota: 2, PatternQuota: 100})
	va := lookup4(t, a, "x.mcp.test") // replica A answered
	other := lookup4(t, a, "y.mcp.test")
	for _, tc := range []struct {
		name   string
		vip    netip.Addr
		sni    string
		wantOK bool
	}{
		{name: "another name's VIP", vip: other, sni: "x.mcp.test"},
		{name: "outside the pool", vip: netip.MustParseAddr("10.0.0.1"), sni: "x.mcp.test"},
		{name: "the derived VIP", vip: va, sni: "X.Mcp.Test.", wantOK: true},
		{name: "again (bound already)", vip: va, sni: "x.mcp.test", wantOK: true},
		{name: "a bound name, another VIP", vip: other, sni: "x.mcp.test"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ok, err := b.Adopt(tc.vip, tc.sni, Claim{Client: "10.0.0.9"})
			if err != nil || ok != tc.wantOK {
				t.Fatalf("Adopt(%s, %s) = %v, %v; want %v", tc.vip, tc.sni, ok, err, tc.wantOK)
			}
		})
	}
	if n, ok := b.Name(va); !ok || n != "x.mcp.test" {
		t.Fatalf("B's name for %s = %q %v", va, n, ok)
	}
	if _, ok := b.Name(other); ok {
		t.Fatal("B bound y.mcp.test's VIP without being asked")
	}
	// The client's quota (2) holds for adoption as for queries.
	lookup := func(n string) { b.LookupFor(n, false, Claim{Client: "10.0.0.9"}) }
	lookup("z.mcp.test")
	if ok, err := b.Adopt(other, "y.mcp.test", Claim{Client: "10.0.0.9"}); ok || !errors.Is(err, ErrQuota) {
		t.Fatalf("adoption over quota = %v, %v", ok, err)
	}
	seq, _ := OpenVIPTable(VIPOptions{V4: pool, Hold: time.Hour, Quarantine: time.Hour})
	if ok, _ := seq.Adopt(va, "x.mcp.test", Claim{}); ok {
		t.Fatal("sequential adopted")
	}
}

func TestClaimFor(t *testing.T) {
	p := NewNamePatterns([]string{"mcp.test", "*.mcp.test"})
	for _, tc := range []struct {
		name, client, sni string
		want              Claim
		ok                bool
	}{
		{name: "exact", client: "10.0.0.9", sni: "MCP.test.", want: Claim{Client: "10.0.0.9", Pattern: "mcp.test"}, ok: true},
		{name: "wildcard, v6 per /64", client: "fd00::1:2", sni: "a.mcp.test", want: Claim{Client: "fd00::/64", Pattern: "*.mcp.test"}, ok: true},
		{name: "not intercepted", client: "10.0.0.9", sni: "other.test"},
		{name: "no SNI", client: "10.0.0.9", sni: ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, ok := ClaimFor(p, netip.MustParseAddr(tc.client), tc.sni)
			if c != tc.want || ok != tc.ok {
				t.Fatalf("ClaimFor = %+v %v, want %+v %v", c, ok, tc.want, tc.ok)
			}
		})
	}
}
