package integrity

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// maxName bounds a stored definition name and server key: a longer one is not remembered (as
// past MaxTools).
const maxName = 1024

// dropEvery is how often one server's EventDropped is recorded at most.
const dropEvery = int64(time.Minute)

// maxPairs bounds the divergence pairs a definition remembers having reported.
const maxPairs = 8

// Pin sources.
const (
	srcNone uint8 = iota
	srcFile
	srcLearned
	srcApproved
)

var srcNames = [...]string{"", "file", "learned", "approved"}

// Definition states (DefState.State and the gauge's label).
const (
	stPinned uint8 = iota
	stChanged
	stPending
	stQuarantined
	stRemoved
	nStates
	stNone = nStates // a definition not yet counted
)

var stateNames = [nStates]string{"pinned", "changed", "pending", "quarantined", "removed"}

// Guard is the appliance-wide memory of definitions; safe for concurrent use.
type Guard struct {
	o        Options
	now      func() time.Time
	window   int64
	max      int
	patterns []Pattern
	pfs      []*prefilter
	log      *slog.Logger
	m        *metrics

	mu       sync.Mutex
	servers  map[string]*serverState
	ndefs    int
	views    viewSet
	counts   [nStates]int
	fileOver map[*defState]digest // the pin file's hash an approval overrides
	dropLog  map[string]int64     // last EventDropped of servers not remembered
	seq      uint64
	gen      uint64 // bumped on every change to what state.json holds
	written  uint64 // gen last written

	persist *persister // nil without Dir
}

type serverState struct {
	key      string
	spki     string
	defs     map[defKey]*defState
	nkind    [3]int // definitions per kind (kindIndex)
	lastDrop int64
}

type defKey struct {
	kind Kind
	name string
}

// defState is one remembered definition: its pin, what was seen last and the views of it.
type defState struct {
	srv       *serverState
	key       defKey
	pinHash   digest
	pinFields []fieldSum // immutable, often shared with seen.fields
	src       uint8
	state     uint8
	diverged  bool // quarantined by a divergence, until approved
	removed   bool // pinned but missing from the last whole list
	seen      *analysis
	seenAt    int64
	mark      uint64 // Guard.seq of the last Observe that listed it
	// Events already recorded, by hash prefix: once per hash, not on every list.
	evChanged, evAdded, evFindings uint64
	pairs                          []uint64 // divergence pairs recorded
	views                          *view
	hashes                         []hashCount
}

// analysis is what one entry's bytes say: immutable once built, shared by the definition, its
// views and the verdicts.
type analysis struct {
	raw      digest // SHA-256 of the entry's bytes (the cache key)
	rawKnown bool   // false when restored from state.json
	hash     digest
	hashStr  string
	fields   []fieldSum
	findings []string
	invalid  bool // Canonical refused it: hash is zero
}

func analyze(d Def, raw digest, pats []Pattern, pfs []*prefilter) *analysis {
	a := &analysis{raw: raw, rawKnown: true}
	if canon, fv, err := canonical(d.Kind, d.Raw); err != nil {
		a.invalid = true
	} else {
		a.hash = hashOf(canon)
		a.hashStr = a.hash.String()
		a.fields = sumFields(fv)
	}
	a.findings = scan(d.Raw, pats, pfs)
	return a
}

func kindIndex(k Kind) int {
	switch k {
	case KindTool:
		return 0
	case KindPrompt:
		return 1
	case KindTemplate:
		return 2
	}
	return -1
}

