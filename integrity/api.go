// Package integrity is the appliance's memory of MCP server definitions: a canonical hash of
// every tool, prompt and resource template a server lists, pinned per server identity (from an
// operator's pin file, or trust on first use in the state directory), so that a definition that
// changes after it was pinned (a "rug pull") is quarantined — hidden from lists and its calls
// refused — until an operator approves it; a server that shows two clients different
// definitions of one tool is caught (divergence); and every string of a definition is scanned
// for content a user's screen does not show (controls, ANSI escapes, zero-width, bidi and
// Unicode tag characters) and for configured patterns ("tool poisoning").
//
// It imports no other package of the appliance but mcp; Level 2 calls a RouteGuard on every
// list result and every tools/call, the appliance serves Snapshot, Approve and PinFile on its
// admin listener.
//
// # Hash
//
// A definition's hash is "sha256:" and the hex SHA-256 of the RFC 8785 form of an object of its
// defining fields (see Canonical; for a tool name, title, description, inputSchema,
// outputSchema, annotations, icons and execution — icons and execution are in because they
// change what a user is shown and how a call runs; _meta and unknown members are out). Member
// names are compared exactly: "Description" is an unknown member (Level 2's strict codec, and
// Canonical, refuse two keys of one object that differ only in case). Each field is hashed on
// its own too, for the field-level diff of a change (a field added or removed counts as
// changed). An entry Canonical refuses (not one strict JSON object within 4 MiB and 64 levels)
// is quarantined in every mode and cannot be approved.
//
// # Verdicts
//
// Per server key and (kind, name): a pin (source "file", "learned" or "approved") and what was
// seen last. A definition equal to its pin passes; one that differs is quarantined ("<kind>
// definition changed since it was pinned") for as long as it differs — a server that goes back
// to the pinned definition passes again; an unpinned one is pinned on first sight in learn and
// quarantined in enforce ("<kind> not pinned (tool_pins: enforce): approve it"). Approve pins
// what was seen last (by anyone). Events — pinned, changed, added, findings — are recorded once
// per hash of a definition (not on every list, and once more after a restart); removed once
// while it stays missing from whole lists; key_changed when a terminate route's upstream key
// differs from the one recorded (a plaintext route, SPKI "", says nothing of the key).
//
// # Divergence
//
// The guard remembers, per definition and viewer, the hash the viewer was shown last and when.
// A divergence is two definitions served side by side: a viewer is shown a hash while another
// viewer's latest sight within DivergenceWindow is another hash shown after this one was first
// shown (without a pause). The pinned hash counts as shown before anything in the window, so
// one side may be the pin or not: a viewer shown another hash and then a viewer shown the pinned
// one is a divergence at once. A server that changes a definition for everyone — the old hash,
// then only the new one: a rug pull — is a change, however soon after the last sight of the old
// one; a server that shows client A the pinned definition and client B another is, at B's
// sight, indistinguishable from a rug pull, and is caught as soon as it shows the pinned one
// again (A lists again, or a third client is shown it). A change names the viewer it was shown
// to. The divergence is recorded (once per pair of hashes) naming both viewers and hashes, in
// its detail too (the record's reason); with on_divergence:
// quarantine the definition is then quarantined for everyone ("definitions of <kind> <name>
// diverged between clients"), across restarts, until Approve, which also forgets the sights of
// other hashes. Forget (list_changed) forgets a server's sights.
//
// # Bounds and memory
//
// MaxTools bounds the definitions remembered over all servers (a pin file's pins count, and
// are all loaded even past it). Past it, and for a name or server key longer than 1 KiB, a
// definition is judged but not remembered: in learn it passes unpinned, in enforce it is
// quarantined (not pinned), EventDropped is recorded once a minute per server and
// mcpintercept_tool_definitions_dropped_total counts each. Sights (views) are bounded by
// 4×MaxTools, the least recent forgotten first, and expire with the window. No definition text
// is kept: hashes, names and findings. Measured on amd64 (TestBoundMemory): about 800 bytes of
// heap per remembered definition with one viewer (state, analysis, per-field hashes, view,
// map entries), and about 140 bytes per further viewer of it; at the default bound, at most
// about 80 MB for definitions plus about 56 MB for views. An unchanged list costs a SHA-256 of
// each entry's bytes and a map look-up (BenchmarkObserve1000).
//
// # Persistence
//
// Options.Dir holds state.json (0600, the directory 0700): pins and their source, the hash
// seen last with its field hashes and findings, quarantine state and reason, divergence, the
// server's key. It is replaced atomically (temporary file, fsync, rename, directory fsync) by a
// background writer at most every 200 ms (or 4× the last write's duration, whichever is
// longer), at once by Approve and Close. A state.json that does not parse is an error of Open
// naming the file and the entry, never a silent reset. A pin file's pin replaces a learned one
// of the same definition; a definition the file does not name is judged by the route's mode.
// Approving a definition the file pins overrides it in state.json for as long as the file
// still pins the hash that was overridden; a file that pins another hash wins again.
package integrity

