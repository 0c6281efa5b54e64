package integrity

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"mcpintercept/mcp"
)

// StateFile is the name of the guard's state in Options.Dir.
const StateFile = "state.json"

// stateVersion is state.json's format.
const stateVersion = 1

// Coalescing of writes: at most one per minWriteGap, and never more often than writeGapFactor
// times the last write's duration (a large state is not rewritten back to back).
const (
	minWriteGap    = 200 * time.Millisecond
	writeGapFactor = 4
)

// srvRec and defRec are a copy of the state taken under the lock, written or reported outside
// it (fields slices and analyses are immutable, so the copy is shallow).
type srvRec = srvOf[defRec]

// srvOf is one server of a state or pin file, parsed.
type srvOf[R any] struct {
	key, spki string
	defs      []R
}

type defRec struct {
	key         defKey
	pinHash     digest
	pinFields   []fieldSum
	src         uint8
	fileOver    digest
	hasFileOver bool
	seen        *analysis
	seenAt      int64
	state       uint8
	diverged    bool
	removed     bool
}

// records copies the state; the caller holds g.mu. Sort with sortRecords outside the lock.
func (g *Guard) records() []srvRec {
	out := make([]srvRec, 0, len(g.servers))
	for _, s := range g.servers {
		r := srvRec{key: s.key, spki: s.spki, defs: make([]defRec, 0, len(s.defs))}
		for _, ds := range s.defs {
			d := defRec{key: ds.key, pinHash: ds.pinHash, pinFields: ds.pinFields, src: ds.src, seen: ds.seen,
				seenAt: ds.seenAt, state: ds.state, diverged: ds.diverged, removed: ds.removed}
			d.fileOver, d.hasFileOver = g.fileOver[ds]
			r.defs = append(r.defs, d)
		}
		out = append(out, r)
	}
	return out
}

func sortRecords(rs []srvRec) {
	slices.SortFunc(rs, func(a, b srvRec) int { return cmp.Compare(a.key, b.key) })
	for i := range rs {
		slices.SortFunc(rs[i].defs, func(a, b defRec) int {
			return cmp.Or(cmp.Compare(a.key.kind, b.key.kind), cmp.Compare(a.key.name, b.key.name))
		})
	}
}

// stateJSON is state.json.
type stateJSON struct {
	Version int               `json:"version"`
	Servers []stateServerJSON `json:"servers"`
}

type stateServerJSON = serverJSON[stateDefJSON]

// serverJSON is one server of state.json or of a pin file.
type serverJSON[D any] struct {
	Server string `json:"server"`
	SPKI   string `json:"spki,omitempty"`
	Defs   []D    `json:"definitions"`
}

type stateDefJSON struct {
	Kind       Kind              `json:"kind"`
	Name       string            `json:"name"`
	Pin        string            `json:"pin,omitempty"`
	Source     string            `json:"source,omitempty"`
	PinFields  map[string]string `json:"pin_fields,omitempty"`
	FilePin    string            `json:"file_pin,omitempty"` // the pin file's hash an approval overrides
	Seen       string            `json:"seen,omitempty"`
	SeenFields map[string]string `json:"seen_fields,omitempty"` // when seen differs from pin
	Invalid    bool              `json:"invalid,omitempty"`     // seen last as an entry that cannot be canonicalised
	Findings   []string          `json:"findings,omitempty"`
	SeenAt     time.Time         `json:"seen_at,omitzero"`
	State      string            `json:"state"`
	Reason     string            `json:"reason,omitempty"` // for people; recomputed on load
	Diverged   bool              `json:"diverged,omitempty"`
	Removed    bool              `json:"removed,omitempty"`
}

func fieldsJSON(fs []fieldSum) map[string]string {
	if len(fs) == 0 {
		return nil
	}
	m := make(map[string]string, len(fs))
	for _, f := range fs {
		m[allFields[f.idx]] = f.sum.String()
	}
	return m
}

// parseFields reads a fields object of kind's field names and hashes.
func parseFields(kind Kind, m map[string]string) ([]fieldSum, error) {
	if len(m) == 0 {
		return nil, nil
	}
	out := make([]fieldSum, 0, len(m))
	for name, h := range m {
		idx := fieldOf(kind, name)
		if idx < 0 {
			return nil, fmt.Errorf("%q is not a defining field of a %s", truncate(name, 80), kind)
		}
		d, err := parseDigest(h)
		if err != nil {
			return nil, fmt.Errorf("%s: %v", name, err)
		}
		out = append(out, fieldSum{idx: uint8(idx), sum: d})
	}
	slices.SortFunc(out, func(a, b fieldSum) int { return int(a.idx) - int(b.idx) })
	return out, nil
}