// Open builds a Guard: it reads the pin file and the state directory (a malformed one is an
// error naming the file and what is wrong).
func Open(o Options) (*Guard, error) {
	g := &Guard{
		o:        o,
		now:      o.Now,
		window:   int64(o.DivergenceWindow),
		max:      o.MaxTools,
		patterns: o.Patterns,
		log:      o.Log,
		servers:  map[string]*serverState{},
		fileOver: map[*defState]digest{},
		dropLog:  map[string]int64{},
	}
	if g.now == nil {
		g.now = time.Now
	}
	if g.window <= 0 {
		g.window = int64(DefaultDivergenceWindow)
	}
	if g.max <= 0 {
		g.max = DefaultMaxTools
	}
	if g.patterns == nil {
		g.patterns = DefaultPatterns
	}
	for i, p := range g.patterns {
		if p.Re == nil || p.Name == "" {
			return nil, fmt.Errorf("integrity: pattern %d (%q) has no name or no regexp", i, p.Name)
		}
	}
	g.pfs = prefiltersOf(g.patterns)
	if g.log == nil {
		g.log = slog.New(slog.DiscardHandler)
	}
	g.views = viewSet{m: map[viewKey]*view{}, max: 4 * g.max}
	if o.Dir != "" {
		p, st, err := openDir(o.Dir)
		if err != nil {
			return nil, err
		}
		if st != nil {
			g.load(st)
		}
		g.persist = p
	}
	if o.PinFile != "" {
		ps, err := readPinFile(o.PinFile)
		if err != nil {
			return nil, err
		}
		g.applyPins(ps)
	}
	g.written = g.gen
	m, err := newMetrics(g, o.Registerer)
	if err != nil {
		return nil, err
	}
	g.m = m
	if g.persist != nil {
		g.persist.start(g)
	}
	return g, nil
}

// Route is the guard as one route uses it (its mode and divergence setting). A nil Guard or
// ModeOff gives nil.
func (g *Guard) Route(r RouteOptions) *RouteGuard {
	if g == nil || r.Mode == ModeOff || r.Mode == "" {
		return nil
	}
	return &RouteGuard{g: g, r: r}
}

// RouteGuard is a Guard under one route's settings.
type RouteGuard struct {
	g *Guard
	r RouteOptions
}

// Reasons of a quarantine, one string per kind so that verdicts do not allocate them.
var (
	reasonChanged   = perKind("%s definition changed since it was pinned")
	reasonNotPinned = perKind("%s not pinned (tool_pins: enforce): approve it")
	reasonInvalid   = perKind("%s definition cannot be pinned: not one strict JSON object within 4 MiB and 64 levels")
)

func perKind(format string) map[Kind]string {
	m := map[Kind]string{}
	for k := range kindFields {
		m[k] = fmt.Sprintf(format, k)
	}
	return m
}

func reasonOf(m map[Kind]string, k Kind) string {
	if s, ok := m[k]; ok {
		return s
	}
	return m[KindTool]
}

func reasonDiverged(k defKey) string {
	return fmt.Sprintf("definitions of %s %s diverged between clients", k.kind, k.name)
}

// observation is what one Observe collects under the lock for after it.
type observation struct {
	events []Event
	warns  []Event
	dirty  bool
}

func (ob *observation) add(e Event) {
	ob.events = append(ob.events, e)
	if e.Quarantined {
		ob.warns = append(ob.warns, e)
	}
}

