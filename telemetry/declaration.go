package telemetry

import (
	"slices"
	"strings"
)

// Declaration is the conformance declaration the draft requires of an intermediary: "An
// intermediary MUST declare the highest tier it satisfies", for Transparent mode "an awareness
// level", "An intermediary MUST declare which disposition it implements", and, for
// integration-provided selection, "MUST document which mechanism it expects and how the original
// destination reaches it". `mcpintercept declare` prints it and /declaration serves it.
type Declaration struct {
	Implementation  string   `json:"implementation"`
	Version         string   `json:"version"`
	ModeSet         []string `json:"mode_set"`
	Tier            string   `json:"tier"`
	TierLayers      string   `json:"tier_layers"`
	AwarenessLevels []int    `json:"awareness_levels"`
	AwarenessNote   string   `json:"awareness_note"`
	// Level1HeaderTrust says what the MCP fields Level 1 judges (Mcp-Method, Mcp-Name,
	// MCP-Protocol-Version) are worth: the client's assertion, checked against the body by the
	// server only from MCP 2026-07-28 on.
	Level1HeaderTrust string `json:"level1_header_trust"`
	// UpgradePolicy says how protocol switches (Upgrade, CONNECT, h2c) are treated, since after
	// one nothing more can be judged.
	UpgradePolicy   string         `json:"upgrade_policy"`
	TLSDispositions []string       `json:"tls_dispositions"`
	TLSNote         string         `json:"tls_note"`
	Interception    []Interception `json:"interception"`
	Authentication  string         `json:"authentication"`
	// ToolIntegrity says how the definitions servers list (tools, prompts, resource templates)
	// are pinned, quarantined and scanned; with a configuration, per route (tool_pins,
	// on_divergence).
	ToolIntegrity string `json:"tool_integrity"`
	// Tracing says what the appliance traces (OpenTelemetry) and whether it propagates trace
	// context to the next hop (the draft's Observability: hop tracing).
	Tracing     string `json:"tracing"`
	FailureMode string `json:"failure_mode"`
	// Federation states the aggregate endpoint (mode Federation) when it is in the mode set.
	Federation string `json:"federation,omitempty"`
	// Sidecar states the inbound interception of a co-located server (mode Sidecar) when it is
	// in the mode set.
	Sidecar string `json:"sidecar,omitempty"`
}

// SidecarStatement is what Sidecar mode is in the draft's vocabulary.
const SidecarStatement = "Sidecar (client ---> I ---> backend, co-located): connections arriving from other hosts for the co-located server's ports are steered by nftables tproxy on the input path into the appliance (loopback traffic is not) and delivered to the server from the client's own address (IP_TRANSPARENT, the server's replies routed back by connection mark and policy routing), so it is transparent to both sides and the server's logs and access rules see the real client; routes judge the flows as in Transparent mode (passthrough, plaintext, or terminate with the server's own certificate, the re-originated connection verified against that certificate); interceptor points: pre-request (a client message judged before it is forwarded), pre-response (a server message judged before it is delivered), post-response (the exchange and connection records, audit), named in each record's point; post-request has no interceptor of its own; it never aggregates (one backend)"

// FederationStatement is what the federation path is in the draft's vocabulary.
const FederationStatement = "Federation (client ==> I ---> I' or backend): one Streamable HTTP endpoint the client addresses explicitly (MCP 2026-07-28, and 2025-11-25/2025-06-18/2025-03-26 with initialize answered by the endpoint; no session) publishes the tools of configured downstreams — servers or other aggregates — as <downstream-id>.<tool>, names chaining across levels (eu.files.read) and each name routed by an exact stored mapping, never by splitting it; catalogs refreshed with server/discover and tools/list (bounded pages, tools, bytes), published as immutable generations, a collision or aggregate limit rejecting the generation; every call's authorization is durable in the audit log before any byte goes to the downstream, which receives exactly one tools/call with its original name and only the configured headers (no redirects, no retries); an outcome not safely known is answered as uncertain-after-dispatch (-31007); hop trail appended in _meta io.mcpintercept/hops (intermediary, mode, version, time, client, iss/sub of a verified token), never overwritten; trace context carried. Not Forward mode: server-to-client messages (sampling, elicitation, progress) are not relayed (a call whose downstream needs one is uncertain-after-dispatch) and prompts and resources are not aggregated (method not found, never an empty list)"

// Interception is one steering mechanism and how it delivers the original destination.
type Interception struct {
	Mechanism           string `json:"mechanism"`
	OriginalDestination string `json:"original_destination"`
	InEffect            bool   `json:"in_effect"`
}

