package config

import (
	"fmt"
	"net/netip"
	"strconv"
	"time"

	"go.yaml.in/yaml/v3"
)

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
	DefaultCADir                    = "/var/lib/mcpintercept/ca"
	DefaultHandshakeTimeout         = 10 * time.Second
	DefaultPeekTimeout              = 5 * time.Second
	// DefaultMaxClientHello fits any ClientHello seen in practice, post-quantum
	// key shares included, with room to spare.
	DefaultMaxClientHello = 65536
	DefaultLeafCache      = 1024
	// DefaultLeafValidity is short because leaves are minted on demand and
	// cost nothing to replace, while a leaked one is valid until it expires.
	DefaultLeafValidity   = 24 * time.Hour
	DefaultMaxHeaderBytes = 65536
	DefaultHeaderTimeout  = 10 * time.Second
	// DefaultBodyTimeout bounds the arrival of one request body on a Level 1
	// route; it is far below DefaultIdleTimeout so that a sender trickling a
	// byte at a time cannot hold a flow (and a max_flows slot) for minutes.
	DefaultBodyTimeout = 60 * time.Second
	// DefaultRateLimitKeys is how many distinct keys (token buckets) one
	// rate_limit rule keeps.
	DefaultRateLimitKeys = 10000
	// DefaultFlowsMaxSize × (DefaultFlowsMaxFiles + 1) bounds a flow log file and its rotated
	// files: 600 MiB, some 1.5 million requests at ~410 bytes each.
	DefaultFlowsMaxSize  = 100 << 20
	DefaultFlowsMaxFiles = 5
)

// Bounds of the TLS, HTTP and certificate settings.
const (
	minClientHello  = 512 // smaller than any real ClientHello
	maxClientHello  = 1 << 20
	minHeaderBytes  = 1024
	maxHeaderBytes  = 1 << 20
	minLeafValidity = time.Hour
	// maxLeafValidity is the longest lifetime macOS and iOS accept for a
	// TLS server certificate (and the old CA/Browser Forum limit).
	maxLeafValidity = 825 * 24 * time.Hour
	// maxRateLimitKeys bounds the memory one rate_limit rule can hold.
	maxRateLimitKeys = 1_000_000
)

// Values of Route.TLS: the three dispositions of the draft ("TLS Considerations").
const (
	TLSPassthrough = "passthrough"
	TLSTerminate   = "terminate"
	TLSPlaintext   = "plaintext"
)

// Values of Route.OnOversizedResponse.
const (
	OnOversizedClose   = "close"
	OnOversizedForward = "forward"
)

// DefaultMaxBody is a level 2 route's body bound (MCP messages are small; 4 MiB leaves room for
// a large tool result).
const DefaultMaxBody = 4 << 20

// Values of Route.OnMismatch. Parse fills OnMismatchClose on routes of
// level 1 and OnMismatchPassthrough on level 0 routes when the key is absent.
const (
	OnMismatchPassthrough = "passthrough" // forward the bytes opaquely, uninspected
	OnMismatchClose       = "close"       // reset the flow
)

// Values of Route.OnRuleError.
const (
	// OnRuleErrorClosed makes a deny or rate_limit rule whose expression
	// fails to evaluate decide deny (the default).
	OnRuleErrorClosed = "closed"
	// OnRuleErrorOpen skips such a rule, as if its when did not match.
	OnRuleErrorOpen = "open"
)

// Route.AllowUpgrade tokens with a meaning beyond the Upgrade header.
const (
	// UpgradeConnect allows the CONNECT method (a tunnel), which is not an
	// Upgrade but hands the connection over all the same.
	UpgradeConnect = "connect"
	// UpgradeH2C is refused on Level 1 routes: after the switch the
	// requests are HTTP/2 frames, which Level 1 cannot read.
	UpgradeH2C = "h2c"
)

// Values of Rule.Action.
const (
	ActionAllow     = "allow"
	ActionDeny      = "deny"
	ActionRateLimit = "rate_limit"
	// ActionRedact hides what the rule's redact block selects in the messages it matches
	// (level 2); it decides nothing, later rules still do.
	ActionRedact = "redact"
)