// Observe judges the definitions of one list result the viewer (a client address and session)
// was sent by srv: one Verdict per def, in order, and the events to record. whole says the
// result is a complete first page (no cursor in the request, no nextCursor in the result), so
// that a pinned definition it lacks is reported removed.
//
// The Findings of a Verdict are shared: callers must not modify them.
func (rg *RouteGuard) Observe(srv Server, viewer string, defs []Def, whole bool) ([]Verdict, []Event) {
	out := make([]Verdict, len(defs))
	if rg == nil || len(defs) == 0 {
		return out, nil // an empty list names no kind: nothing can be reported removed
	}
	g := rg.g
	// Outside the lock: hash each entry's bytes; look up what is known of them; analyse what is
	// not (canonical form, field hashes, scan).
	sums := make([]digest, len(defs))
	for i := range defs {
		sums[i] = sha256.Sum256(defs[i].Raw)
	}
	as := make([]*analysis, len(defs))
	g.mu.Lock()
	if s := g.servers[srv.Key]; s != nil {
		for i := range defs {
			if ds := s.defs[defKey{defs[i].Kind, defs[i].Name}]; ds != nil {
				as[i] = g.cached(ds, viewer, sums[i])
			}
		}
	}
	g.mu.Unlock()
	for i := range defs {
		if as[i] == nil {
			as[i] = analyze(defs[i], sums[i], g.patterns, g.pfs)
		}
	}

	var ob observation
	g.mu.Lock()
	now := g.now().UnixNano()
	g.views.expire(now - g.window)
	g.seq++
	seq := g.seq
	s := g.servers[srv.Key]
	if s != nil {
		g.checkKey(s, srv, &ob)
	}
	var kinds [3]int // of each kind, how many remembered definitions this list holds
	for i := range defs {
		out[i] = rg.judge(&s, srv, viewer, defs[i], as[i], now, seq, &kinds, &ob)
	}
	if whole && s != nil {
		g.removals(s, seq, kinds, &ob)
	}
	if ob.dirty {
		g.gen++
	}
	g.mu.Unlock()

	g.after(&ob)
	return out, ob.events
}

// cached is the analysis of the bytes whose hash is raw, when d was seen with them (by anyone
// last, by this viewer, or as one of the hashes viewers hold now).
func (g *Guard) cached(d *defState, viewer string, raw digest) *analysis {
	if a := d.seen; a != nil && a.rawKnown && a.raw == raw {
		return a
	}
	if v := g.views.get(d, viewer); v != nil && v.a.rawKnown && v.a.raw == raw {
		return v.a
	}
	for _, hc := range d.hashes {
		if hc.last != nil && hc.last.a.rawKnown && hc.last.a.raw == raw {
			return hc.last.a
		}
	}
	return nil
}

// checkKey records srv's key, an event when it differs from the one recorded.
func (g *Guard) checkKey(s *serverState, srv Server, ob *observation) {
	if srv.SPKI == "" || srv.SPKI == s.spki {
		return
	}
	if s.spki != "" {
		ob.add(Event{Kind: EventKeyChanged, Server: s.key, OldHash: s.spki, NewHash: srv.SPKI,
			Detail: fmt.Sprintf("server %s presented another key: %s → %s", s.key, short(s.spki), short(srv.SPKI))})
	}
	s.spki = srv.SPKI
	ob.dirty = true
}

func short(h string) string {
	if d, err := parseDigest(h); err == nil {
		return d.short()
	}
	return truncate(h, 24)
}

