package dns

import (
	"mcpintercept/origin"

	"bufio"
	"container/list"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"math/big"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ErrPoolExhausted is a name that got no VIP: every address of the pool is bound or quarantined,
// or the table holds dns.max_names entries.
var ErrPoolExhausted = errors.New("VIP pool exhausted")

// ErrQuota is a name that got no VIP because the client that asked, or the name pattern it
// matched, already holds its share of the pool (dns.client_quota, dns.pattern_quota). The
// error is a *QuotaError.
var ErrQuota = errors.New("VIP quota exceeded")

// QuotaError says whose quota a refused binding was over.
type QuotaError struct {
	Scope   string // "client" or "pattern"
	Client  string
	Pattern string
	Limit   int
}

func (e *QuotaError) Error() string {
	if e.Scope == "client" {
		return fmt.Sprintf("%v: client %s holds %d names (dns.client_quota)", ErrQuota, e.Client, e.Limit)
	}
	return fmt.Sprintf("%v: pattern %s holds %d names (dns.pattern_quota)", ErrQuota, e.Pattern, e.Limit)
}

func (e *QuotaError) Unwrap() error { return ErrQuota }

// Claim says who a new binding is charged to: the client that asked (its address, IPv6 per
// /64) and the dns.names pattern the name matched. An empty field is charged to no quota.
type Claim struct {
	Client  string
	Pattern string
}

// Recycling reasons, for the metric and the log.
const (
	recyclePool         = "pool"
	recycleMaxNames     = "max_names"
	recycleClientQuota  = "client_quota"
	recyclePatternQuota = "pattern_quota"
)

// vipObserver hears what the table does under pressure (Metrics; nil: nobody).
type vipObserver interface {
	recycled(reason string)
	nearFull(v6 bool)
	collided(v6 bool)
}

// VIP assignment strategies (dns.vip_assignment). Sequential starts at a hash of the name and
// walks the pool; Hash probes a sequence of slots that depends only on the name and the pool
// (hash.go), so that replicas that never talk to each other give a name the same VIP.
const (
	AssignSequential = "sequential"
	AssignHash       = "hash"
)

// VIPTable binds names to virtual IPs, one per family and name. A VIP is never re-mapped while
// its name is live (answered, dialled or carrying a flow within hold) nor while a flow accepted
// through it is open; once freed it is quarantined (not given to another name) for quarantine,
// and the same name asking again in that time gets it back. Under pressure (pool full,
// dns.max_names reached, or a client or pattern at its quota) the least recently used binding
// with no open flow and no use for longer than the quarantine is recycled, so that a pool
// filled by one burst of names frees itself after the quarantine rather than after hold.
//
// The table is journaled to its state directory on every change that matters (a new binding,
// or a recycled one's removal, is on disk before it is answered) and reloaded on start: a
// restart never moves a name (the VIP reshuffles of istio #44837 and #49809 misrouted live
// clients).
type VIPTable struct {
	mu           sync.Mutex
	v4, v6       netip.Prefix
	hold         time.Duration
	quarantine   time.Duration
	max          int
	clientQuota  int
	patternQuota int
	cap4, cap6   int // addresses a family can give out: min(usable, max)
	now          func() time.Time
	log          *slog.Logger
	obs          vipObserver
	hash         bool // dns.vip_assignment: hash
	collidedOnce bool // the first collision was logged

	byName map[string]*vipEntry
	byAddr map[netip.Addr]*vipEntry
	// lru orders every binding, most recently used first; byClient and byPattern order those
	// charged to one client or pattern the same way (their length is the quota used), so that
	// the recycling scan for a quota reads only that owner's bindings.
	lru       *list.List
	byClient  map[string]*list.List
	byPattern map[string]*list.List
	n4, n6    int     // addresses bound per family
	full      [2]bool // a family is above the near-full mark (logged once per crossing)
	recycleLg rateLog

	path    string // the journal; "" keeps the table in memory only
	journal *os.File
	lines   int  // journal lines since the last compaction
	dirty   bool // last-used times changed since the last compaction
}

type vipEntry struct {
	Name    string     `json:"name"`
	V4      netip.Addr `json:"v4,omitzero"`
	V6      netip.Addr `json:"v6,omitzero"`
	Used    int64      `json:"used"`              // unix seconds of the last answer, dial or open flow
	Freed   int64      `json:"freed,omitempty"`   // unix seconds it was freed; 0 while live
	Del     bool       `json:"del,omitempty"`     // a journal line removing the name
	Client  string     `json:"client,omitempty"`  // whose quota the binding is charged to
	Pattern string     `json:"pattern,omitempty"` // the dns.names pattern charged

	elem  *list.Element  // in VIPTable.lru
	elemC *list.Element  // in VIPTable.byClient[Client]
	elemP *list.Element  // in VIPTable.byPattern[Pattern]
	flows []syscall.Conn // connections accepted through its VIPs, pruned when closed
}

func (e *vipEntry) addr(v6 bool) netip.Addr {
	if v6 {
		return e.V6
	}
	return e.V4
}

// VIPOptions configure a VIPTable.
type VIPOptions struct {
	V4, V6     netip.Prefix // either may be invalid (no pool of that family)
	Hold       time.Duration
	Quarantine time.Duration
	MaxNames   int
	// ClientQuota and PatternQuota bound the names one client, and one pattern, may hold
	// bound at once; 0 derives them from the smallest pool (DefaultQuotas).
	ClientQuota  int
	PatternQuota int
	// Patterns is how many dns.names patterns there are (a pattern quota below the pool only
	// makes sense with more than one).
	Patterns int
	StateDir string // "" keeps the table in memory
	// Assignment is AssignSequential ("" too) or AssignHash.
	Assignment string
	Now        func() time.Time
	Log        *slog.Logger
}

// NearFull is the share of a pool above which the table logs and counts a warning (once per
// crossing; it re-arms below nearFullRearm).
const (
	NearFull      = 0.9
	nearFullRearm = 0.8
)

// DefaultQuotas are the quotas for a table that can bind capacity names (the smallest pool, or
// dns.max_names): a client an eighth (at least 4), so that one client's burst of wildcard names
// leaves the pool to the others; a pattern half when there are several patterns, so that one
// wildcard cannot take the exact names' room, and the whole pool when it is the only one.
func DefaultQuotas(capacity, patterns int) (client, pattern int) {
	client = min(capacity, max(4, capacity/8))
	pattern = capacity
	if patterns > 1 {
		pattern = max(1, capacity/2)
	}
	return max(1, client), max(1, pattern)
}

// poolSize is how many addresses pool can give out (network and IPv4 broadcast excluded),
// capped at limit.
func poolSize(pool netip.Prefix, limit int) int {
	if !pool.IsValid() {
		return 0
	}
	hostBits := pool.Addr().BitLen() - pool.Bits()
	if hostBits >= 31 {
		return limit
	}
	n := 1<<hostBits - 1
	if pool.Addr().Is4() {
		n--
	}
	return max(0, min(n, limit))
}

// vipJournal is the journal's file name in the state directory.
const vipJournal = "vips.jsonl"

// OpenVIPTable loads the table from opt.StateDir (creating it 0700) and compacts the journal.
// Bindings whose VIP lies outside the configured pools (the pools changed) are dropped, and
// logged.
func OpenVIPTable(opt VIPOptions) (*VIPTable, error) {
	switch opt.Assignment {
	case "", AssignSequential, AssignHash:
	default:
		return nil, fmt.Errorf("dns: unknown VIP assignment %q (valid: %s, %s)", opt.Assignment, AssignSequential, AssignHash)
	}
	t := &VIPTable{v4: opt.V4.Masked(), v6: opt.V6.Masked(), hold: opt.Hold, quarantine: opt.Quarantine,
		max: opt.MaxNames, now: opt.Now, log: opt.Log, hash: opt.Assignment == AssignHash,
		byName: map[string]*vipEntry{}, byAddr: map[netip.Addr]*vipEntry{}, lru: list.New(),
		byClient: map[string]*list.List{}, byPattern: map[string]*list.List{}}
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
	t.cap4, t.cap6 = poolSize(t.v4, t.max), poolSize(t.v6, t.max)
	t.setQuotas(opt)
	t.recycleLg = rateLog{log: t.log, every: time.Second, now: t.now}
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
	t.orderLocked()
	if err := t.compactLocked(); err != nil {
		return nil, err
	}
	return t, nil
}

// setQuotas takes the configured quotas, or derives them from the smallest pool.
func (t *VIPTable) setQuotas(opt VIPOptions) {
	capacity := t.max
	for _, c := range []int{t.cap4, t.cap6} {
		if c > 0 {
			capacity = min(capacity, c)
		}
	}
	t.clientQuota, t.patternQuota = DefaultQuotas(capacity, opt.Patterns)
	if opt.ClientQuota > 0 {
		t.clientQuota = opt.ClientQuota
	}
	if opt.PatternQuota > 0 {
		t.patternQuota = opt.PatternQuota
	}
}

// Quotas are the quotas in force (derived or configured).
func (t *VIPTable) Quotas() (client, pattern int) { return t.clientQuota, t.patternQuota }

// orderLocked rebuilds the LRU list from the last-used times (after a load).
func (t *VIPTable) orderLocked() {
	es := make([]*vipEntry, 0, len(t.byName))
	for _, e := range t.byName {
		es = append(es, e)
	}
	slices.SortFunc(es, func(a, b *vipEntry) int {
		if a.Used != b.Used {
			return int(a.Used - b.Used)
		}
		return strings.Compare(a.Name, b.Name)
	})
	for _, e := range es {
		t.pushLocked(e)
	}
}

// pushLocked puts e, just entered, at the front of its LRU lists.
func (t *VIPTable) pushLocked(e *vipEntry) {
	e.elem = t.lru.PushFront(e)
	if e.Client != "" {
		e.elemC = ownerList(t.byClient, e.Client).PushFront(e)
	}
	if e.Pattern != "" {
		e.elemP = ownerList(t.byPattern, e.Pattern).PushFront(e)
	}
}

func ownerList(m map[string]*list.List, k string) *list.List {
	l := m[k]
	if l == nil {
		l = list.New()
		m[k] = l
	}
	return l
}

// unlistLocked takes e out of its LRU lists, dropping an owner's list once empty.
func (t *VIPTable) unlistLocked(e *vipEntry) {
	if e.elem != nil {
		t.lru.Remove(e.elem)
		e.elem = nil
	}
	for _, o := range []struct {
		m  map[string]*list.List
		k  string
		el **list.Element
	}{{t.byClient, e.Client, &e.elemC}, {t.byPattern, e.Pattern, &e.elemP}} {
		if *o.el == nil {
			continue
		}
		l := o.m[o.k]
		l.Remove(*o.el)
		*o.el = nil
		if l.Len() == 0 {
			delete(o.m, o.k)
		}
	}
}

// held is how many bindings an owner holds (the quota used).
func held(m map[string]*list.List, k string) int {
	if l := m[k]; l != nil {
		return l.Len()
	}
	return 0
}

// SetObserver makes o hear recycling and near-full crossings (before the table is shared).
func (t *VIPTable) SetObserver(o vipObserver) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.obs = o
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
			t.removeLocked(old)
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
		t.addLocked(&ec)
	}
	return sc.Err()
}

