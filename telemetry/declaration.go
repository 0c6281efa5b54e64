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

// Declare assembles the declaration for the mechanisms given. What this build implements is fixed
// here, in one place, so that `declare` and /declaration cannot disagree.
func Declare(mechs []Interception) Declaration {
	return Declaration{
		Implementation: "mcpintercept",
		Version:        Version,
		ModeSet:        []string{"Transparent"},
		Tier:           "Tier 1",
		TierLayers:     "Layer 1 (Transport)",
		// Level 1 (header awareness) and Level 2 (body awareness) are not in this build: every flow
		// is forwarded as opaque bytes, which the flow log records as level 0.
		AwarenessLevels: []int{},
		AwarenessNote:   "opaque forwarding only (flow log level 0): no HTTP header or body is read or changed",
		TLSDispositions: []string{"passthrough"},
		TLSNote:         "every stream, encrypted or not, is forwarded without decryption; no certificate is presented and no CA trust change is required",
		Interception:    mechs,
		Authentication:  "never initiates an authentication flow with a client; reads no credentials",
		FailureMode:     "nftables-tproxy and iptables-redirect: while the daemon is down with steering installed (after SIGKILL), steered flows fail closed until `mcpintercept cleanup` removes the steering; an orderly stop removes it itself",
	}
}