// Config is the whole appliance configuration.
type Config struct {
	Path      string    `yaml:"-"` // the file it was loaded from ("" when built in code)
	Mechanism Mechanism `yaml:"mechanism"`
	Listen    Listen    `yaml:"listen"`
	Intercept Intercept `yaml:"intercept"`
	// Inbound is Sidecar mode: connections from other hosts for the co-located server's ports.
	Inbound  Inbound        `yaml:"inbound"`
	Steering Steering       `yaml:"steering"`
	External ExternalConfig `yaml:"external"`
	EBPF     EBPFConfig     `yaml:"ebpf"`
	DNS      DNSConfig      `yaml:"dns"`
	// UpstreamDeny lists the prefixes the appliance never dials, whatever
	// the mechanism (DNS rebinding, SSRF to the host or the cloud metadata
	// service); DefaultUpstreamDeny when absent, nothing when [].
	UpstreamDeny []netip.Prefix `yaml:"upstream_deny"`
	CA           CAConfig       `yaml:"ca"`
	Audit        AuditConfig    `yaml:"audit"`
	Tokens       TokensConfig   `yaml:"tokens"`
	// ToolIntegrity is where and how definitions are pinned on routes with tool_pins.
	ToolIntegrity ToolIntegrityConfig `yaml:"tool_integrity"`
	// Telemetry is OpenTelemetry: spans and the operation-duration metric over OTLP.
	Telemetry TelemetryConfig `yaml:"telemetry"`
	Upstream  UpstreamTLS     `yaml:"upstream_tls"`
	TLS       TLSConfig       `yaml:"tls"`
	HTTP      HTTPConfig      `yaml:"http"`
	// Routes are tried in order; the first whose match holds decides a flow.
	Routes []Route `yaml:"routes"`
	// DefaultRoute treats the flows no route matches; nil forwards them
	// opaque (level 0), as an explicit `default_route: opaque` does.
	DefaultRoute *DefaultRoute     `yaml:"default_route,omitempty"`
	RuleSets     map[string][]Rule `yaml:"rule_sets"`
	// RuleSetOrder names every rule set once, in file order, which the map
	// loses; compiling in this order reports rule errors top to bottom.
	RuleSetOrder []string `yaml:"-"`
	Limits       Limits   `yaml:"limits"`
	Admin        Admin    `yaml:"admin"`
	Log          Log      `yaml:"log"`
	// Federation is the aggregate MCP endpoint over configured downstream servers (Conduit's path).
	Federation FederationConfig `yaml:"federation"`
	// NodeAgent is `mcpintercept node-agent`'s own section (Kubernetes pods); run ignores it.
	NodeAgent NodeAgentConfig `yaml:"node_agent"`
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

// EBPFConfig configures the ebpf mechanism.
type EBPFConfig struct {
	// Cgroup is the cgroup v2 directory whose processes (and their
	// descendants) are steered. Required when the mechanism is ebpf; ignored
	// otherwise, so one file can serve several mechanisms.
	Cgroup string `yaml:"cgroup"`
}

// DNSConfig configures the dns mechanism: the appliance's DNS server answers
// the names it intercepts with virtual IPs (VIPs) from its pools and forwards
// every other query to the upstream resolvers. Ignored by other mechanisms, so
// one file can serve several.
type DNSConfig struct {
	// Listen is where the DNS server answers, UDP and TCP (port 53 when a
	// bare address is given).
	Listen []netip.AddrPort `yaml:"listen"`
	// Names are intercepted: exact lower-case names or "*.suffix" (one or
	// more labels in front of suffix), as route sni patterns are written.
	Names []string `yaml:"names"`
	Pools DNSPools `yaml:"pools"`
	// Upstream resolvers, tried in order: forwarded queries, and the names
	// behind VIPs when the appliance dials.
	Upstream []netip.AddrPort `yaml:"upstream"`
	// Clients may query; anyone else is answered REFUSED (never an open
	// resolver).
	Clients []netip.Prefix `yaml:"clients"`
	// TTL of VIP answers (and of the NODATA answers for intercepted names).
	TTL Duration `yaml:"ttl"`
	// Hold is how long a VIP stays bound to its name after it was last
	// answered or dialled; then it is freed.
	Hold Duration `yaml:"hold"`
	// Quarantine is how long a freed VIP is not given to another name; it
	// must exceed ttl + limits.idle_timeout (clients may still hold the
	// answer, and a flow may still be starting). When the pool, max_names or
	// a quota is full, the least recently used VIP with no open flow and no
	// answer or dial for longer than the quarantine is recycled before hold
	// runs out (a VIP is never re-mapped under an open flow).
	Quarantine Duration `yaml:"quarantine"`
	// StateDir holds the VIP table across restarts. Relative paths are
	// resolved like ca.dir.
	StateDir string `yaml:"state_dir"`
	// MaxNames bounds the VIP table (live and quarantined entries).
	MaxNames int `yaml:"max_names"`
	// ClientQuota bounds the names one client (address; IPv6 per /64) may
	// hold bound, so that one client's flood of wildcard names cannot take
	// the pool from the others; a query for a new name over it is answered
	// REFUSED (its older idle names are recycled first). PatternQuota bounds
	// one dns.names pattern the same way. 0 (the default): derived from the
	// smallest pool, capped by max_names: an eighth (at least 4) per client,
	// half per pattern when there are several patterns. Raise client_quota
	// when clients query through a shared resolver (it is one client here).
	ClientQuota  int `yaml:"client_quota"`
	PatternQuota int `yaml:"pattern_quota"`
	// CacheSize bounds the forwarder's answer cache (entries).
	CacheSize int `yaml:"cache_size"`
	// ClientRate and ClientBurst bound the queries of one client address
	// (token bucket, queries per second); the excess is dropped.
	ClientRate  float64 `yaml:"client_rate"`
	ClientBurst int     `yaml:"client_burst"`
	// Timeout bounds one upstream exchange.
	Timeout Duration `yaml:"timeout"`
	// VIPAssignment is how a new name's VIP is chosen: sequential (the
	// default) or hash, a function of the name and the pool, so that
	// replicas behind ECMP or a load balancer give a name the same VIP
	// (README, "Scale-out").
	VIPAssignment string `yaml:"vip_assignment"`
}

// dns.vip_assignment values.
const (
	DNSVIPSequential = "sequential"
	DNSVIPHash       = "hash"
)

// DNSPools are the VIP pools; at least one is required with mechanism dns.
// Without V6, AAAA queries for intercepted names are answered NODATA.
type DNSPools struct {
	V4 netip.Prefix `yaml:"v4"`
	V6 netip.Prefix `yaml:"v6"`
}

// MarshalYAML leaves an unset pool empty rather than writing "invalid Prefix".
func (p DNSPools) MarshalYAML() (any, error) {
	s := func(x netip.Prefix) string {
		if !x.IsValid() {
			return ""
		}
		return x.String()
	}
	return map[string]string{"v4": s(p.V4), "v6": s(p.V6)}, nil
}

// Defaults of the dns section.
const (
	DefaultDNSTTL         = 30 * time.Second
	DefaultDNSHold        = 24 * time.Hour
	DefaultDNSQuarantine  = time.Hour
	DefaultDNSStateDir    = "/var/lib/mcpintercept/dns"
	DefaultDNSMaxNames    = 65536
	DefaultDNSCacheSize   = 10000
	DefaultDNSClientRate  = 200
	DefaultDNSClientBurst = 400
	DefaultDNSTimeout     = 2 * time.Second
)

// DefaultUpstreamDeny is upstream_deny when the file does not set it. The
// cloud metadata addresses come first so that a refusal names them. IPv6
// forms that carry an IPv4 address (NAT64 64:ff9b::/96 and 64:ff9b:1::/48,
// 6to4 2002::/16, Teredo, IPv4-compatible ::a.b.c.d, IPv4-mapped and
// -translated) need no entry: the dialer checks the IPv4 address they embed
// against the IPv4 entries (upstream.DenyList.Check). The dns mechanism adds
// its VIP pools.
//
//	prefix                why
//	169.254.169.254/32    metadata: AWS, GCP, Azure, OCI, OpenStack, DigitalOcean, Hetzner, ...
//	fd00:ec2::254/128     metadata: AWS IMDS over IPv6 (Nitro)
//	fd20:ce::254/128      metadata: GCP metadata server over IPv6 (IPv6-only VMs)
//	100.100.100.200/32    metadata: Alibaba Cloud ECS (not link-local: CGNAT space)
//	192.0.0.192/32        metadata: Oracle Cloud Classic
//	168.63.129.16/32      Azure WireServer (host agent: goal state, certificates)
//	0.0.0.0/8             "this network": 0.0.0.0 connects to the local host on Linux
//	127.0.0.0/8           loopback: the appliance's own admin and services
//	169.254.0.0/16        IPv4 link-local (AWS ECS task metadata 169.254.170.2, ...)
//	::/128                unspecified: connects to the local host
//	::1/128               loopback
//	fe80::/10             IPv6 link-local
//	fec0::/10             IPv6 site-local (deprecated by RFC 3879, still routed by some stacks)
var DefaultUpstreamDeny = []netip.Prefix{
	netip.MustParsePrefix("169.254.169.254/32"),
	netip.MustParsePrefix("fd00:ec2::254/128"),
	netip.MustParsePrefix("fd20:ce::254/128"),
	netip.MustParsePrefix("100.100.100.200/32"),
	netip.MustParsePrefix("192.0.0.192/32"),
	netip.MustParsePrefix("168.63.129.16/32"),
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("127.0.0.0/8"),
	netip.MustParsePrefix("169.254.0.0/16"),
	netip.MustParsePrefix("::/128"),
	netip.MustParsePrefix("::1/128"),
	netip.MustParsePrefix("fe80::/10"),
	netip.MustParsePrefix("fec0::/10"),
}

// CAConfig locates the appliance's own certificate authority, which signs the
// leaves presented to clients on tls: terminate routes.
type CAConfig struct {
	// Dir holds the CA key and certificate. Parse resolves a relative path
	// against the directory of the config file, so the file means the same
	// whatever directory the daemon starts in; the result is still relative
	// when the config path was.
	Dir string `yaml:"dir"`
}

// UpstreamTLS configures the appliance's TLS client towards the original
// destination on tls: terminate routes.
type UpstreamTLS struct {
	// ExtraCAs are PEM files trusted in addition to the system roots.
	// Relative paths are resolved like CAConfig.Dir. Their existence is not
	// checked here: files can appear after the config is written, and the
	// daemon reports a missing one when it loads them.
	ExtraCAs         []string `yaml:"extra_cas"`
	HandshakeTimeout Duration `yaml:"handshake_timeout"`
}

// TLSConfig bounds ClientHello handling and leaf minting.
type TLSConfig struct {
	// PeekTimeout is how long to wait for a client's first bytes when a route
	// needs them (SNI, or telling TLS from plaintext).
	PeekTimeout    Duration `yaml:"peek_timeout"`
	MaxClientHello int      `yaml:"max_client_hello"` // bytes
	LeafCache      int      `yaml:"leaf_cache"`       // minted leaves kept
	LeafValidity   Duration `yaml:"leaf_validity"`
}

// HTTPConfig bounds the Level 1 request reader.
type HTTPConfig struct {
	MaxHeaderBytes int      `yaml:"max_header_bytes"`
	HeaderTimeout  Duration `yaml:"header_timeout"`
}

// Pos is where an expression's text starts in the config file, so that the
// policy package can turn CEL's (line, column) inside the expression into a
// file position: file line = Line + CEL line - 1, file column = Column + CEL
// column (0-based). Lines and columns are 1-based and count characters.
//
//   - Plain scalar: the first character of the expression.
//   - Double- or single-quoted scalar: one column after the opening quote,
//     i.e. again the first character of the text.
//   - Block scalar (| or >): the first content line (the line after the
//     header, even when it is blank, because CEL counts that line too) and
//     the column where the block's indentation ends, which is the same on
//     every line of the block.
//
// Only literal block scalars keep the expression's own line breaks. In a
// multi-line plain or quoted scalar, and a folded (>) block, YAML folds the
// lines into one, and an escape sequence in a double-quoted scalar is shorter
// in the expression than in the file, so a position after the first fold or
// escape is approximate. A tag or anchor before the value is skipped. Pos is
// the zero value when the expression was not read from a file.
type Pos struct {
	File         string
	Line, Column int
}

// Limits bound resource use so that a flood degrades service instead of the host.
type Limits struct {
	MaxFlows          int      `yaml:"max_flows"`
	MaxFlowsPerClient int      `yaml:"max_flows_per_client"`
	IdleTimeout       Duration `yaml:"idle_timeout"`
	// BodyTimeout is how long one request body may take to arrive in full
	// on a Level 1 route, so that a slow sender cannot hold a flow for the
	// whole idle timeout.
	BodyTimeout    Duration `yaml:"body_timeout"`
	ConnectTimeout Duration `yaml:"connect_timeout"`
	DrainTimeout   Duration `yaml:"drain_timeout"`
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
	// Hosts are names (or addresses) the listener answers to besides localhost, loopback, its
	// own address and Listen's host: a request whose Host names none of them is refused (DNS
	// rebinding). The name Prometheus scrapes the listener by, an address it is NATed to.
	Hosts []string `yaml:"hosts"`
}

// Log configures logging.
type Log struct {
	Level string `yaml:"level"` // debug|info|warn|error
	// Format is the operational log's format (stderr, the journal): LogText (slog's key=value
	// lines) or LogJSON (one JSON object a line). The flow log is JSON lines either way.
	Format string `yaml:"format"`
	Flows  string `yaml:"flows"` // FlowsStdout, Off, or a file path
	// FlowsMaxSize and FlowsMaxFiles are the flow log file's built-in rotation (a file only):
	// past FlowsMaxSize bytes the file becomes FLOWS.1 (FLOWS.1 becomes FLOWS.2, …) and at most
	// FlowsMaxFiles rotated files are kept. FlowsMaxSize 0 turns it off, leaving rotation to
	// logrotate (SIGUSR1 reopens the file).
	FlowsMaxSize  int64 `yaml:"flows_max_size,omitempty"`
	FlowsMaxFiles int   `yaml:"flows_max_files,omitempty"`
}

// FlowsFile reports whether Flows names a file (rather than FlowsStdout or Off).
func (l Log) FlowsFile() bool { return l.Flows != FlowsStdout && l.Flows != Off && l.Flows != "" }

// MarshalYAML writes the rotation keys for a file only, and flows_max_size even when it is 0
// (which turns the default rotation off), so that a written-out config reads back the same.
func (l Log) MarshalYAML() (any, error) {
	out := struct {
		Level         string `yaml:"level"`
		Format        string `yaml:"format"`
		Flows         string `yaml:"flows"`
		FlowsMaxSize  *int64 `yaml:"flows_max_size,omitempty"`
		FlowsMaxFiles int    `yaml:"flows_max_files,omitempty"`
	}{Level: l.Level, Format: l.Format, Flows: l.Flows, FlowsMaxFiles: l.FlowsMaxFiles}
	if l.FlowsFile() {
		out.FlowsMaxSize = &l.FlowsMaxSize
	}
	return out, nil
}

// The operational log formats (log.format).
const (
	LogText = "text"
	LogJSON = "json"
)

// LogFormats lists the accepted Log.Format values.
var LogFormats = []string{LogText, LogJSON}

// LogLevels lists the accepted Log.Level values.
var LogLevels = []string{"debug", "info", "warn", "error"}

// Overrides come from the command line and win over the file.
type Overrides struct {
	Mechanism Mechanism // "" keeps the file's value
	// Exec loads a file for `mcpintercept exec`, which steers a cgroup of its own with eBPF: a
	// file without `mechanism` is read as ebpf, and ebpf.cgroup is not required.
	Exec bool
}

// Default returns a config with every default applied for mechanism m.
// Intercept.Destinations and Intercept.Ports have no sensible default, so the
// caller must fill them before the config validates, except for ebpf, where
// empty means every (non-loopback) destination and every port, and which
// instead needs EBPF.Cgroup.
func Default(m Mechanism) *Config {
	c := &Config{Mechanism: m}
	applyDefaults(c, func(key string) bool { return key == "mechanism" })
	return c
}
