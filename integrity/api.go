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
