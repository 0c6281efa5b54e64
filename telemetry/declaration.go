package telemetry

// Declaration is the conformance declaration the draft requires of an intermediary: "An
// intermediary MUST declare the highest tier it satisfies", for Transparent mode "an awareness
// level", "An intermediary MUST declare which disposition it implements", and, for
// integration-provided selection, "MUST document which mechanism it expects and how the original
// destination reaches it". `mcpintercept declare` prints it and /declaration serves it.
type Declaration struct {
	Implementation  string         `json:"implementation"`
	Version         string         `json:"version"`
	ModeSet         []string       `json:"mode_set"`
	Tier            string         `json:"tier"`
	TierLayers      string         `json:"tier_layers"`
	AwarenessLevels []int          `json:"awareness_levels"`
	AwarenessNote   string         `json:"awareness_note"`
	TLSDispositions []string       `json:"tls_dispositions"`
	TLSNote         string         `json:"tls_note"`
	Interception    []Interception `json:"interception"`
	Authentication  string         `json:"authentication"`
	FailureMode     string         `json:"failure_mode"`
}

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
}

// BuildCapabilities is everything this build implements.
var BuildCapabilities = Capabilities{Levels: []int{1}, Dispositions: []string{"passthrough", "terminate", "plaintext"}}

// Declare assembles the declaration. What the draft's terms mean for this implementation is
// fixed here, in one place, so that `declare` and /declaration cannot disagree.
func Declare(mechs []Interception, c Capabilities) Declaration {
	levels := []int{}
	for _, l := range c.Levels {
		if l >= 1 { // level 0 (opaque forwarding) is not an awareness level of the draft
			levels = append(levels, l)
		}
	}
	note := "Level 1: HTTP metadata (method, path, Mcp-Method, Mcp-Name, MCP-Protocol-Version, Mcp-Session-Id, Authorization presence) read for policy and telemetry; every message forwarded unmodified; refusals are HTTP 403/429/400, never JSON-RPC; no circuit breaker"
	if len(levels) == 0 {
		note = "opaque forwarding only (flow log level 0): no HTTP header or body is read or changed"
	}
	disp := c.Dispositions
	if disp == nil {
		disp = []string{}
	}
	return Declaration{
		Implementation:  "mcpintercept",
		Version:         Version,
		ModeSet:         []string{"Transparent"},
		Tier:            "Tier 1",
		TierLayers:      "Layer 1 (Transport), with Layer 5 (Policy) header-based filtering at awareness Level 1",
		AwarenessLevels: levels,
		AwarenessNote:   note,
		TLSDispositions: disp,
		TLSNote:         "passthrough: encrypted stream forwarded untouched, connection-level policy only (SNI, destination, client); terminate: upstream TLS verified first (system roots plus configured CAs, TLS >= 1.2), then the client's handshake completed with a leaf minted by the appliance CA for the SNI or destination IP — an invalid upstream certificate refuses the client handshake; plaintext: no TLS either side, warned once per route outside development routes; no TLS downgrade unless a route sets plaintext_upstream_trusted_network",
		Interception:    mechs,
		Authentication:  "never initiates an authentication flow with a client; reads only whether an Authorization header is present and its scheme, never its value, and never logs credentials",
		FailureMode:     "nftables-tproxy and iptables-redirect: while the daemon is down with steering installed (after SIGKILL), steered flows fail closed until `mcpintercept cleanup` removes the steering; an orderly stop removes it itself. ebpf: programs are attached with bpf_link and never pinned, so when the appliance dies the kernel detaches them and clients connect directly (fail-open); `cleanup` removes a cgroup a killed `exec` left",
	}
}