// addLocked enters e (not yet in the table) with its addresses. The caller places it in the
// LRU lists (pushLocked), which charges its quotas.
func (t *VIPTable) addLocked(e *vipEntry) {
	t.byName[e.Name] = e
	for _, v6 := range []bool{false, true} {
		if a := e.addr(v6); a.IsValid() {
			t.setAddrLocked(e, v6, a)
		}
	}
}

func (t *VIPTable) setAddrLocked(e *vipEntry, v6 bool, a netip.Addr) {
	if v6 {
		e.V6 = a
		t.n6++
	} else {
		e.V4 = a
		t.n4++
	}
	t.byAddr[a] = e
}

func (t *VIPTable) clearAddrLocked(e *vipEntry, v6 bool) {
	a := e.addr(v6)
	if !a.IsValid() {
		return
	}
	if t.byAddr[a] == e {
		delete(t.byAddr, a)
	}
	if v6 {
		e.V6 = netip.Addr{}
		t.n6--
	} else {
		e.V4 = netip.Addr{}
		t.n4--
	}
}

// removeLocked takes e out of the table (its addresses free) and refunds its quotas.
func (t *VIPTable) removeLocked(e *vipEntry) {
	if t.byName[e.Name] != e {
		return
	}
	delete(t.byName, e.Name)
	for _, v6 := range []bool{false, true} {
		a := e.addr(v6)
		t.clearAddrLocked(e, v6)
		if v6 {
			e.V6 = a
		} else {
			e.V4 = a
		}
	}
	t.unlistLocked(e)
	e.flows = nil
}

