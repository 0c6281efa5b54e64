package intercept

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"math/big"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// ErrPoolExhausted is a name that got no VIP: every address of the pool is bound or quarantined,
// or the table holds dns.max_names entries.
var ErrPoolExhausted = errors.New("VIP pool exhausted")

// VIPTable binds names to virtual IPs, one per family and name. A VIP is never re-mapped while
// its name is live (answered or dialled within hold); once freed it is quarantined (not given to
// another name) for quarantine, and the same name asking again in that time gets it back. The
// table is journaled to its state directory on every change that matters (a new binding is on
// disk before it is answered) and reloaded on start: a restart never moves a name (the VIP
// reshuffles of istio #44837 and #49809 misrouted live clients).
type VIPTable struct {
	mu         sync.Mutex
	v4, v6     netip.Prefix
	hold       time.Duration
	quarantine time.Duration
	max        int
	now        func() time.Time
	log        *slog.Logger

	byName map[string]*vipEntry
	byAddr map[netip.Addr]*vipEntry

	path    string // the journal; "" keeps the table in memory only
	journal *os.File
	lines   int  // journal lines since the last compaction
	dirty   bool // last-used times changed since the last compaction
}

type vipEntry struct {
	Name  string     `json:"name"`
	V4    netip.Addr `json:"v4,omitzero"`
	V6    netip.Addr `json:"v6,omitzero"`
	Used  int64      `json:"used"`            // unix seconds of the last answer or dial
	Freed int64      `json:"freed,omitempty"` // unix seconds it was freed; 0 while live
	Del   bool       `json:"del,omitempty"`   // a journal line removing the name
}

// VIPOptions configure a VIPTable.
type VIPOptions struct {
	V4, V6     netip.Prefix // either may be invalid (no pool of that family)
	Hold       time.Duration
	Quarantine time.Duration
	MaxNames   int
	StateDir   string // "" keeps the table in memory
	Now        func() time.Time
	Log        *slog.Logger
}

// vipJournal is the journal's file name in the state directory.
const vipJournal = "vips.jsonl"