func encodeState(rs []srvRec) ([]byte, error) {
	st := stateJSON{Version: stateVersion, Servers: make([]stateServerJSON, 0, len(rs))}
	for _, r := range rs {
		sj := stateServerJSON{Server: r.key, SPKI: r.spki, Defs: make([]stateDefJSON, 0, len(r.defs))}
		for _, d := range r.defs {
			dj := stateDefJSON{Kind: d.key.kind, Name: d.key.name, State: stateNames[d.state],
				Diverged: d.diverged, Removed: d.removed}
			if d.src != srcNone {
				dj.Pin, dj.Source, dj.PinFields = d.pinHash.String(), srcNames[d.src], fieldsJSON(d.pinFields)
			}
			if d.hasFileOver {
				dj.FilePin = d.fileOver.String()
			}
			if a := d.seen; a != nil {
				dj.SeenAt = time.Unix(0, d.seenAt).UTC()
				dj.Findings = a.findings
				if a.invalid {
					dj.Invalid = true
				} else {
					dj.Seen = a.hashStr
					if d.src == srcNone || a.hash != d.pinHash {
						dj.SeenFields = fieldsJSON(a.fields)
					}
				}
			}
			dj.Reason = d.reason()
			sj.Defs = append(sj.Defs, dj)
		}
		st.Servers = append(st.Servers, sj)
	}
	b, err := json.MarshalIndent(st, "", " ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// reason is why the definition is quarantined for everyone ("" when it is not, or only in
// enforce: pending).
func (d *defRec) reason() string {
	switch {
	case d.seen != nil && d.seen.invalid:
		return reasonOf(reasonInvalid, d.key.kind)
	case d.src != srcNone && d.seen != nil && d.seen.hash != d.pinHash:
		return reasonOf(reasonChanged, d.key.kind)
	case d.diverged:
		return reasonDiverged(d.key)
	case d.src == srcNone:
		return reasonOf(reasonNotPinned, d.key.kind)
	}
	return ""
}

// decodeStrict decodes one JSON document by the strict codec's rules (no duplicate or
// case-variant keys, valid UTF-8, bounded depth), refusing unknown members.
func decodeStrict(data []byte, maxDepth int, v any) error {
	if err := mcp.ValidateJSON(data, maxDepth); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

func srcOf(s string) (uint8, bool) {
	i := slices.Index(srcNames[:], s)
	return uint8(i), i > 0
}

// parseState reads state.json into records (state recomputed, not trusted).
func parseState(data []byte) ([]srvRec, error) {
	var st stateJSON
	if err := decodeStrict(data, 8, &st); err != nil {
		return nil, err
	}
	if st.Version != stateVersion {
		return nil, fmt.Errorf("version %d, this appliance reads version %d", st.Version, stateVersion)
	}
	return parseServers(st.Servers, parseStateDef, func(d defRec) defKey { return d.key },
		func(d stateDefJSON) (Kind, string) { return d.Kind, d.Name })
}

// parseServers checks the servers of state.json or a pin file — each named once, within
// bounds, with a valid spki — and parses their definitions with def, each named once; errors
// name the entry (servers[i], definitions[k]).
func parseServers[D, R any](list []serverJSON[D], def func(D) (R, error), keyOf func(R) defKey, kindName func(D) (Kind, string)) ([]srvOf[R], error) {
	out := make([]srvOf[R], 0, len(list))
	servers := map[string]int{}
	for i, sj := range list {
		where := fmt.Sprintf("servers[%d] (%q)", i, truncate(sj.Server, 80))
		if sj.Server == "" || len(sj.Server) > maxName {
			return nil, fmt.Errorf("%s: server: empty or longer than %d bytes", where, maxName)
		}
		if j, dup := servers[sj.Server]; dup {
			return nil, fmt.Errorf("%s: server listed again (also servers[%d])", where, j)
		}
		servers[sj.Server] = i
		if sj.SPKI != "" {
			if _, err := parseDigest(sj.SPKI); err != nil {
				return nil, fmt.Errorf("%s: spki: %v", where, err)
			}
		}
		r := srvOf[R]{key: sj.Server, spki: sj.SPKI, defs: make([]R, 0, len(sj.Defs))}
		seen := map[defKey]int{}
		for k, dj := range sj.Defs {
			kind, name := kindName(dj)
			dwhere := fmt.Sprintf("%s: definitions[%d] (%s %q)", where, k, truncate(string(kind), 20), truncate(name, 80))
			d, err := def(dj)
			if err != nil {
				return nil, fmt.Errorf("%s: %v", dwhere, err)
			}
			if j, dup := seen[keyOf(d)]; dup {
				return nil, fmt.Errorf("%s: listed again (also definitions[%d])", dwhere, j)
			}
			seen[keyOf(d)] = k
			r.defs = append(r.defs, d)
		}
		out = append(out, r)
	}
	return out, nil
}

func parseStateDef(dj stateDefJSON) (defRec, error) {
	d := defRec{key: defKey{dj.Kind, dj.Name}, diverged: dj.Diverged, removed: dj.Removed}
	if !validKind(dj.Kind) {
		return d, errors.New("kind: not tool, prompt or template")
	}
	if dj.Name == "" || len(dj.Name) > maxName {
		return d, fmt.Errorf("name: empty or longer than %d bytes", maxName)
	}
	if !slices.Contains(stateNames[:], dj.State) {
		return d, fmt.Errorf("state: %q is not one of %v", truncate(dj.State, 40), stateNames)
	}
	var err error
	if dj.Pin != "" {
		if d.pinHash, err = parseDigest(dj.Pin); err != nil {
			return d, fmt.Errorf("pin: %v", err)
		}
		var ok bool
		if d.src, ok = srcOf(dj.Source); !ok {
			return d, fmt.Errorf("source: %q is not file, learned or approved", truncate(dj.Source, 40))
		}
		if d.pinFields, err = parseFields(dj.Kind, dj.PinFields); err != nil {
			return d, fmt.Errorf("pin_fields: %v", err)
		}
	} else if dj.Source != "" || len(dj.PinFields) > 0 {
		return d, errors.New("source or pin_fields without a pin")
	}
	if dj.FilePin != "" {
		if d.src != srcApproved {
			return d, errors.New("file_pin on a definition not approved")
		}
		if d.fileOver, err = parseDigest(dj.FilePin); err != nil {
			return d, fmt.Errorf("file_pin: %v", err)
		}
		d.hasFileOver = true
	}
	if len(dj.Findings) > 64 {
		return d, errors.New("findings: more than 64")
	}
	for _, f := range dj.Findings {
		if f == "" || len(f) > 300 {
			return d, errors.New("findings: an empty or overlong finding")
		}
	}
	switch {
	case dj.Invalid:
		if dj.Seen != "" || len(dj.SeenFields) > 0 {
			return d, errors.New("invalid with a seen hash")
		}
		d.seen = &analysis{invalid: true, findings: dj.Findings}
	case dj.Seen != "":
		a := &analysis{hashStr: dj.Seen, findings: dj.Findings}
		if a.hash, err = parseDigest(dj.Seen); err != nil {
			return d, fmt.Errorf("seen: %v", err)
		}
		a.hashStr = a.hash.String()
		if a.fields, err = parseFields(dj.Kind, dj.SeenFields); err != nil {
			return d, fmt.Errorf("seen_fields: %v", err)
		}
		if len(dj.SeenFields) == 0 && d.src != srcNone && a.hash == d.pinHash {
			a.fields = d.pinFields
		}
		d.seen = a
	case len(dj.SeenFields) > 0 || len(dj.Findings) > 0:
		return d, errors.New("seen_fields or findings without a seen hash")
	}
	if d.seen != nil && !dj.SeenAt.IsZero() {
		d.seenAt = dj.SeenAt.UnixNano()
	}
	if d.src == srcNone && d.seen == nil {
		return d, errors.New("neither a pin nor a seen hash")
	}
	return d, nil
}

// load installs the records read from state.json.
func (g *Guard) load(rs []srvRec) {
	for _, r := range rs {
		s := g.server(Server{Key: r.key})
		s.spki = r.spki
		for _, d := range r.defs {
			ds := &defState{srv: s, key: d.key, pinHash: d.pinHash, pinFields: d.pinFields, src: d.src,
				seen: d.seen, seenAt: d.seenAt, diverged: d.diverged, removed: d.removed, state: stNone}
			s.defs[d.key] = ds
			s.nkind[kindIndex(d.key.kind)]++
			g.ndefs++
			if d.hasFileOver {
				g.fileOver[ds] = d.fileOver
			}
			g.restate(ds)
		}
	}
}

// persister writes state.json: coalesced by a background flusher, at once on Approve and Close.
type persister struct {
	dir  string
	path string
	lock *os.File // dir/lock, held until close (nil where flock does not exist)

	kickc chan struct{}
	quit  chan struct{}
	done  chan struct{}
	once  sync.Once
	cerr  error

	wmu       sync.Mutex // one write at a time, in order
	lastWrite time.Time
	lastDur   time.Duration
	lastErr   string
}

// openDir creates dir (0700) and reads its state.json (nil records when there is none).
func openDir(dir string) (_ *persister, _ []srvRec, err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, nil, fmt.Errorf("integrity: state directory: %w", err)
	}
	lock, err := lockDir(dir)
	if err != nil {
		return nil, nil, err
	}
	defer func() {
		if err != nil && lock != nil {
			lock.Close()
		}
	}()
	p := &persister{dir: dir, path: filepath.Join(dir, StateFile), lock: lock,
		kickc: make(chan struct{}, 1), quit: make(chan struct{}), done: make(chan struct{})}
	if old, _ := filepath.Glob(filepath.Join(dir, "."+StateFile+".*.tmp")); len(old) > 0 {
		for _, f := range old {
			os.Remove(f) // a write a crash interrupted
		}
	}
	data, err := os.ReadFile(p.path)
	if errors.Is(err, os.ErrNotExist) {
		return p, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("integrity: %w", err)
	}
	rs, err := parseState(data)
	if err != nil {
		return nil, nil, fmt.Errorf("integrity: %s is not a valid state file (remove it to start afresh, losing learned pins and quarantines): %v", p.path, err)
	}
	return p, rs, nil
}

func (p *persister) start(g *Guard) { go p.loop(g) }

func (p *persister) kick() {
	select {
	case p.kickc <- struct{}{}:
	default:
	}
}

func (p *persister) loop(g *Guard) {
	defer close(p.done)
	for {
		select {
		case <-p.quit:
			return
		case <-p.kickc:
		}
		p.wmu.Lock()
		wait := max(minWriteGap, writeGapFactor*p.lastDur) - time.Since(p.lastWrite)
		p.wmu.Unlock()
		if wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-p.quit:
				t.Stop()
				return
			}
		}
		if err := p.flush(g); err != nil {
			p.kick() // retried after the gap
		}
	}
}