// judge is one definition's verdict, under the lock. *sp is created when the first definition
// of the server is remembered.
func (rg *RouteGuard) judge(sp **serverState, srv Server, viewer string, d Def, a *analysis, now int64, seq uint64, kinds *[3]int, ob *observation) Verdict {
	g := rg.g
	key := defKey{d.Kind, d.Name}
	var ds *defState
	if *sp != nil {
		ds = (*sp).defs[key]
	}
	if ds == nil {
		why := ""
		switch {
		case kindIndex(d.Kind) < 0:
			why = "unknown kind"
		case len(d.Name) > maxName || len(srv.Key) > maxName:
			why = fmt.Sprintf("its name or server key is longer than %d bytes", maxName)
		case g.ndefs >= g.max:
			why = fmt.Sprintf("the bound of %d definitions (tool_integrity.max_tools) is reached", g.max)
		}
		if why != "" {
			g.dropped(*sp, srv, key, why, now, ob)
			return rg.verdictUnremembered(key.kind, a)
		}
		if *sp == nil {
			*sp = g.server(srv)
			g.checkKey(*sp, srv, ob)
		}
		ds = &defState{srv: *sp, key: key, state: stNone}
		(*sp).defs[key] = ds
		(*sp).nkind[kindIndex(d.Kind)]++
		g.ndefs++
	}
	if ds.mark != seq {
		ds.mark = seq
		kinds[kindIndex(d.Kind)]++
	}
	prev := ds.seen
	ds.seen, ds.seenAt = a, now
	if prev == nil || prev.hash != a.hash || prev.invalid != a.invalid {
		ob.dirty = true
	}
	if ds.removed {
		ds.removed = false
		ob.dirty = true
	}
	if a.invalid {
		if rp := a.raw.prefix(); ds.evChanged != rp {
			ds.evChanged = rp
			e := Event{Kind: EventAdded, Server: srv.Key, DefKind: key.kind, Name: key.name, Quarantined: true,
				Detail: fmt.Sprintf("%s %s cannot be pinned: not one strict JSON object within 4 MiB and 64 levels", key.kind, key.name)}
			if ds.src != srcNone {
				e.Kind, e.OldHash = EventChanged, ds.pinHash.String()
				e.Detail = fmt.Sprintf("%s %s changed since it was pinned: it is no longer one strict JSON object within 4 MiB and 64 levels", key.kind, key.name)
			}
			ob.add(e)
		}
		// this viewer's earlier sight no longer counts: a call is judged by this entry
		if v := g.views.get(ds, viewer); v != nil {
			g.views.drop(v)
		}
		g.restate(ds)
		return rg.verdict(ds, a)
	}
	hp := a.hash.prefix()
	if ds.src == srcNone {
		if rg.r.Mode == ModeLearn {
			ds.pinHash, ds.pinFields, ds.src = a.hash, a.fields, srcLearned
			ob.dirty = true
			ob.add(Event{Kind: EventPinned, Server: srv.Key, DefKind: key.kind, Name: key.name, NewHash: a.hashStr,
				Detail: fmt.Sprintf("%s %s pinned on first sight (%s)", key.kind, key.name, a.hash.short())})
		} else if ds.evAdded != hp {
			ds.evAdded = hp
			ob.add(Event{Kind: EventAdded, Server: srv.Key, DefKind: key.kind, Name: key.name, NewHash: a.hashStr,
				Quarantined: true,
				Detail:      fmt.Sprintf("%s %s is not pinned (tool_pins: enforce): quarantined until approved (%s)", key.kind, key.name, a.hash.short())})
		}
	}
	if len(a.findings) > 0 && ds.evFindings != hp {
		ds.evFindings = hp
		ob.add(Event{Kind: EventFindings, Server: srv.Key, DefKind: key.kind, Name: key.name, NewHash: a.hashStr,
			Detail: fmt.Sprintf("%s %s has hidden content or patterns: %s", key.kind, key.name, strings.Join(a.findings, ", "))})
	}
	if ds.src != srcNone && a.hash != ds.pinHash && ds.evChanged != hp {
		ds.evChanged = hp
		fields := diffFields(ds.pinFields, a.fields)
		ob.add(Event{Kind: EventChanged, Server: srv.Key, DefKind: key.kind, Name: key.name,
			OldHash: ds.pinHash.String(), NewHash: a.hashStr, Fields: fields, Quarantined: true, Viewers: []string{viewer},
			Detail: fmt.Sprintf("%s %s changed since it was pinned: %s", key.kind, key.name, fieldDetail(ds.pinFields, a.fields, fields))})
	}
	g.views.see(ds, viewer, a, now)
	// A divergence is two definitions served side by side: another viewer was shown another
	// hash after this one was first shown (the server went back and forth). A server that
	// changes a definition for everyone (a rug pull: the old hash shown, then only the new one)
	// is a change, not a divergence, however soon after the old sight.
	//
	// The pinned hash counts as shown before anything the window holds (the server served it
	// when it was pinned, reviewed or learned), whether or not a sight of it is still in the
	// window: another hash shown to one viewer and then the pinned one to another is the server
	// going back and forth, i.e. targeting the first viewer. Without this, a server that shows
	// a targeted client its variant first and everyone else the pin is only ever a change.
	//
	// Two hashes that are both not the pin, shown to two viewers within the window, are also
	// served side by side, whatever the order: a server that changed the definition for everyone
	// would have moved on from the first to the second, not shown each to its own client. Without
	// this, the pin, a variant to one client and another variant to the next are two changes and
	// the record naming both clients is written only if one of them is shown again.
	o := ds.other(a.hash)
	if o != nil && o.at <= ds.firstShown(a.hash) && (ds.src == srcNone || a.hash != ds.pinHash) {
		o = nil
		if ds.src != srcNone {
			o = ds.otherThan(a.hash, ds.pinHash)
		}
	}
	if o != nil {
		quarantine := rg.r.QuarantineDivergence && !ds.diverged
		pk := pairKey(o.a.hash, a.hash)
		if !slices.Contains(ds.pairs, pk) {
			if len(ds.pairs) >= maxPairs {
				ds.pairs = slices.Delete(ds.pairs, 0, 1)
			}
			ds.pairs = append(ds.pairs, pk)
			fields := diffFields(o.a.fields, a.fields)
			ob.add(Event{Kind: EventDivergence, Server: srv.Key, DefKind: key.kind, Name: key.name,
				OldHash: o.a.hashStr, NewHash: a.hashStr, Fields: fields, Viewers: []string{o.viewer, viewer},
				Quarantined: quarantine,
				Detail: fmt.Sprintf("%s %s diverged between clients: %s was shown %s, %s %s; %s", key.kind, key.name,
					o.viewer, o.a.hash.short(), viewer, a.hash.short(), fieldDetail(o.a.fields, a.fields, fields))})
		} else if quarantine {
			// recorded by a route that only logs; this one quarantines
			ob.warns = append(ob.warns, Event{Kind: EventDivergence, Server: srv.Key, DefKind: key.kind, Name: key.name,
				OldHash: o.a.hashStr, NewHash: a.hashStr, Viewers: []string{o.viewer, viewer}, Quarantined: true})
		}
		if quarantine {
			ds.diverged = true
			ob.dirty = true
		}
	}
	if g.restate(ds) {
		ob.dirty = true
	}
	return rg.verdict(ds, a)
}