// Version is the build's version string; the build may override it with -ldflags -X.
var Version = "0.1.0-dev"

// Capabilities are what the running configuration (or, without one, the build) provides.
type Capabilities struct {
	Levels       []int    // awareness levels in effect (0 = opaque only, not a draft level)
	Dispositions []string // TLS dispositions in effect
	// Routes are the routes of the configuration (default_route's settings included), for the
	// per-route settings the declaration names; nil when declaring the build without one.
	Routes []RouteCapability
}

// RouteCapability is what one route sets that the declaration states.
type RouteCapability struct {
	Name             string
	Level            int
	StrictMCPHeaders bool
	AllowUpgrade     []string // protocols allow_upgrade lists ("connect" for CONNECT)
}

// BuildCapabilities is everything this build implements.
var BuildCapabilities = Capabilities{Levels: []int{1, 2}, Dispositions: []string{"passthrough", "terminate", "plaintext"}}

// Declare assembles the declaration. What the draft's terms mean for this implementation is
// fixed here, in one place, so that `declare` and /declaration cannot disagree.
func Declare(mechs []Interception, c Capabilities) Declaration {
	levels := []int{}
	for _, l := range c.Levels {
		if l >= 1 { // level 0 (opaque forwarding) is not an awareness level of the draft
			levels = append(levels, l)
		}
	}
	slices.Sort(levels)
	note := "Level 1: HTTP metadata (method, path, Mcp-Method, Mcp-Name, MCP-Protocol-Version, Mcp-Session-Id, Authorization presence) read for policy and telemetry; every message forwarded unmodified; refusals are HTTP 403/429/400/421, never JSON-RPC; no circuit breaker"
	if slices.Contains(levels, 2) {
		note += "; " + Level2Statement
	}
	if len(levels) == 0 {
		note = "opaque forwarding only (flow log level 0): no HTTP header or body is read or changed"
	}
	disp := c.Dispositions
	if disp == nil {
		disp = []string{}
	}
	trust, upgrade := level1Statements(len(levels) > 0, c.Routes)
	return Declaration{
		Implementation:    "mcpintercept",
		Version:           Version,
		ModeSet:           []string{"Transparent"},
		Tier:              "Tier 1",
		TierLayers:        tierLayers(levels),
		AwarenessLevels:   levels,
		AwarenessNote:     note,
		Level1HeaderTrust: trust,
		UpgradePolicy:     upgrade,
		TLSDispositions:   disp,
		TLSNote:           "passthrough: encrypted stream forwarded untouched, connection-level policy only (SNI, destination, client); terminate: upstream TLS verified first (system roots plus configured CAs, TLS >= 1.2), then the client's handshake completed with a leaf minted by the appliance CA for the SNI or destination IP — an invalid upstream certificate refuses the client handshake; plaintext: no TLS either side, warned once per route outside development routes; no TLS downgrade unless a route sets plaintext_upstream_trusted_network",
		Interception:      mechs,
		ToolIntegrity:     ToolIntegrityStatement,
		Authentication:    "never initiates an authentication flow with a client and never logs, records or counts a credential (the appliance's declaration states how bearer tokens are checked per route)",
		FailureMode:       "nftables-tproxy and iptables-redirect: while the daemon is down with steering installed (after SIGKILL), steered flows fail closed until `mcpintercept cleanup` removes the steering; an orderly stop removes it itself. ebpf: programs are attached with bpf_link and never pinned, so when the appliance dies the kernel detaches them and clients connect directly (fail-open); `cleanup` removes a cgroup a killed `exec` left",
	}
}

// Level2Statement is what awareness Level 2 means here, including the draft's single-handshake
// rule.
const Level2Statement = "Level 2: every JSON-RPC message parsed in both directions (request and response bodies, batches at 2025-03-26, SSE events one by one) with a strict decoder (duplicate and case-variant keys, invalid UTF-8, excessive depth refused); policy decides on the body (method, tool, arguments, client info, direction), headers are only a claim and must agree with the body (SEP-2243: HTTP 400, -32020); a denial is a JSON-RPC error with the request's id whose data names the intermediary (codes -31000 denied, -31001 rate limited, -31002 too large, -31003 unreadable, -31004 audit unavailable, -31005 token refused, -31006 tool definition quarantined), never a fabricated result; surface control: list results (tools, prompts, resources, templates, server/discover) lose the entries policy would deny the client (pages that lost entries marked cacheScope private), server-to-client requests (sampling, elicitation, roots; 2026-07-28 input_required) are judged and a blocked one is answered to the server with a JSON-RPC error naming the intermediary, redact rules replace selected values with a marker (logged by rule and path, never the value), and routes may check tools/call arguments against the listed input schema (-32602); single handshake: Level 2 never starts its own handshake with the server, it reads the client's (initialize, or 2026-07-28 _meta) and remembers the negotiated version per session"

