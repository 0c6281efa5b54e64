package integrity

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
)

// The pin file: what an operator reviewed and committed, as PinFile writes it.
//
//	{
//	  "version": 1,
//	  "servers": [
//	    {
//	      "server": "10.200.2.2:3011/mcp",
//	      "spki": "sha256:…",
//	      "definitions": [
//	        {"kind": "tool", "name": "echo", "hash": "sha256:…",
//	         "fields": {"description": "sha256:…", "inputSchema": "sha256:…", "name": "sha256:…"}}
//	      ]
//	    }
//	  ]
//	}
//
// Servers are sorted by key, definitions by kind and name, fields by name. "spki" and "fields"
// are optional (without fields a change is reported without its field-level diff). A server or
// a definition listed twice, an unknown member, a field that does not define the kind, a hash
// that is not "sha256:" and 64 lower-case hex digits are errors naming the entry.

// PinFileVersion is the pin file's format.
const PinFileVersion = 1

type pinFileJSON struct {
	Version int             `json:"version"`
	Servers []pinServerJSON `json:"servers"`
}

type pinServerJSON = serverJSON[pinDefJSON]

type pinDefJSON struct {
	Kind   Kind              `json:"kind"`
	Name   string            `json:"name"`
	Hash   string            `json:"hash"`
	Fields map[string]string `json:"fields,omitempty"`
}

// srvPins and pinEnt are a parsed pin file.
type srvPins = srvOf[pinEnt]

type pinEnt struct {
	key    defKey
	hash   digest
	fields []fieldSum
}

// parsePins reads a pin file's bytes.
func parsePins(data []byte) ([]srvPins, error) {
	var pf pinFileJSON
	if err := decodeStrict(data, 8, &pf); err != nil {
		return nil, err
	}
	if pf.Version != PinFileVersion {
		return nil, fmt.Errorf("version %d, this appliance reads version %d", pf.Version, PinFileVersion)
	}
	return parseServers(pf.Servers, parsePinDef, func(e pinEnt) defKey { return e.key },
		func(d pinDefJSON) (Kind, string) { return d.Kind, d.Name })
}

func parsePinDef(dj pinDefJSON) (pinEnt, error) {
	e := pinEnt{key: defKey{dj.Kind, dj.Name}}
	if !validKind(dj.Kind) {
		return e, errors.New("kind: not tool, prompt or template")
	}
	if dj.Name == "" || len(dj.Name) > maxName {
		return e, fmt.Errorf("name: empty or longer than %d bytes", maxName)
	}
	var err error
	if e.hash, err = parseDigest(dj.Hash); err != nil {
		return e, fmt.Errorf("hash: %v", err)
	}
	if e.fields, err = parseFields(dj.Kind, dj.Fields); err != nil {
		return e, fmt.Errorf("fields: %v", err)
	}
	return e, nil
}

// encodePins is a pin file, sorted.
func encodePins(ps []srvPins) ([]byte, error) {
	ps = slices.Clone(ps)
	slices.SortFunc(ps, func(a, b srvPins) int { return cmp.Compare(a.key, b.key) })
	pf := pinFileJSON{Version: PinFileVersion, Servers: make([]pinServerJSON, 0, len(ps))}
	for _, sp := range ps {
		defs := slices.Clone(sp.defs)
		slices.SortFunc(defs, func(a, b pinEnt) int {
			return cmp.Or(cmp.Compare(a.key.kind, b.key.kind), cmp.Compare(a.key.name, b.key.name))
		})
		sj := pinServerJSON{Server: sp.key, SPKI: sp.spki, Defs: make([]pinDefJSON, 0, len(defs))}
		for _, e := range defs {
			sj.Defs = append(sj.Defs, pinDefJSON{Kind: e.key.kind, Name: e.key.name, Hash: e.hash.String(), Fields: fieldsJSON(e.fields)})
		}
		pf.Servers = append(pf.Servers, sj)
	}
	b, err := json.MarshalIndent(pf, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

func readPinFile(path string) ([]srvPins, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("integrity: pin file: %w", err)
	}
	ps, err := parsePins(data)
	if err != nil {
		return nil, fmt.Errorf("integrity: pin file %s: %v", path, err)
	}
	return ps, nil
}

// applyPins makes the pin file's pins the guard's (the caller holds g.mu, or is Open). A
// definition pinned by the file before and not now loses its pin. An approval that overrode the
// file's pin holds while the file pins the hash it overrode.
func (g *Guard) applyPins(ps []srvPins) {
	inFile := map[*defState]bool{}
	for _, sp := range ps {
		s := g.server(Server{Key: sp.key})
		if sp.spki != "" {
			s.spki = sp.spki
		}
		for _, e := range sp.defs {
			ds := s.defs[e.key]
			if ds == nil {
				ds = &defState{srv: s, key: e.key, state: stNone}
				s.defs[e.key] = ds
				s.nkind[kindIndex(e.key.kind)]++
				g.ndefs++
			}
			inFile[ds] = true
			if over, ok := g.fileOver[ds]; ok && ds.src == srcApproved && over == e.hash {
				continue
			}
			delete(g.fileOver, ds)
			if ds.src != srcFile || ds.pinHash != e.hash {
				ds.evChanged = 0
			}
			ds.pinHash, ds.pinFields, ds.src = e.hash, e.fields, srcFile
			g.restate(ds)
		}
	}
	for _, s := range g.servers {
		for _, ds := range s.defs {
			if inFile[ds] {
				continue
			}
			delete(g.fileOver, ds)
			if ds.src != srcFile {
				continue
			}
			ds.src, ds.pinHash, ds.pinFields = srcNone, digest{}, nil
			if ds.seen == nil {
				g.forgetDef(ds)
			} else {
				g.restate(ds)
			}
		}
	}
	g.gen++
}

// PinFile is the pins as a pin file (what `mcpintercept tools pin --from-live` writes), for an
// operator to review and commit: every pinned definition at its pin (a quarantined change is
// not accepted by exporting it), every unpinned one seen at the hash seen last; one seen only as
// an entry that cannot be canonicalised is left out.
func (g *Guard) PinFile() ([]byte, error) {
	g.mu.Lock()
	rs := g.records()
	g.mu.Unlock()
	ps := make([]srvPins, 0, len(rs))
	for _, r := range rs {
		sp := srvPins{key: r.key, spki: r.spki}
		for _, d := range r.defs {
			// A pinned definition is written at its pin, not at what was seen last: a
			// definition quarantined because it changed (or diverged) must not become a pin by
			// exporting the live state; `tools approve` is how a change is accepted. An
			// unpinned one (pending on an enforce route) is written as seen, for review.
			switch {
			case d.src != srcNone:
				sp.defs = append(sp.defs, pinEnt{key: d.key, hash: d.pinHash, fields: d.pinFields})
			case d.seen != nil && !d.seen.invalid:
				sp.defs = append(sp.defs, pinEnt{key: d.key, hash: d.seen.hash, fields: d.seen.fields})
			}
		}
		if len(sp.defs) > 0 {
			ps = append(ps, sp)
		}
	}
	return encodePins(ps)
}

// ReloadPinFile reads the pin file again (SIGHUP); on error the pins held before stay. path ""
// is Options.PinFile.
func (g *Guard) ReloadPinFile(path string) error {
	if path == "" {
		path = g.o.PinFile
	}
	if path == "" {
		return errors.New("integrity: no pin file configured")
	}
	ps, err := readPinFile(path)
	if err != nil {
		return err
	}
	g.mu.Lock()
	g.applyPins(ps)
	g.mu.Unlock()
	if g.persist != nil {
		g.persist.kick()
	}
	return nil
}
