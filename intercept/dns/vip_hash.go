package dns

import (
	"crypto/sha256"
	"encoding/binary"
	"math"
	"math/big"
	"net/netip"
)

// The hash assignment (dns.vip_assignment: hash) gives a name the first free slot of a
// sequence that depends only on the name and the pool:
//
//	slot_i = SHA-256("mcpintercept-vip" 0x00 pool 0x00 name 0x00 uint32be(i)) mod usable
//
// where pool is the masked prefix as netip.Prefix.String writes it, name is canonical
// (CanonicalName: lower-case ASCII, no trailing dot), usable is the number of addresses the pool
// can give out (the network address, and IPv4's broadcast, excluded), the first 8 bytes of the
// digest are read big-endian (the whole digest for pools wider than 64 host bits), and the VIP is
// the pool's address plus 1 + slot. After hashProbes slots the search walks the pool from slot_0,
// so a small pool is searched completely.
//
// Replicas with the same pools that never talk to each other therefore give a name the same VIP
// whenever its slot_0 is free in both. A taken slot_0 (another name bound, held or quarantined
// there) is a collision: the name goes on down its own sequence, counted and logged. Since a
// live VIP is never moved, who wins a contested slot depends on which name was bound first, so
// two replicas agree on a colliding name when the contested names were bound in the same order
// (and neither recycled them differently); otherwise they may differ on those names only.
// Everything else in the table (persistence, hold, quarantine, quotas, recycling) is as for the
// sequential assignment.

// hashProbes is how many slots of a name's own sequence are tried before the walk.
const hashProbes = 32

// hashDomain separates this use of SHA-256 from any other.
const hashDomain = "mcpintercept-vip"

// hashPool computes one name's slots in one pool.
type hashPool struct {
	pool netip.Prefix
	v4   bool
	base [16]byte // the pool's (masked) address, as 16 bytes
	u    uint64   // usable addresses, when the pool has at most 64 host bits
	ubig *big.Int // usable addresses of a wider pool (u unused)
	msg  []byte   // the hashed message; its last 4 bytes are i
}

func newHashPool(pool netip.Prefix, name string) (*hashPool, bool) {
	p := &hashPool{pool: pool, v4: pool.Addr().Is4(), base: pool.Addr().As16()}
	hostBits := pool.Addr().BitLen() - pool.Bits()
	switch {
	case hostBits > 64:
		p.ubig = new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), uint(hostBits)), big.NewInt(1))
	case hostBits == 64:
		p.u = math.MaxUint64 // 2^64 - 1: every offset but the network address
	default:
		p.u = 1<<hostBits - 1
		if p.v4 {
			if p.u == 0 {
				return nil, false
			}
			p.u-- // the broadcast address
		}
	}
	if p.ubig == nil && p.u == 0 {
		return nil, false
	}
	ps := pool.String()
	p.msg = make([]byte, 0, len(hashDomain)+len(ps)+len(name)+7)
	p.msg = append(p.msg, hashDomain...)
	p.msg = append(p.msg, 0)
	p.msg = append(p.msg, ps...)
	p.msg = append(p.msg, 0)
	p.msg = append(p.msg, name...)
	p.msg = append(p.msg, 0, 0, 0, 0, 0)
	return p, true
}

// slot is slot_i: a 0-based index among the usable addresses (big only for a wide pool).
func (p *hashPool) slot(i uint32) (uint64, *big.Int) {
	binary.BigEndian.PutUint32(p.msg[len(p.msg)-4:], i)
	sum := sha256.Sum256(p.msg)
	if p.ubig != nil {
		return 0, new(big.Int).Mod(new(big.Int).SetBytes(sum[:]), p.ubig)
	}
	return binary.BigEndian.Uint64(sum[:8]) % p.u, nil
}

// next is the slot after s (wrapping), for the walk.
func (p *hashPool) next(s uint64, sb *big.Int) (uint64, *big.Int) {
	if p.ubig != nil {
		sb = new(big.Int).Add(sb, big.NewInt(1))
		if sb.Cmp(p.ubig) >= 0 {
			sb.SetInt64(0)
		}
		return 0, sb
	}
	s++
	if s >= p.u {
		s = 0
	}
	return s, nil
}

// addr is the address of slot s: the pool's address plus 1 + s. The offset is below 2^hostBits
// and the pool's address is masked, so adding is setting the host bits.
func (p *hashPool) addr(s uint64, sb *big.Int) netip.Addr {
	b := p.base
	if sb != nil {
		off := new(big.Int).Add(sb, big.NewInt(1)).FillBytes(make([]byte, 16))
		for i := range b {
			b[i] |= off[i]
		}
		return netip.AddrFrom16(b)
	}
	lo := binary.BigEndian.Uint64(b[8:]) | (s + 1)
	binary.BigEndian.PutUint64(b[8:], lo)
	a := netip.AddrFrom16(b)
	if p.v4 {
		return a.Unmap()
	}
	return a
}