// pairKey names an unordered pair of hashes.
func pairKey(a, b digest) uint64 {
	x, y := a.prefix(), b.prefix()
	if x > y {
		x, y = y, x
	}
	return x*0x9E3779B97F4A7C15 ^ y
}

// fieldDetail is "description (sha256:ab… → sha256:cd…), title (none → sha256:…)".
func fieldDetail(old, cur []fieldSum, fields []string) string {
	if len(fields) == 0 {
		return "no defining field differs (members reordered or respelt)"
	}
	var b strings.Builder
	for i, f := range fields {
		if i > 0 {
			b.WriteString(", ")
		}
		idx := uint8(slices.Index(allFields[:], f))
		b.WriteString(f)
		b.WriteString(" (")
		if h, ok := fieldSumOf(old, idx); ok {
			b.WriteString(h.short())
		} else {
			b.WriteString("none")
		}
		b.WriteString(" → ")
		if h, ok := fieldSumOf(cur, idx); ok {
			b.WriteString(h.short())
		} else {
			b.WriteString("none")
		}
		b.WriteString(")")
	}
	return b.String()
}

// server is srv's state, created.
func (g *Guard) server(srv Server) *serverState {
	s := g.servers[srv.Key]
	if s == nil {
		s = &serverState{key: srv.Key, defs: map[defKey]*defState{}}
		g.servers[srv.Key] = s
	}
	return s
}