import (
	"encoding/json"
	"log/slog"
	"regexp"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Kind is what a definition defines.
type Kind string

const (
	KindTool     Kind = "tool"     // an entry of tools/list .tools (its key: name)
	KindPrompt   Kind = "prompt"   // an entry of prompts/list .prompts (name)
	KindTemplate Kind = "template" // an entry of resources/templates/list .resourceTemplates (uriTemplate)
)

// Mode is a route's tool_pins.
type Mode string

const (
	ModeOff     Mode = "off"     // nothing pinned, nothing checked
	ModeLearn   Mode = "learn"   // unknown definitions are pinned on first sight; a changed one is quarantined
	ModeEnforce Mode = "enforce" // as learn, but an unknown definition is quarantined until approved
)

// Server identifies one MCP server as clients address it.
type Server struct {
	// Key is "host:port/path": host is the TLS server name, else the Host header's name, else
	// the original destination's address (lower case; IPv6 in brackets); port the original
	// destination's; path the request path without query and trailing slash.
	Key string
	// SPKI is "sha256:<hex>" of the upstream certificate's public key on terminate routes ("":
	// plaintext). It is recorded beside the pins; a change is an event, not a new identity (a
	// server may rotate its key).
	SPKI string
}

// Def is one definition as a list result carried it.
type Def struct {
	Kind Kind
	Name string          // name, or uriTemplate for a template
	Raw  json.RawMessage // the entry's JSON as the server sent it
}

// Verdict is what the guard decided about one definition (the one seen last by this viewer,
// for Lookup). Level 2 exposes Pinned, Changed and Findings to policy (mcp.tool_pinned,
// mcp.tool_changed, mcp.tool_findings) for both the list filter and the call check.
type Verdict struct {
	Hash        string   // "sha256:<hex>" of the canonical definition
	Pinned      bool     // a pin exists for this server and name
	Changed     bool     // the definition differs from its pin
	Quarantined bool     // hidden from lists, calls refused (Level 2's -31006)
	Reason      string   // why quarantined, e.g. "tool definition changed since it was pinned"
	Findings    []string // sorted, unique: "control", "ansi", "zero_width", "bidi", "tag", "pattern:<name>"
}

// Event is something worth a record: a pin learned, a change, an addition in enforce, a
// removal, a divergence, a server key change, a definition not pinned because of the bound.
type Event struct {
	Kind    string   // EventPinned, EventChanged, EventAdded, EventRemoved, EventDivergence, EventKeyChanged, EventDropped, EventFindings
	Server  string   // Server.Key
	DefKind Kind     // tool, prompt, template
	Name    string   // the definition's name
	OldHash string   // the pin's (or the other client's, for a divergence)
	NewHash string   // the definition's now
	Fields  []string // which fields differ (name, title, description, inputSchema, outputSchema, annotations, ...); never their values
	Viewers []string // the viewers involved (a divergence names both)
	// Quarantined: the event quarantined the definition.
	Quarantined bool
	// Detail is one line for the record's reason, e.g. "tool echo changed since it was pinned:
	// description (sha256:ab… → sha256:cd…)"; never a definition's text.
	Detail string
}

// Event kinds.
const (
	EventPinned     = "pinned"
	EventChanged    = "changed"
	EventAdded      = "added"
	EventRemoved    = "removed"
	EventDivergence = "divergence"
	EventKeyChanged = "key_changed"
	EventDropped    = "dropped"
	EventFindings   = "findings"
	EventApproved   = "approved"
)

// Pattern is a configured pattern a definition's strings are scanned for.
type Pattern struct {
	Name string
	Re   *regexp.Regexp
}

// Options configure a Guard.
type Options struct {
	// Dir is the state directory (created 0700): trust-on-first-use pins, approvals and
	// quarantines, so that they survive a restart. "" keeps them in memory only.
	Dir string
	// PinFile is the operator's reviewed pin file (the format PinFile writes; "" none). Its pins
	// take precedence over learned ones for the servers it names.
	PinFile string
	// MaxTools bounds the definitions remembered, over all servers (0: DefaultMaxTools); past
	// it a new definition is not pinned (EventDropped, counted): in enforce it stays
	// quarantined, in learn it passes unpinned.
	MaxTools int
	// DivergenceWindow is how long a viewer's sight of a definition counts for divergence
	// (0: DefaultDivergenceWindow).
	DivergenceWindow time.Duration
	// Patterns are scanned for in every string of a definition (nil: DefaultPatterns).
	Patterns []Pattern
	// Registerer receives the guard's metrics (nil: none).
	Registerer prometheus.Registerer
	Log        *slog.Logger
	Now        func() time.Time // nil: time.Now
}

// Defaults.
const (
	DefaultMaxTools         = 100_000
	DefaultDivergenceWindow = 10 * time.Minute
)

// RouteOptions are a route's settings.
type RouteOptions struct {
	Mode Mode
	// QuarantineDivergence quarantines a definition for everyone when two viewers were shown
	// different ones (on_divergence: quarantine); otherwise a divergence is only recorded.
	QuarantineDivergence bool
}

// ServerState is one server's pins as Snapshot reports them.
type ServerState struct {
	Server string     `json:"server"`
	SPKI   string     `json:"spki,omitempty"`
	Defs   []DefState `json:"definitions"`
}

// DefState is one definition's pin and what was seen last.
type DefState struct {
	Kind     Kind              `json:"kind"`
	Name     string            `json:"name"`
	Pin      string            `json:"pin,omitempty"`    // pinned hash ("" not pinned)
	Source   string            `json:"source,omitempty"` // "file", "learned", "approved"
	Seen     string            `json:"seen,omitempty"`   // hash seen last
	State    string            `json:"state"`            // "pinned", "changed", "pending" (unpinned in enforce), "quarantined" (divergence), "removed"
	Fields   map[string]string `json:"fields,omitempty"` // per-field hashes of the seen definition
	Changed  []string          `json:"changed,omitempty"`
	Findings []string          `json:"findings,omitempty"`
	SeenAt   time.Time         `json:"seen_at,omitzero"`
}
