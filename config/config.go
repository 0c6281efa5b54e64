package config

import (
	"fmt"
	"net/netip"
	"strconv"
	"time"

	"go.yaml.in/yaml/v3"
)

// Mechanism names how flows are steered into the appliance. The names are a
// user-facing contract: they appear in config files, flags, logs and `declare`.
type Mechanism string

const (
	NftablesTProxy   Mechanism = "nftables-tproxy"
	IptablesRedirect Mechanism = "iptables-redirect"
	// EBPF is reserved so that configs and `declare` can name it, but this
	// build cannot steer with it yet, so Validate rejects it.
	EBPF Mechanism = "ebpf"
	// DNS is reserved like EBPF.
	DNS      Mechanism = "dns"
	External Mechanism = "external"
)

// Mechanisms lists every known mechanism name (used in error messages and `declare`).
var Mechanisms = []Mechanism{NftablesTProxy, IptablesRedirect, EBPF, DNS, External}

// Known reports whether m is one of Mechanisms, available or not.
func (m Mechanism) Known() bool {
	// A switch rather than a scan of Mechanisms, which callers could modify.
	switch m {
	case NftablesTProxy, IptablesRedirect, EBPF, DNS, External:
		return true
	}
	return false
}

// Available reports whether this build can steer with m.
func (m Mechanism) Available() bool {
	return m.Known() && m != EBPF && m != DNS
}

// Values of ExternalConfig.OriginalDst.
const (
	// OriginalDstLocalAddress is for integrations that deliver flows the way
	// TPROXY does: the accepted socket's local address is the destination.
	OriginalDstLocalAddress = "local-address"
	// OriginalDstSOOriginalDst is for integrations that NAT the flow the way
	// REDIRECT does, so the destination must be read back from conntrack.
	OriginalDstSOOriginalDst = "so-original-dst"
)

// Off disables Admin.Listen or Log.Flows; FlowsStdout is the default Log.Flows.
const (
	Off         = "off"
	FlowsStdout = "stdout"
)

// Defaults that do not depend on the mechanism.
const (
	DefaultPort uint16 = 15001
	DefaultMark uint32 = 0x4d49 // "MI"
	// DefaultBypassMark is "MP" in the high half: 0x4d50 would share bits
	// 0x4d40 with DefaultMark, which Validate forbids.
	DefaultBypassMark        uint32 = 0x4d500000
	DefaultRouteTable               = 4915
	DefaultRulePriority             = 4915
	DefaultMaxFlows                 = 10000
	DefaultMaxFlowsPerClient        = 512
	DefaultIdleTimeout              = 5 * time.Minute
	DefaultConnectTimeout           = 5 * time.Second
	DefaultDrainTimeout             = 10 * time.Second
	DefaultAdminListen              = "127.0.0.1:9464"
	DefaultLogLevel                 = "info"
)

// Config is the whole appliance configuration.
type Config struct {
	Path      string         `yaml:"-"` // the file it was loaded from ("" when built in code)
	Mechanism Mechanism      `yaml:"mechanism"`
	Listen    Listen         `yaml:"listen"`
	Intercept Intercept      `yaml:"intercept"`
	Steering  Steering       `yaml:"steering"`
	External  ExternalConfig `yaml:"external"`
	Limits    Limits         `yaml:"limits"`
	Admin     Admin          `yaml:"admin"`
	Log       Log            `yaml:"log"`
}

// Listen is where the transparent listeners bind.
type Listen struct {
	Port uint16 `yaml:"port"`
	// Addresses defaults by mechanism because TPROXY delivers to a loopback
	// listener while REDIRECT rewrites the destination to the primary address
	// of the incoming interface, which only a wildcard listener is sure to own.
	// An external integration's choice cannot be guessed, so it must be given.
	Addresses []netip.Addr `yaml:"addresses"`
}

// Intercept selects which flows are steered.
type Intercept struct {
	Destinations []netip.Prefix `yaml:"destinations"`
	Ports        []PortRange    `yaml:"ports"`
	// Local is a pointer so that an explicit false survives defaulting.
	Local *bool `yaml:"local"`
}

// LocalEnabled reports whether the appliance host's own processes are steered
// too; unset means yes.
func (i Intercept) LocalEnabled() bool {
	return i.Local == nil || *i.Local
}

// PortRange is an inclusive range of TCP ports; a single port has From == To.
type PortRange struct{ From, To uint16 }

// String returns "8080" or "3000-3010", the same spelling the file accepts.
func (p PortRange) String() string {
	if p.From == p.To {
		return strconv.Itoa(int(p.From))
	}
	return fmt.Sprintf("%d-%d", p.From, p.To)
}

// Contains reports whether port lies in the range.
func (p PortRange) Contains(port uint16) bool {
	return p.From <= port && port <= p.To
}

// MarshalYAML writes a single port as an integer so a marshalled config
// reads like a hand-written one.
func (p PortRange) MarshalYAML() (any, error) {
	if p.From == p.To {
		return int(p.From), nil
	}
	return p.String(), nil
}

// UnmarshalYAML accepts the same forms as a config file.
func (p *PortRange) UnmarshalYAML(n *yaml.Node) error {
	r, msg := parsePortRange(n)
	if msg != "" {
		return fmt.Errorf("line %d: %s", n.Line, msg)
	}
	*p = r
	return nil
}