// dropped counts a definition not remembered and records EventDropped once a minute per server.
func (g *Guard) dropped(s *serverState, srv Server, key defKey, why string, now int64, ob *observation) {
	g.m.dropped.Inc()
	logKey := truncateUTF8(srv.Key, maxName)
	var last int64
	if s != nil {
		last = s.lastDrop
	} else {
		last = g.dropLog[logKey]
	}
	if last != 0 && now-last < dropEvery {
		return
	}
	if s != nil {
		s.lastDrop = now
	} else {
		if len(g.dropLog) >= 4096 {
			clear(g.dropLog)
		}
		g.dropLog[logKey] = now
	}
	name := truncateUTF8(key.name, 256)
	ob.add(Event{Kind: EventDropped, Server: logKey, DefKind: key.kind, Name: name,
		Detail: fmt.Sprintf("%s %s of %s not remembered: %s (further ones of this server are counted, recorded once a minute)",
			key.kind, name, truncateUTF8(srv.Key, 256), why)})
}

// truncateUTF8 cuts s to at most n bytes at a rune boundary.
func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// removals reports the pinned definitions of the list's kinds that a whole list lacked.
func (g *Guard) removals(s *serverState, seq uint64, kinds [3]int, ob *observation) {
	missing := false
	for k := range kinds {
		if kinds[k] > 0 && kinds[k] < s.nkind[k] {
			missing = true
		}
	}
	if !missing {
		return
	}
	for _, ds := range s.defs {
		k := kindIndex(ds.key.kind)
		if kinds[k] == 0 || ds.mark == seq || ds.src == srcNone || ds.removed {
			continue
		}
		ds.removed = true
		g.restate(ds)
		ob.dirty = true
		ob.add(Event{Kind: EventRemoved, Server: s.key, DefKind: ds.key.kind, Name: ds.key.name, OldHash: ds.pinHash.String(),
			Detail: fmt.Sprintf("%s %s is pinned but the server no longer lists it", ds.key.kind, ds.key.name)})
	}
}

// computeState is the definition's DefState.State.
func (ds *defState) computeState() uint8 {
	switch {
	case ds.seen != nil && ds.seen.invalid, ds.diverged:
		return stQuarantined
	case ds.removed:
		return stRemoved
	case ds.src == srcNone:
		return stPending
	case ds.seen != nil && ds.seen.hash != ds.pinHash:
		return stChanged
	}
	return stPinned
}

// restate recomputes ds.state and the counts; true when it changed.
func (g *Guard) restate(ds *defState) bool {
	st := ds.computeState()
	if st == ds.state {
		return false
	}
	if ds.state != stNone {
		g.counts[ds.state]--
	}
	g.counts[st]++
	ds.state = st
	return true
}

// forgetDef drops a definition entirely (a pin file pin withdrawn that nothing else holds).
func (g *Guard) forgetDef(ds *defState) {
	g.views.dropDef(ds, nil)
	if ds.state != stNone {
		g.counts[ds.state]--
	}
	delete(ds.srv.defs, ds.key)
	ds.srv.nkind[kindIndex(ds.key.kind)]--
	delete(g.fileOver, ds)
	g.ndefs--
	if len(ds.srv.defs) == 0 {
		delete(g.servers, ds.srv.key)
	}
}

// verdict is the verdict on a, which ds was seen as.
func (rg *RouteGuard) verdict(ds *defState, a *analysis) Verdict {
	v := Verdict{Hash: a.hashStr, Findings: a.findings, Pinned: ds.src != srcNone}
	switch {
	case a.invalid:
		v.Changed, v.Quarantined, v.Reason = v.Pinned, true, reasonOf(reasonInvalid, ds.key.kind)
	case v.Pinned && a.hash != ds.pinHash:
		v.Changed, v.Quarantined, v.Reason = true, true, reasonOf(reasonChanged, ds.key.kind)
	}
	if !v.Quarantined && ds.diverged {
		v.Quarantined, v.Reason = true, reasonDiverged(ds.key)
	}
	if !v.Quarantined && !v.Pinned && rg.r.Mode == ModeEnforce {
		v.Quarantined, v.Reason = true, reasonOf(reasonNotPinned, ds.key.kind)
	}
	return v
}