// flush writes the state when it changed since the last write.
func (p *persister) flush(g *Guard) error {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	g.mu.Lock()
	if g.gen == g.written {
		g.mu.Unlock()
		return nil
	}
	gen := g.gen
	rs := g.records()
	g.mu.Unlock()

	start := time.Now()
	sortRecords(rs)
	data, err := encodeState(rs)
	if err == nil {
		err = writeAtomic(p.dir, StateFile, data)
	}
	p.lastWrite = time.Now()
	p.lastDur = p.lastWrite.Sub(start)
	if err != nil {
		if msg := err.Error(); msg != p.lastErr {
			p.lastErr = msg
			g.log.Error("tool integrity: state not written", "file", p.path, "err", err)
		}
		return err
	}
	p.lastErr = ""
	g.mu.Lock()
	g.written = max(g.written, gen)
	g.mu.Unlock()
	return nil
}

func (p *persister) close(g *Guard) error {
	p.once.Do(func() {
		close(p.quit)
		<-p.done
		p.cerr = p.flush(g)
		if p.lock != nil {
			p.lock.Close()
		}
	})
	return p.cerr
}

// writeAtomic replaces dir/name with data: a temporary file (0600) written and synced, renamed
// over it, the directory synced.
func writeAtomic(dir, name string, data []byte) error {
	f, err := os.CreateTemp(dir, "."+name+".*.tmp")
	if err != nil {
		return err
	}
	tmp := f.Name()
	ok := false
	defer func() {
		if !ok {
			f.Close()
			os.Remove(tmp)
		}
	}()
	if err := f.Chmod(0o600); err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		return err
	}
	ok = true
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