// OpenVIPTable loads the table from opt.StateDir (creating it 0700) and compacts the journal.
// Bindings whose VIP lies outside the configured pools (the pools changed) are dropped, and
// logged.
func OpenVIPTable(opt VIPOptions) (*VIPTable, error) {
	t := &VIPTable{v4: opt.V4.Masked(), v6: opt.V6.Masked(), hold: opt.Hold, quarantine: opt.Quarantine,
		max: opt.MaxNames, now: opt.Now, log: opt.Log,
		byName: map[string]*vipEntry{}, byAddr: map[netip.Addr]*vipEntry{}}
	if !opt.V4.IsValid() {
		t.v4 = netip.Prefix{}
	}
	if !opt.V6.IsValid() {
		t.v6 = netip.Prefix{}
	}
	if t.now == nil {
		t.now = time.Now
	}
	if t.log == nil {
		t.log = slog.New(slog.DiscardHandler)
	}
	if t.max <= 0 {
		t.max = 65536
	}
	if opt.StateDir == "" {
		return t, nil
	}
	if err := os.MkdirAll(opt.StateDir, 0o700); err != nil {
		return nil, fmt.Errorf("dns state: %w", err)
	}
	t.path = filepath.Join(opt.StateDir, vipJournal)
	if err := t.load(); err != nil {
		return nil, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.compactLocked(); err != nil {
		return nil, err
	}
	return t, nil
}

func (t *VIPTable) load() error {
	f, err := os.Open(t.path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("dns state: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 4096), 1<<20)
	line := 0
	for sc.Scan() {
		line++
		var e vipEntry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil || e.Name == "" {
			// A torn last line (crash mid-write) is expected; anything else is worth a warning.
			t.log.Warn("dns state: skipping an unreadable journal line", "file", t.path, "line", line)
			continue
		}
		if old := t.byName[e.Name]; old != nil {
			t.unbind(old)
		}
		if e.Del {
			continue
		}
		if e.V4.IsValid() && !(t.v4.IsValid() && t.v4.Contains(e.V4)) {
			t.log.Warn("dns state: dropping a VIP outside the v4 pool", "name", e.Name, "vip", e.V4)
			e.V4 = netip.Addr{}
		}
		if e.V6.IsValid() && !(t.v6.IsValid() && t.v6.Contains(e.V6)) {
			t.log.Warn("dns state: dropping a VIP outside the v6 pool", "name", e.Name, "vip", e.V6)
			e.V6 = netip.Addr{}
		}
		if (e.V4.IsValid() && t.byAddr[e.V4] != nil) || (e.V6.IsValid() && t.byAddr[e.V6] != nil) {
			t.log.Warn("dns state: dropping a binding whose VIP another name holds", "name", e.Name)
			continue
		}
		if !e.V4.IsValid() && !e.V6.IsValid() {
			continue
		}
		ec := e
		t.bind(&ec)
	}
	return sc.Err()
}

func (t *VIPTable) bind(e *vipEntry) {
	t.byName[e.Name] = e
	if e.V4.IsValid() {
		t.byAddr[e.V4] = e
	}
	if e.V6.IsValid() {
		t.byAddr[e.V6] = e
	}
}

func (t *VIPTable) unbind(e *vipEntry) {
	delete(t.byName, e.Name)
	if e.V4.IsValid() && t.byAddr[e.V4] == e {
		delete(t.byAddr, e.V4)
	}
	if e.V6.IsValid() && t.byAddr[e.V6] == e {
		delete(t.byAddr, e.V6)
	}
}

// Pools are the configured pools (an invalid prefix for a family without one).
func (t *VIPTable) Pools() (v4, v6 netip.Prefix) { return t.v4, t.v6 }

// InPool reports whether a lies in one of the pools.
func (t *VIPTable) InPool(a netip.Addr) bool {
	a = a.Unmap()
	return (t.v4.IsValid() && t.v4.Contains(a)) || (t.v6.IsValid() && t.v6.Contains(a))
}

// Lookup returns name's VIP of the family (v6 false: IPv4), binding one if the name has none,
// and marks the name used. ok is false when there is no pool of that family. The binding is on
// disk before Lookup returns. new reports a fresh binding.
func (t *VIPTable) Lookup(name string, v6 bool) (vip netip.Addr, fresh bool, err error) {
	name = canonicalName(name)
	pool := t.v4
	if v6 {
		pool = t.v6
	}
	if !pool.IsValid() {
		return netip.Addr{}, false, nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	e := t.byName[name]
	if e == nil {
		if len(t.byName) >= t.max {
			t.sweepLocked(now)
		}
		if len(t.byName) >= t.max {
			return netip.Addr{}, false, fmt.Errorf("%w: %d names bound (dns.max_names)", ErrPoolExhausted, len(t.byName))
		}
		e = &vipEntry{Name: name}
	}
	addr := e.V4
	if v6 {
		addr = e.V6
	}
	if !addr.IsValid() {
		a, err := t.allocLocked(name, pool, now)
		if err != nil {
			return netip.Addr{}, false, err
		}
		addr, fresh = a, true
		if v6 {
			e.V6 = a
		} else {
			e.V4 = a
		}
	}
	revived := e.Freed != 0
	e.Freed, e.Used = 0, now.Unix()
	t.bind(e)
	if fresh || revived {
		if err := t.appendLocked(e); err != nil {
			// Not answered from a binding that a restart could lose.
			if fresh {
				if v6 {
					e.V6 = netip.Addr{}
				} else {
					e.V4 = netip.Addr{}
				}
				delete(t.byAddr, addr)
				if !e.V4.IsValid() && !e.V6.IsValid() {
					delete(t.byName, name)
				}
			}
			return netip.Addr{}, false, err
		}
	} else {
		t.dirty = true
	}
	return addr, fresh, nil
}

// Name is the name behind vip, marking it used (a dial keeps a name live, and a quarantined VIP
// that a client still uses is bound again). ok is false when vip is bound to no name.
func (t *VIPTable) Name(vip netip.Addr) (string, bool) {
	vip = vip.Unmap()
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.byAddr[vip]
	if e == nil {
		return "", false
	}
	revived := e.Freed != 0
	e.Freed, e.Used = 0, t.now().Unix()
	if revived {
		if err := t.appendLocked(e); err != nil {
			t.log.Warn("dns state: journal", "err", err)
		}
	} else {
		t.dirty = true
	}
	return e.Name, true
}

// Len is the number of names bound (live or quarantined).
func (t *VIPTable) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.byName)
}

// Sweep frees names unused for hold and forgets names quarantined for longer than quarantine;
// it compacts the journal when it grew or last-used times changed.
func (t *VIPTable) Sweep() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.sweepLocked(t.now())
	if t.journal != nil && (t.dirty || t.lines > 2*len(t.byName)+64) {
		return t.compactLocked()
	}
	return nil
}

func (t *VIPTable) sweepLocked(now time.Time) {
	for _, e := range t.byName {
		switch {
		case e.Freed == 0 && now.Sub(time.Unix(e.Used, 0)) > t.hold:
			e.Freed = now.Unix()
			t.dirty = true
		case e.Freed != 0 && now.Sub(time.Unix(e.Freed, 0)) > t.quarantine:
			t.unbind(e)
			t.dirty = true
		}
	}
}

// allocLocked picks a free address of pool for name: the search starts at a hash of the name,
// so that a name tends to get the same VIP even from an empty table, and walks the pool. The
// network address (and the IPv4 broadcast address) are never given out. Large pools are probed
// at a bounded number of places.
func (t *VIPTable) allocLocked(name string, pool netip.Prefix, now time.Time) (netip.Addr, error) {
	for attempt := 0; attempt < 2; attempt++ {
		if a, ok := t.searchLocked(name, pool); ok {
			return a, nil
		}
		t.sweepLocked(now) // a quarantine may have ended
	}
	return netip.Addr{}, fmt.Errorf("%w: no free address in %s", ErrPoolExhausted, pool)
}

const maxProbes = 1 << 16

func (t *VIPTable) searchLocked(name string, pool netip.Prefix) (netip.Addr, bool) {
	hostBits := pool.Addr().BitLen() - pool.Bits()
	size := new(big.Int).Lsh(big.NewInt(1), uint(hostBits))
	usable := new(big.Int).Sub(size, big.NewInt(1)) // offsets 1 .. size-1 (or size-2 for IPv4)
	if pool.Addr().Is4() {
		usable.Sub(usable, big.NewInt(1))
	}
	h := fnv.New64a()
	h.Write([]byte(name))
	start := new(big.Int).Mod(new(big.Int).SetUint64(h.Sum64()), usable)
	n := maxProbes
	if usable.IsInt64() && usable.Int64() < int64(n) {
		n = int(usable.Int64())
	}
	base := new(big.Int).SetBytes(pool.Addr().AsSlice())
	off := new(big.Int)
	one := big.NewInt(1)
	for i := 0; i < n; i++ {
		off.Add(start, big.NewInt(int64(i)))
		off.Mod(off, usable)
		off.Add(off, one)
		v := new(big.Int).Add(base, off).FillBytes(make([]byte, pool.Addr().BitLen()/8))
		a, _ := netip.AddrFromSlice(v)
		if t.byAddr[a] == nil {
			return a, true
		}
	}
	return netip.Addr{}, false
}

// appendLocked journals e (fsynced: a binding is answered only once it survives a crash).
func (t *VIPTable) appendLocked(e *vipEntry) error {
	if t.path == "" {
		return nil
	}
	if t.journal == nil {
		f, err := os.OpenFile(t.path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			return fmt.Errorf("dns state: %w", err)
		}
		t.journal = f
	}
	b, _ := json.Marshal(e)
	if _, err := t.journal.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("dns state: %w", err)
	}
	if err := t.journal.Sync(); err != nil {
		return fmt.Errorf("dns state: %w", err)
	}
	t.lines++
	return nil
}

// compactLocked rewrites the journal with one line per name (tmp file, fsync, rename).
func (t *VIPTable) compactLocked() error {
	if t.path == "" {
		return nil
	}
	tmp := t.path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("dns state: %w", err)
	}
	w := bufio.NewWriter(f)
	for _, e := range t.byName {
		b, _ := json.Marshal(e)
		w.Write(append(b, '\n'))
	}
	if err := w.Flush(); err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, t.path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("dns state: compact: %w", err)
	}
	if t.journal != nil {
		t.journal.Close()
		t.journal = nil
	}
	t.lines, t.dirty = 0, false
	return nil
}

// Close compacts the journal (last-used times included) and closes it.
func (t *VIPTable) Close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	err := t.compactLocked()
	if t.journal != nil {
		t.journal.Close()
		t.journal = nil
	}
	return err
}

// canonicalName is a name as the table keys it: lower-case ASCII, no trailing dot.
func canonicalName(s string) string {
	s = strings.TrimSuffix(s, ".")
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}