// verdictUnremembered is the verdict on a definition the guard does not remember: in learn it
// passes unpinned, in enforce it is not pinned.
func (rg *RouteGuard) verdictUnremembered(k Kind, a *analysis) Verdict {
	v := Verdict{Hash: a.hashStr, Findings: a.findings}
	switch {
	case a.invalid:
		v.Quarantined, v.Reason = true, reasonOf(reasonInvalid, k)
	case rg.r.Mode == ModeEnforce:
		v.Quarantined, v.Reason = true, reasonOf(reasonNotPinned, k)
	}
	return v
}

// after records what an Observe or an Approve found: metrics, the log, persistence.
func (g *Guard) after(ob *observation) {
	for _, e := range ob.events {
		g.m.event(e.Kind)
	}
	for _, e := range ob.warns {
		g.log.Warn("tool integrity: definition quarantined", "event", e.Kind, "server", e.Server,
			"kind", string(e.DefKind), "name", e.Name, "old", e.OldHash, "new", e.NewHash,
			"fields", e.Fields, "viewers", e.Viewers)
	}
	if ob.dirty && g.persist != nil {
		g.persist.kick()
	}
}

// Lookup is the verdict on the definition a call names: the one this viewer was shown last
// within the divergence window, else the one seen last by anyone, else the pin alone (ok false
// when the guard knows nothing of it: in enforce, Lookup then says Quarantined "not pinned").
func (rg *RouteGuard) Lookup(srv Server, viewer string, kind Kind, name string) (v Verdict, ok bool) {
	if rg == nil {
		return Verdict{}, false
	}
	g := rg.g
	g.mu.Lock()
	defer g.mu.Unlock()
	var ds *defState
	if s := g.servers[srv.Key]; s != nil {
		ds = s.defs[defKey{kind, name}]
	}
	if ds == nil {
		if rg.r.Mode == ModeEnforce {
			return Verdict{Quarantined: true, Reason: reasonOf(reasonNotPinned, kind)}, false
		}
		return Verdict{}, false
	}
	if vw := g.views.get(ds, viewer); vw != nil && vw.at >= g.now().UnixNano()-g.window {
		return rg.verdict(ds, vw.a), true
	}
	if ds.seen != nil {
		return rg.verdict(ds, ds.seen), true
	}
	v = Verdict{Hash: ds.pinHash.String(), Pinned: ds.src != srcNone}
	if ds.diverged {
		v.Quarantined, v.Reason = true, reasonDiverged(ds.key)
	} else if !v.Pinned && rg.r.Mode == ModeEnforce {
		v.Quarantined, v.Reason = true, reasonOf(reasonNotPinned, kind)
	}
	return v, true
}

// Forget drops what srv's definitions were seen as (notifications/tools/list_changed): the
// next list is judged afresh. Pins and quarantines stay.
//
// What is dropped are the viewers' sights of them (so that a server that announced a change is
// not taken for one showing two clients different definitions) and the divergences reported.
func (rg *RouteGuard) Forget(srv Server) {
	if rg == nil {
		return
	}
	g := rg.g
	g.mu.Lock()
	defer g.mu.Unlock()
	s := g.servers[srv.Key]
	if s == nil {
		return
	}
	for _, ds := range s.defs {
		g.views.dropDef(ds, nil)
		ds.pairs = nil
	}
}

// Approve pins the definition of name seen last as the server's (it leaves quarantine), and
// persists it. It returns the event to record; an unknown server or name is an error.
//
// Approving a definition the pin file pins overrides the file's pin in the state directory: the
// approval holds across restarts and reloads as long as the file still pins the hash it
// overrode; once the file pins another hash for it, the file wins again.
func (g *Guard) Approve(server string, kind Kind, name string) (Event, error) {
	return g.ApproveHash(server, kind, name, "")
}