// Steering holds the kernel identifiers the installers use.
type Steering struct {
	Mark uint32 `yaml:"mark"`
	// BypassMark must share no bit with Mark: installers may match either
	// with a mask, and a shared bit would let upstream dials be intercepted
	// again (a loop) or intercepted flows skip the listener.
	BypassMark   uint32 `yaml:"bypass_mark"`
	RouteTable   int    `yaml:"route_table"`
	RulePriority int    `yaml:"rule_priority"`
}

// ExternalConfig describes an integration that steers flows itself.
type ExternalConfig struct {
	OriginalDst string `yaml:"original_dst"`
}

// Limits bound resource use so that a flood degrades service instead of the host.
type Limits struct {
	MaxFlows          int      `yaml:"max_flows"`
	MaxFlowsPerClient int      `yaml:"max_flows_per_client"`
	IdleTimeout       Duration `yaml:"idle_timeout"`
	ConnectTimeout    Duration `yaml:"connect_timeout"`
	DrainTimeout      Duration `yaml:"drain_timeout"`
}

// Duration is a time.Duration spelled "5s" or "1m30s" in YAML; a bare
// integer is rejected (except 0) because its unit would be a guess.
type Duration struct{ time.Duration }

// MarshalYAML writes the same spelling the file accepts.
func (d Duration) MarshalYAML() (any, error) {
	return d.String(), nil
}

// UnmarshalYAML accepts the same forms as a config file.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	v, msg := parseDuration(n)
	if msg != "" {
		return fmt.Errorf("line %d: %s", n.Line, msg)
	}
	d.Duration = v
	return nil
}

// Admin configures the admin HTTP endpoint (metrics, health, declaration).
type Admin struct {
	Listen string `yaml:"listen"` // host:port, or Off
}

// Log configures logging.
type Log struct {
	Level string `yaml:"level"` // debug|info|warn|error
	Flows string `yaml:"flows"` // FlowsStdout, Off, or a file path
}

// LogLevels lists the accepted Log.Level values.
var LogLevels = []string{"debug", "info", "warn", "error"}

// Overrides come from the command line and win over the file.
type Overrides struct {
	Mechanism Mechanism // "" keeps the file's value
}

// Default returns a config with every default applied for mechanism m.
// Intercept.Destinations and Intercept.Ports have no sensible default, so the
// caller must fill them before the config validates.
func Default(m Mechanism) *Config {
	c := &Config{Mechanism: m}
	applyDefaults(c, func(key string) bool { return key == "mechanism" })
	return c
}

// DefaultAddresses returns the listen addresses used when the file gives
// none, or nil when m has no default (external, unknown).
func DefaultAddresses(m Mechanism) []netip.Addr {
	switch m {
	case NftablesTProxy:
		return []netip.Addr{netip.AddrFrom4([4]byte{127, 0, 0, 1}), netip.IPv6Loopback()}
	case IptablesRedirect:
		return []netip.Addr{netip.IPv4Unspecified(), netip.IPv6Unspecified()}
	}
	return nil
}

// applyDefaults fills every key for which set reports false. It works on
// presence rather than zero values so that an explicit 0 in the file is
// validated instead of silently replaced.
func applyDefaults(c *Config, set func(key string) bool) {
	if !set("mechanism") {
		c.Mechanism = NftablesTProxy
	}
	if !set("listen.port") {
		c.Listen.Port = DefaultPort
	}
	if !set("listen.addresses") {
		c.Listen.Addresses = DefaultAddresses(c.Mechanism)
	}
	if !set("intercept.local") {
		t := true
		c.Intercept.Local = &t
	}
	if !set("steering.mark") {
		c.Steering.Mark = DefaultMark
	}
	if !set("steering.bypass_mark") {
		c.Steering.BypassMark = DefaultBypassMark
	}
	if !set("steering.route_table") {
		c.Steering.RouteTable = DefaultRouteTable
	}
	if !set("steering.rule_priority") {
		c.Steering.RulePriority = DefaultRulePriority
	}
	if !set("external.original_dst") {
		c.External.OriginalDst = OriginalDstLocalAddress
	}
	if !set("limits.max_flows") {
		c.Limits.MaxFlows = DefaultMaxFlows
	}
	if !set("limits.max_flows_per_client") {
		// Clamped so that lowering only max_flows does not make the
		// untouched default invalid.
		c.Limits.MaxFlowsPerClient = DefaultMaxFlowsPerClient
		if c.Limits.MaxFlows >= 1 && c.Limits.MaxFlows < DefaultMaxFlowsPerClient {
			c.Limits.MaxFlowsPerClient = c.Limits.MaxFlows
		}
	}
	if !set("limits.idle_timeout") {
		c.Limits.IdleTimeout = Duration{DefaultIdleTimeout}
	}
	if !set("limits.connect_timeout") {
		c.Limits.ConnectTimeout = Duration{DefaultConnectTimeout}
	}
	if !set("limits.drain_timeout") {
		c.Limits.DrainTimeout = Duration{DefaultDrainTimeout}
	}
	if !set("admin.listen") {
		c.Admin.Listen = DefaultAdminListen
	}
	if !set("log.level") {
		c.Log.Level = DefaultLogLevel
	}
	if !set("log.flows") {
		c.Log.Flows = FlowsStdout
	}
}
