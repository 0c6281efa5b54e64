package integrity

// Divergence: what each viewer was shown of each definition, and when.
//
// A view is the latest sight one viewer had of one remembered definition. Views are held in a
// map by (definition, viewer), on one list over all definitions ordered by time (the least
// recent at the tail: it is the first forgotten, by the bound or by the window) and on one list
// per definition. Each definition counts its views per hash, so that "another viewer's latest
// sight was a different hash" is a look at a handful of counters, however many clients share
// a server.

type view struct {
	d      *defState
	viewer string
	a      *analysis
	at     int64 // unix nanoseconds
	// lru: the global list, most recent first; dnext/dprev: the definition's own list.
	lprev, lnext *view
	dprev, dnext *view
}

type viewKey struct {
	d      *defState
	viewer string
}

// hashCount is how many of a definition's views are of one hash, the latest of them, and since
// when the hash has been shown without a pause (first: when its count last rose from zero).
type hashCount struct {
	hash  digest
	n     int32
	last  *view // nil when the latest of them was forgotten or moved on
	first int64
}

type viewSet struct {
	m          map[viewKey]*view
	head, tail *view
	max        int
}

func (vs *viewSet) get(d *defState, viewer string) *view { return vs.m[viewKey{d, viewer}] }

func (vs *viewSet) len() int { return len(vs.m) }

// see records that viewer was shown a of d at now; it returns the view.
func (vs *viewSet) see(d *defState, viewer string, a *analysis, now int64) *view {
	v := vs.m[viewKey{d, viewer}]
	if v == nil {
		for len(vs.m) >= vs.max && vs.tail != nil {
			vs.drop(vs.tail)
		}
		v = &view{d: d, viewer: viewer, a: a, at: now}
		vs.m[viewKey{d, viewer}] = v
		vs.pushFront(v)
		v.dnext = d.views
		if d.views != nil {
			d.views.dprev = v
		}
		d.views = v
		d.count(a.hash, v, +1)
		return v
	}
	if v.a.hash != a.hash {
		d.count(v.a.hash, v, -1)
		v.at = now // count reads it as the new hash's first sight
		d.count(a.hash, v, +1)
	} else if hc := d.hashCount(a.hash); hc != nil {
		hc.last = v
	}
	v.a, v.at = a, now
	vs.unlinkLRU(v)
	vs.pushFront(v)
	return v
}

// firstShown is since when h has been shown to some viewer without a pause (0: not shown).
func (d *defState) firstShown(h digest) int64 {
	if hc := d.hashCount(h); hc != nil {
		return hc.first
	}
	return 0
}

// expire forgets the views older than cutoff.
func (vs *viewSet) expire(cutoff int64) {
	for vs.tail != nil && vs.tail.at < cutoff {
		vs.drop(vs.tail)
	}
}

// drop forgets one view.
func (vs *viewSet) drop(v *view) {
	delete(vs.m, viewKey{v.d, v.viewer})
	vs.unlinkLRU(v)
	d := v.d
	if v.dprev != nil {
		v.dprev.dnext = v.dnext
	} else {
		d.views = v.dnext
	}
	if v.dnext != nil {
		v.dnext.dprev = v.dprev
	}
	v.dprev, v.dnext = nil, nil
	d.count(v.a.hash, v, -1)
}

// dropDef forgets every view of d; keep, when not nil, says which to keep.
func (vs *viewSet) dropDef(d *defState, keep func(*view) bool) {
	for v := d.views; v != nil; {
		next := v.dnext
		if keep == nil || !keep(v) {
			vs.drop(v)
		}
		v = next
	}
}

func (vs *viewSet) pushFront(v *view) {
	v.lprev, v.lnext = nil, vs.head
	if vs.head != nil {
		vs.head.lprev = v
	}
	vs.head = v
	if vs.tail == nil {
		vs.tail = v
	}
}

func (vs *viewSet) unlinkLRU(v *view) {
	if v.lprev != nil {
		v.lprev.lnext = v.lnext
	} else if vs.head == v {
		vs.head = v.lnext
	}
	if v.lnext != nil {
		v.lnext.lprev = v.lprev
	} else if vs.tail == v {
		vs.tail = v.lprev
	}
	v.lprev, v.lnext = nil, nil
}

func (d *defState) hashCount(h digest) *hashCount {
	for i := range d.hashes {
		if d.hashes[i].hash == h {
			return &d.hashes[i]
		}
	}
	return nil
}

// count adds delta views of hash h (v the view concerned).
func (d *defState) count(h digest, v *view, delta int32) {
	i := 0
	for i < len(d.hashes) && d.hashes[i].hash != h {
		i++
	}
	if i == len(d.hashes) {
		if delta < 0 {
			return
		}
		d.hashes = append(d.hashes, hashCount{hash: h, first: v.at})
	}
	hc := &d.hashes[i]
	hc.n += delta
	if delta > 0 {
		hc.last = v
	} else if hc.last == v {
		hc.last = nil
	}
	if hc.n <= 0 {
		d.hashes = append(d.hashes[:i], d.hashes[i+1:]...)
		if len(d.hashes) == 0 {
			d.hashes = nil
		}
	}
}

// other is a view of d of another hash than h (a divergence), or nil.
func (d *defState) other(h digest) *view {
	for i := range d.hashes {
		hc := &d.hashes[i]
		if hc.hash == h || hc.n <= 0 {
			continue
		}
		if hc.last != nil {
			return hc.last
		}
		for v := d.views; v != nil; v = v.dnext {
			if v.a.hash == hc.hash {
				hc.last = v
				return v
			}
		}
	}
	return nil
}

// otherThan is a view of d of a hash that is neither h nor not, or nil.
func (d *defState) otherThan(h, not digest) *view {
	for i := range d.hashes {
		hc := &d.hashes[i]
		if hc.hash == h || hc.hash == not || hc.n <= 0 {
			continue
		}
		if hc.last != nil {
			return hc.last
		}
		for v := d.views; v != nil; v = v.dnext {
			if v.a.hash == hc.hash {
				hc.last = v
				return v
			}
		}
	}
	return nil
}
