package integrity

import "time"

// Snapshot is every server's pins and what was seen, sorted by server, kind and name.
func (g *Guard) Snapshot() []ServerState {
	g.mu.Lock()
	rs := g.records()
	g.mu.Unlock()
	sortRecords(rs)
	out := make([]ServerState, 0, len(rs))
	for _, r := range rs {
		ss := ServerState{Server: r.key, SPKI: r.spki, Defs: make([]DefState, 0, len(r.defs))}
		for _, d := range r.defs {
			ds := DefState{Kind: d.key.kind, Name: d.key.name, State: stateNames[d.state]}
			if d.src != srcNone {
				ds.Pin, ds.Source = d.pinHash.String(), srcNames[d.src]
				ds.Fields = fieldsJSON(d.pinFields)
			}
			if a := d.seen; a != nil {
				if d.seenAt != 0 {
					ds.SeenAt = time.Unix(0, d.seenAt).UTC()
				}
				ds.Findings = a.findings
				if !a.invalid {
					ds.Seen = a.hashStr
					ds.Fields = fieldsJSON(a.fields)
					if d.src != srcNone && a.hash != d.pinHash {
						ds.Changed = diffFields(d.pinFields, a.fields)
					}
				}
			}
			ss.Defs = append(ss.Defs, ds)
		}
		out = append(out, ss)
	}
	return out
}