// ErrNotSeenLast is ApproveHash's error when the definition seen last is not the one the
// operator reviewed (another client may have been shown another one since).
var ErrNotSeenLast = errors.New("integrity: the definition seen last is not the one named")

// ApproveHash is Approve of the definition seen last only if its hash is want ("sha256:<hex>",
// or a prefix of 12 hex digits or more, as `tools list` shortens them; "" approves whatever was
// seen last): during a divergence "seen last" is whichever client listed last, and an operator
// must not approve a definition other than the one reviewed.
func (g *Guard) ApproveHash(server string, kind Kind, name, want string) (Event, error) {
	g.mu.Lock()
	s := g.servers[server]
	if s == nil {
		g.mu.Unlock()
		return Event{}, fmt.Errorf("integrity: no definitions of server %q are known", server)
	}
	ds := s.defs[defKey{kind, name}]
	if ds == nil {
		g.mu.Unlock()
		return Event{}, fmt.Errorf("integrity: server %q has no %s %q", server, kind, name)
	}
	a := ds.seen
	if a == nil || a.invalid {
		g.mu.Unlock()
		if a == nil {
			return Event{}, fmt.Errorf("integrity: %s %q of server %q was never seen: nothing to approve", kind, name, server)
		}
		return Event{}, fmt.Errorf("integrity: %s %q of server %q cannot be pinned (not a strict JSON object within bounds)", kind, name, server)
	}
	if want != "" && !hashMatches(a.hashStr, want) {
		g.mu.Unlock()
		return Event{}, fmt.Errorf("%w: %s %q of server %q was last seen as %s, not %s (see `mcpintercept tools diff`)",
			ErrNotSeenLast, kind, name, server, a.hashStr, want)
	}
	ev := Event{Kind: EventApproved, Server: server, DefKind: kind, Name: name, NewHash: a.hashStr}
	if ds.src != srcNone {
		ev.OldHash = ds.pinHash.String()
		ev.Fields = diffFields(ds.pinFields, a.fields)
		ev.Detail = fmt.Sprintf("%s %s approved: %s", kind, name, fieldDetail(ds.pinFields, a.fields, ev.Fields))
	} else {
		ev.Detail = fmt.Sprintf("%s %s approved (%s)", kind, name, a.hash.short())
	}
	if ds.src == srcFile {
		g.fileOver[ds] = ds.pinHash
	}
	ds.pinHash, ds.pinFields, ds.src = a.hash, a.fields, srcApproved
	ds.diverged, ds.removed, ds.pairs, ds.evChanged, ds.evAdded = false, false, nil, 0, 0
	// Sights of other hashes would make a divergence of the approved definition at once.
	g.views.dropDef(ds, func(v *view) bool { return v.a.hash == a.hash })
	g.restate(ds)
	g.gen++
	g.mu.Unlock()

	g.m.event(EventApproved)
	g.log.Info("tool integrity: definition approved", "server", server, "kind", string(kind), "name", name,
		"old", ev.OldHash, "new", ev.NewHash, "fields", ev.Fields)
	if g.persist != nil {
		if err := g.persist.flush(g); err != nil {
			return ev, fmt.Errorf("integrity: approved, but not persisted: %w", err)
		}
	}
	return ev, nil
}

// Close writes what is not yet persisted. The guard still judges afterwards, in memory only.
func (g *Guard) Close() error {
	if g.persist == nil {
		return nil
	}
	return g.persist.close(g)
}

// hashMatches: want is full ("sha256:<hex>") or a prefix of at least 12 hex digits, with or
// without "sha256:".
func hashMatches(full, want string) bool {
	hex := strings.TrimPrefix(want, "sha256:")
	if len(hex) < 12 {
		return false
	}
	return strings.HasPrefix(strings.TrimPrefix(full, "sha256:"), strings.ToLower(hex))
}
