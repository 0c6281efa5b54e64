package integrity

import (
	"encoding/json"
	"errors"
)

// CONTRACT STUBS: the signatures below are the API Level 2, the engine and the appliance code
// against. The integrity helper replaces the bodies (and may add unexported fields/files), but
// keeps every exported signature.

// Guard is the appliance-wide memory of definitions; safe for concurrent use.
type Guard struct {
	o Options
}

// Open builds a Guard: it reads the pin file and the state directory (a malformed one is an
// error naming the file and what is wrong).
func Open(o Options) (*Guard, error) { return &Guard{o: o}, nil }

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

// Observe judges the definitions of one list result the viewer (a client address and session)
// was sent by srv: one Verdict per def, in order, and the events to record. whole says the
// result is a complete first page (no cursor in the request, no nextCursor in the result), so
// that a pinned definition it lacks is reported removed.
func (rg *RouteGuard) Observe(srv Server, viewer string, defs []Def, whole bool) ([]Verdict, []Event) {
	return make([]Verdict, len(defs)), nil
}

// Lookup is the verdict on the definition a call names: the one this viewer was shown last
// within the divergence window, else the one seen last by anyone, else the pin alone (ok false
// when the guard knows nothing of it: in enforce, Lookup then says Quarantined "not pinned").
func (rg *RouteGuard) Lookup(srv Server, viewer string, kind Kind, name string) (v Verdict, ok bool) {
	return Verdict{}, false
}

// Forget drops what srv's definitions were seen as (notifications/tools/list_changed): the
// next list is judged afresh. Pins and quarantines stay.
func (rg *RouteGuard) Forget(srv Server) {}

// Snapshot is every server's pins and what was seen, sorted by server, kind and name.
func (g *Guard) Snapshot() []ServerState { return nil }

// Approve pins the definition of name seen last as the server's (it leaves quarantine), and
// persists it. It returns the event to record; an unknown server or name is an error.
func (g *Guard) Approve(server string, kind Kind, name string) (Event, error) {
	return Event{}, errors.New("not implemented")
}

// PinFile is the pins as a pin file (what `mcpintercept tools pin --from-live` writes): every
// definition seen, pinned at the hash seen last, for an operator to review and commit.
func (g *Guard) PinFile() ([]byte, error) { return json.Marshal(struct{}{}) }

// ReloadPinFile reads the pin file again (SIGHUP); on error the pins held before stay.
func (g *Guard) ReloadPinFile(path string) error { return nil }

// Close writes what is not yet persisted.
func (g *Guard) Close() error { return nil }

// Scan is the hidden-content findings of one definition's strings (keys and values).
func Scan(raw json.RawMessage, patterns []Pattern) []string { return nil }

// Canonical is the canonical form of a definition (RFC 8785 of the fields that define it) and
// each defining field's own canonical form, by field name.
func Canonical(kind Kind, raw json.RawMessage) (canon []byte, fields map[string][]byte, err error) {
	return nil, nil, errors.New("not implemented")
}

// DefaultPatterns are scanned for when none are configured.
var DefaultPatterns []Pattern