// HashVIP is the VIP the hash assignment gives name in pool from an empty table (its slot_0):
// what every replica answers for a name that collides with none. ok is false when the pool has
// no usable address.
func HashVIP(pool netip.Prefix, name string) (netip.Addr, bool) {
	p, ok := newHashPool(pool.Masked(), CanonicalName(name))
	if !ok {
		return netip.Addr{}, false
	}
	return p.addr(p.slot(0)), true
}

// hashSearchLocked is the hash assignment's search: name's own slots, then the walk from slot_0.
// A name bound away from its slot_0 is a collision (counted; the first one logged); a search
// that finds nothing is not (the pool is full, and a retry after recycling counts once).
func (t *VIPTable) hashSearchLocked(name string, pool netip.Prefix, v6 bool) (netip.Addr, bool) {
	return t.hashProbeLocked(name, pool, v6, true)
}

// hashProbeLocked is the search; count false only looks (Adopt's check).
func (t *VIPTable) hashProbeLocked(name string, pool netip.Prefix, v6, count bool) (netip.Addr, bool) {
	p, ok := newHashPool(pool, name)
	if !ok {
		return netip.Addr{}, false
	}
	s0, sb0 := p.slot(0)
	first := p.addr(s0, sb0)
	holder := t.byAddr[first]
	if holder == nil {
		return first, true
	}
	found := func(a netip.Addr) (netip.Addr, bool) {
		if count {
			t.collisionLocked(name, first, holder, v6)
		}
		return a, true
	}
	for i := uint32(1); i < hashProbes; i++ {
		if a := p.addr(p.slot(i)); t.byAddr[a] == nil {
			return found(a)
		}
	}
	n := uint64(maxProbes)
	if p.ubig == nil && p.u < n {
		n = p.u
	}
	s, sb := s0, sb0
	for j := uint64(0); j < n; j++ {
		if a := p.addr(s, sb); t.byAddr[a] == nil {
			return found(a)
		}
		s, sb = p.next(s, sb)
	}
	return netip.Addr{}, false
}

// collisionLocked counts a name whose slot_0 another name holds, and logs the first: replicas
// may answer that name differently, which an operator sizing the pools should hear about once.
func (t *VIPTable) collisionLocked(name string, slot netip.Addr, holder *vipEntry, v6 bool) {
	if t.obs != nil {
		t.obs.collided(v6)
	}
	if t.collidedOnce {
		return
	}
	t.collidedOnce = true
	state := "live"
	if holder.Freed != 0 {
		state = "quarantined"
	}
	t.log.Warn("dns: VIP hash collision: the name's first slot is taken, so replicas may answer it differently (counted in mcpintercept_dns_vip_collisions_total; logged once; widen the pool to make collisions rarer)",
		"name", name, "slot", slot, "holder", holder.Name, "holder_state", state)
}

// Adopt binds name to vip when this replica never answered name but another replica did: a
// flow to vip arrived here, and the client named name (its TLS SNI). It binds only what a query
// for name would bind here now (name unbound in vip's family, and vip exactly what the hash
// search gives it), so a client cannot pick a VIP for a name, only claim the one every replica
// derives; the binding is charged to c like a query's. ok reports that name now holds vip
// (true too when it already did). Only the hash assignment adopts.
func (t *VIPTable) Adopt(vip netip.Addr, name string, c Claim) (ok bool, err error) {
	if !t.hash {
		return false, nil
	}
	vip, name = vip.Unmap(), CanonicalName(name)
	v6 := vip.Is6()
	pool := t.v4
	if v6 {
		pool = t.v6
	}
	if name == "" || !pool.IsValid() || !pool.Contains(vip) {
		return false, nil
	}
	t.mu.Lock()
	if e := t.byName[name]; e != nil && e.addr(v6).IsValid() {
		t.mu.Unlock()
		return e.addr(v6) == vip, nil
	}
	want, found := t.hashProbeLocked(name, pool, v6, false)
	t.mu.Unlock()
	if !found || want != vip {
		return false, nil
	}
	// Another query may bind in between; then name holds what it was given, and ok says so.
	got, _, err := t.LookupFor(name, v6, c)
	if err != nil {
		return false, err
	}
	return got == vip, nil
}

// ClaimFor is the claim a query from client for name would carry (its quota key, IPv6 per /64,
// and the pattern of patterns that intercepts name); ok is false when no pattern does.
func ClaimFor(patterns *NamePatterns, client netip.Addr, name string) (c Claim, ok bool) {
	p := patterns.Pattern(CanonicalName(name))
	if p == "" {
		return Claim{}, false
	}
	return Claim{Client: clientKey(client), Pattern: p}, true
}