// touchLocked marks e used now (most recently used).
func (t *VIPTable) touchLocked(e *vipEntry, now time.Time) {
	e.Used = now.Unix()
	if e.elem != nil {
		t.lru.MoveToFront(e.elem)
	}
	if e.elemC != nil {
		t.byClient[e.Client].MoveToFront(e.elemC)
	}
	if e.elemP != nil {
		t.byPattern[e.Pattern].MoveToFront(e.elemP)
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
// and marks the name used; a new name is charged to no quota. The VIP is invalid (and err nil)
// when there is no pool of that family. The binding is on disk before Lookup returns. fresh
// reports a new binding.
func (t *VIPTable) Lookup(name string, v6 bool) (vip netip.Addr, fresh bool, err error) {
	return t.LookupFor(name, v6, Claim{})
}

// LookupFor is Lookup for a query: a name that is not bound yet is charged to c's client and
// pattern, and refused with a *QuotaError when either is at its quota and has nothing to
// recycle.
func (t *VIPTable) LookupFor(name string, v6 bool, c Claim) (vip netip.Addr, fresh bool, err error) {
	name = CanonicalName(name)
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
	isNew := e == nil
	if isNew {
		if err := t.admitLocked(c, now); err != nil {
			return netip.Addr{}, false, err
		}
		e = &vipEntry{Name: name, Client: c.Client, Pattern: c.Pattern}
	} else {
		t.touchLocked(e, now) // not a recycling candidate while it gets its other family
	}
	addr := e.addr(v6)
	if !addr.IsValid() {
		a, err := t.allocLocked(name, pool, v6, now)
		if err != nil {
			return netip.Addr{}, false, err
		}
		addr, fresh = a, true
		if !isNew {
			t.setAddrLocked(e, v6, a)
		} else if v6 {
			e.V6 = a
		} else {
			e.V4 = a
		}
	}
	if isNew {
		t.addLocked(e)
		t.pushLocked(e)
	}
	revived := e.Freed != 0
	e.Freed = 0
	t.touchLocked(e, now)
	if fresh || revived {
		if err := t.appendLocked(e); err != nil {
			// Not answered from a binding that a restart could lose.
			if isNew {
				t.removeLocked(e)
			} else if fresh {
				t.clearAddrLocked(e, v6)
			}
			return netip.Addr{}, false, err
		}
	} else {
		t.dirty = true
	}
	t.levelLocked()
	return addr, fresh, nil
}

// admitLocked decides whether a new name may be entered for c: its client and pattern under
// quota (or one of their own idle bindings recycled), and the table under dns.max_names.
func (t *VIPTable) admitLocked(c Claim, now time.Time) error {
	if c.Client != "" && held(t.byClient, c.Client) >= t.clientQuota {
		if ok, err := t.recycleLocked(now, recycleClientQuota, t.byClient[c.Client], nil); err != nil || !ok {
			return errors.Join(&QuotaError{Scope: "client", Client: c.Client, Pattern: c.Pattern, Limit: t.clientQuota}, err)
		}
	}
	if c.Pattern != "" && held(t.byPattern, c.Pattern) >= t.patternQuota {
		if ok, err := t.recycleLocked(now, recyclePatternQuota, t.byPattern[c.Pattern], nil); err != nil || !ok {
			return errors.Join(&QuotaError{Scope: "pattern", Client: c.Client, Pattern: c.Pattern, Limit: t.patternQuota}, err)
		}
	}
	if len(t.byName) >= t.max {
		t.sweepLocked(now)
	}
	if len(t.byName) >= t.max {
		if ok, err := t.recycleLocked(now, recycleMaxNames, t.lru, nil); err != nil || !ok {
			return errors.Join(fmt.Errorf("%w: %d names bound (dns.max_names)", ErrPoolExhausted, len(t.byName)), err)
		}
	}
	return nil
}

// recycleLocked removes the least recently used binding of l (an LRU list of the table) that
// keep accepts (nil: any) and that is idle: no open flow through its VIPs and no answer or dial
// for longer than the quarantine (so no client can still hold its answer or be starting a flow
// to it). Its removal is journaled first (a restart must not bring it back beside the new
// binding). ok is false when no binding qualifies.
func (t *VIPTable) recycleLocked(now time.Time, reason string, l *list.List, keep func(*vipEntry) bool) (ok bool, err error) {
	for el := l.Back(); el != nil; el = el.Prev() {
		e := el.Value.(*vipEntry)
		if now.Sub(time.Unix(e.Used, 0)) <= t.quarantine {
			return false, nil // the rest were used more recently
		}
		if (keep != nil && !keep(e)) || t.liveLocked(e) {
			continue
		}
		if err := t.appendLocked(&vipEntry{Name: e.Name, Del: true}); err != nil {
			return false, err
		}
		t.removeLocked(e)
		t.dirty = true
		t.recycleLg.warn("dns: recycled an idle VIP", "reason", reason, "name", e.Name,
			"v4", e.V4, "v6", e.V6, "idle", now.Sub(time.Unix(e.Used, 0)).Round(time.Second).String())
		if t.obs != nil {
			t.obs.recycled(reason)
		}
		return true, nil
	}
	return false, nil
}

// Track records c, a connection accepted through vip, as a flow that keeps vip's name live
// (never freed, never recycled) until c is closed. The flow's owner closes c; the table only
// looks at it.
func (t *VIPTable) Track(vip netip.Addr, c syscall.Conn) {
	vip = vip.Unmap()
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.byAddr[vip]
	if e == nil {
		return
	}
	t.liveLocked(e) // prune first: the list stays as long as the open flows
	e.flows = append(e.flows, c)
}

// liveLocked drops e's closed connections and reports whether any is still open.
func (t *VIPTable) liveLocked(e *vipEntry) bool {
	e.flows = slices.DeleteFunc(e.flows, connClosed)
	if len(e.flows) == 0 {
		e.flows = nil
	}
	return len(e.flows) > 0
}

// connClosed reports whether c was closed: the runtime refuses Control on a closed descriptor.
func connClosed(c syscall.Conn) bool {
	rc, err := c.SyscallConn()
	if err != nil {
		return true
	}
	return rc.Control(func(uintptr) {}) != nil
}

// PoolUse is how many addresses of a family's pool are bound, out of how many it can give out
// (the usable addresses, at most dns.max_names); 0, 0 without a pool of that family.
func (t *VIPTable) PoolUse(v6 bool) (bound, capacity int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if v6 {
		return t.n6, t.cap6
	}
	return t.n4, t.cap4
}

// levelLocked logs and counts a pool crossing NearFull (once per crossing: it re-arms when the
// pool falls below nearFullRearm).
func (t *VIPTable) levelLocked() {
	for i, f := range []struct {
		n, capacity int
		pool        netip.Prefix
	}{{t.n4, t.cap4, t.v4}, {t.n6, t.cap6, t.v6}} {
		if f.capacity == 0 {
			continue
		}
		share := float64(f.n) / float64(f.capacity)
		switch {
		case !t.full[i] && share >= NearFull:
			t.full[i] = true
			t.log.Warn("dns: VIP pool near full; idle VIPs are recycled after dns.quarantine, widen the pool or lower the quotas",
				"pool", f.pool.String(), "bound", f.n, "capacity", f.capacity,
				"client_quota", t.clientQuota, "pattern_quota", t.patternQuota)
			if t.obs != nil {
				t.obs.nearFull(i == 1)
			}
		case t.full[i] && share < nearFullRearm:
			t.full[i] = false
			t.log.Info("dns: VIP pool below the near-full mark again", "pool", f.pool.String(), "bound", f.n, "capacity", f.capacity)
		}
	}
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
	e.Freed = 0
	t.touchLocked(e, t.now())
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
// a name with an open flow is used now (its quarantine starts when its last flow is seen
// closed). It compacts the journal when it grew or last-used times changed.
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
		if e.flows != nil && t.liveLocked(e) {
			e.Freed = 0
			t.touchLocked(e, now)
			t.dirty = true
			continue
		}
		switch {
		case e.Freed == 0 && now.Sub(time.Unix(e.Used, 0)) > t.hold:
			e.Freed = now.Unix()
			t.dirty = true
		case e.Freed != 0 && now.Sub(time.Unix(e.Freed, 0)) > t.quarantine:
			t.removeLocked(e)
			t.dirty = true
		}
	}
	t.levelLocked()
}

// allocLocked picks a free address of pool for name: the search starts at a hash of the name,
// so that a name tends to get the same VIP even from an empty table, and walks the pool. The
// network address (and the IPv4 broadcast address) are never given out. Large pools are probed
// at a bounded number of places.
func (t *VIPTable) allocLocked(name string, pool netip.Prefix, v6 bool, now time.Time) (netip.Addr, error) {
	for attempt := 0; attempt < 2; attempt++ {
		if a, ok := t.findLocked(name, pool, v6); ok {
			return a, nil
		}
		t.sweepLocked(now) // a quarantine may have ended
	}
	ofFamily := func(e *vipEntry) bool { return e.addr(v6).IsValid() }
	ok, err := t.recycleLocked(now, recyclePool, t.lru, ofFamily)
	if err != nil {
		return netip.Addr{}, err
	}
	if ok {
		if a, ok := t.findLocked(name, pool, v6); ok {
			return a, nil
		}
	}
	return netip.Addr{}, fmt.Errorf("%w: no free address in %s", ErrPoolExhausted, pool)
}

const maxProbes = 1 << 16

// findLocked is the configured strategy's search for a free address of pool.
func (t *VIPTable) findLocked(name string, pool netip.Prefix, v6 bool) (netip.Addr, bool) {
	if t.hash {
		return t.hashSearchLocked(name, pool, v6)
	}
	return t.searchLocked(name, pool)
}

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

// CanonicalName is a name as the table keys it: lower-case ASCII, no trailing dot.
func CanonicalName(s string) string {
	s = strings.TrimSuffix(s, ".")
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// rateLog writes at most one line per every and says how many it suppressed: a flood of
// over-quota queries must not become a flood of log lines.
type rateLog struct {
	log   *slog.Logger
	every time.Duration
	now   func() time.Time

	mu   sync.Mutex
	last time.Time
	skip int
}

func (r *rateLog) warn(msg string, args ...any) {
	if r.log == nil {
		return
	}
	now := time.Now
	if r.now != nil {
		now = r.now
	}
	r.mu.Lock()
	t := now()
	if !r.last.IsZero() && t.Sub(r.last) < r.every {
		r.skip++
		r.mu.Unlock()
		return
	}
	skipped := r.skip
	r.last, r.skip = t, 0
	r.mu.Unlock()
	r.log.Warn(msg, append(args, "suppressed", skipped)...)
}

// ReasonUnboundVIP is the flow record's reason for a flow or dial to a VIP no name holds.
const ReasonUnboundVIP = "unbound_vip"

// UnboundVIP refuses a flow or dial to a VIP of the pool that no name holds (never answered, or
// forgotten after its quarantine).
func UnboundVIP(vip netip.Addr) error {
	return origin.Refuse(ReasonUnboundVIP, fmt.Errorf("VIP %s is bound to no name (never answered, or freed and forgotten)", vip))
}