// ToolIntegrityStatement is what tool integrity means here, whatever the routes; with a
// configuration, the appliance adds which routes pin definitions and how.
const ToolIntegrityStatement = "at Level 2, on routes with tool_pins (learn or enforce), every tool, prompt and resource template a server lists is hashed in canonical form (RFC 8785 of its defining fields: name, title, description, schemas, annotations, ...) and pinned per server identity (server name or SNI, port, path; with terminate, the upstream key is recorded beside it) from the operator's pin file (tool_integrity.pin_file) or on first use (learn), kept in tool_integrity.dir across restarts and bounded by tool_integrity.max_tools; a definition that differs from its pin — and under enforce one not pinned — is quarantined: removed from list results through the same filter as policy and its calls refused with JSON-RPC -31006 naming the intermediary, never forwarded, until an operator approves it (`mcpintercept tools approve`, admin listener, bearer token from tool_integrity.dir/admin.token); changes are logged with the old and new hash and the names of the fields that changed, never a definition's text; one server showing two clients different definitions within tool_integrity.divergence_window is recorded as a divergence (on_divergence: quarantine hides the tool from everyone); every string of a definition is scanned for hidden content (C0/C1 controls, ANSI escapes, every Unicode Default_Ignorable_Code_Point and U+FFF9..FFFB (zero-width, bidi and tag characters among them), configured patterns) and policy reads the verdict (mcp.tool_findings, mcp.tool_pinned, mcp.tool_changed) — the list filter and the call check read the same verdict"

func tierLayers(levels []int) string {
	if slices.Contains(levels, 2) {
		return "Layer 1 (Transport) and Layer 5 (Policy): header-based filtering at awareness Level 1, message-level (JSON-RPC body) policy at Level 2"
	}
	return "Layer 1 (Transport), with Layer 5 (Policy) header-based filtering at awareness Level 1"
}

// HeaderTrustStatement and UpgradeStatement are the fixed parts of Level1HeaderTrust and
// UpgradePolicy; with a configuration, the routes that set strict_mcp_headers or allow_upgrade
// are named after them.
const (
	HeaderTrustStatement = "client assertion: Level 1 reads Mcp-Method, Mcp-Name and MCP-Protocol-Version from the headers, not from the JSON-RPC body, and a client can make them disagree with the body; verified by the server only at MCP 2026-07-28 and later; strict routes (strict_mcp_headers) refuse with HTTP 400 a JSON POST without Mcp-Method and an MCP-Protocol-Version older than 2026-07-28, so header policy holds against a lying client only on a strict route in front of a 2026-07-28+ server; Level 1 does not read the body — a level 2 route does, and refuses a header that disagrees with it"
	UpgradeStatement     = "refused (HTTP 403, logged with the reason) at awareness level >= 1 unless the route allows the protocol (allow_upgrade; connect for CONNECT); h2c never (Upgrade: h2c or an HTTP2-Settings header: 403; the HTTP/2 connection preface: 400); after an allowed switch the connection is forwarded opaque and logged with its protocol; level 0 routes forward everything opaque"
)

// level1Statements builds Level1HeaderTrust and UpgradePolicy.
func level1Statements(level1 bool, routes []RouteCapability) (trust, upgrade string) {
	if !level1 {
		return "not applicable: no route reads HTTP headers (opaque forwarding only)",
			"not applicable: no route reads HTTP (opaque forwarding only; a protocol switch is forwarded like any other bytes)"
	}
	trust, upgrade = HeaderTrustStatement, UpgradeStatement
	if routes == nil {
		return trust, upgrade
	}
	var strict, allowed []string
	for _, r := range routes {
		if r.Level < 1 {
			continue
		}
		if r.StrictMCPHeaders {
			strict = append(strict, r.Name)
		}
		if len(r.AllowUpgrade) > 0 {
			allowed = append(allowed, r.Name+" ("+strings.Join(r.AllowUpgrade, ", ")+")")
		}
	}
	if len(strict) == 0 {
		trust += "; in effect: no route sets strict_mcp_headers"
	} else {
		trust += "; in effect: strict_mcp_headers on " + strings.Join(strict, ", ")
	}
	if len(allowed) == 0 {
		upgrade += "; in effect: no route allows a protocol switch"
	} else {
		upgrade += "; in effect: allow_upgrade on " + strings.Join(allowed, "; ")
	}
	return trust, upgrade
}
