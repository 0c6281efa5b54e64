package config

import (
	"net/netip"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// configTable is the whole file format: every key in the order error
// messages list them, where its value goes, its default and its own rule.
var configTable = table[Config]{
	key("mechanism", "how flows are steered into the appliance", func(c *Config) *Mechanism { return &c.Mechanism }, mechanismName).
		def(NftablesTProxy).checked(checkMechanism),

	intKey("listen.port", "port of the transparent listeners", func(c *Config) *uint16 { return &c.Listen.Port }, checkPort).
		def(DefaultPort),
	key("listen.addresses", "addresses the transparent listeners bind (default by mechanism)", func(c *Config) *[]netip.Addr { return &c.Listen.Addresses }, list(parseAddr)).
		defBy(func(c *Config) ([]netip.Addr, bool) { return DefaultAddresses(c.Mechanism), true }).
		checkedBy(unique(checkAddr, netip.Addr.String)),

	key("intercept.destinations", "prefixes whose traffic is steered", func(c *Config) *[]netip.Prefix { return &c.Intercept.Destinations }, list(parsePrefix)).
		checkedBy(each(checkPrefix)),
	key("intercept.ports", "ports (or ranges) that are steered", func(c *Config) *[]PortRange { return &c.Intercept.Ports }, list(parsePortRange)).
		checkedBy(each(checkPortRange)),
	key("intercept.local", "whether the host's own processes are steered too", func(c *Config) **bool { return &c.Intercept.Local }, ptr(boolean)).
		defBy(func(*Config) (*bool, bool) { t := true; return &t, true }),

	// Sidecar mode (inbound.go); its relations to other sections are in validate.
	key("inbound.ports", "the co-located server's ports (or ranges) whose connections from other hosts are steered (empty: inbound off)", func(c *Config) *[]PortRange { return &c.Inbound.Ports }, list(parsePortRange)).
		checkedBy(each(checkPortRange)),
	key("inbound.addresses", "the server's local addresses those connections arrive for (empty: any local address)", func(c *Config) *[]netip.Addr { return &c.Inbound.Addresses }, list(parseAddr)).
		checkedBy(unique(checkInboundAddr, netip.Addr.String)),
	intKey("inbound.listen_port", "port of the inbound transparent listener", func(c *Config) *uint16 { return &c.Inbound.ListenPort }, checkPort).
		def(DefaultInboundPort),
	key("inbound.tls.cert_file", "the server's own certificate (PEM), presented on terminate routes; relative to this file", func(c *Config) *string { return &c.Inbound.TLS.CertFile }, relFile).
		checked(checkOptionalPath),
	key("inbound.tls.key_file", "the certificate's private key (PEM); relative to this file", func(c *Config) *string { return &c.Inbound.TLS.KeyFile }, relFile).
		checked(checkOptionalPath),

	intKey("steering.mark", "firewall mark of intercepted flows", func(c *Config) *uint32 { return &c.Steering.Mark }, checkMark).
		def(DefaultMark),
	intKey("steering.bypass_mark", "firewall mark of the appliance's own upstream dials", func(c *Config) *uint32 { return &c.Steering.BypassMark }, checkMark).
		def(DefaultBypassMark),
	intKey("steering.route_table", "policy routing table of the TPROXY route", func(c *Config) *int { return &c.Steering.RouteTable }, checkRouteTable).
		def(DefaultRouteTable),
	intKey("steering.rule_priority", "priority of the policy routing rule", func(c *Config) *int { return &c.Steering.RulePriority }, checkRulePriority).
		def(DefaultRulePriority),

	key("external.original_dst", "how an external integration hands over the destination", func(c *Config) *string { return &c.External.OriginalDst }, str).
		def(OriginalDstLocalAddress).checked(checkOriginalDst),

	key("ebpf.cgroup", "cgroup v2 directory whose connects are steered (mechanism ebpf)", func(c *Config) *string { return &c.EBPF.Cgroup }, str),

	key("dns.listen", "where the DNS server answers", func(c *Config) *[]netip.AddrPort { return &c.DNS.Listen }, list(parseDNSListen)).
		checkedBy(unique(nil, netip.AddrPort.String)),
	key("dns.names", "names answered with virtual IPs", func(c *Config) *[]string { return &c.DNS.Names }, list(parseSNI)).
		checkedBy(unique(checkSNI, quote)),
	key("dns.pools.v4", "IPv4 VIP pool", func(c *Config) *netip.Prefix { return &c.DNS.Pools.V4 }, pool(false)).
		checked(poolCheck(false)),
	key("dns.pools.v6", "IPv6 VIP pool", func(c *Config) *netip.Prefix { return &c.DNS.Pools.V6 }, pool(true)).
		checked(poolCheck(true)),
	key("dns.upstream", "resolvers queried for everything else", func(c *Config) *[]netip.AddrPort { return &c.DNS.Upstream }, list(parseDNSListen)),
	key("dns.clients", "client prefixes allowed to query", func(c *Config) *[]netip.Prefix { return &c.DNS.Clients }, list(parsePrefix)).
		checkedBy(each(checkPrefix)),
	key("dns.ttl", "TTL of VIP answers", func(c *Config) *Duration { return &c.DNS.TTL }, duration).
		def(Duration{DefaultDNSTTL}).checked(durationBetween(time.Second, 24*time.Hour)),
	key("dns.hold", "how long an idle VIP stays bound to its name", func(c *Config) *Duration { return &c.DNS.Hold }, duration).
		def(Duration{DefaultDNSHold}).checked(durationBetween(time.Minute, 365*24*time.Hour)),
	key("dns.quarantine", "how long a freed VIP is not reused", func(c *Config) *Duration { return &c.DNS.Quarantine }, duration).
		def(Duration{DefaultDNSQuarantine}),
	key("dns.state_dir", "where the VIP table persists", func(c *Config) *string { return &c.DNS.StateDir }, str).
		def(DefaultDNSStateDir).checked(checkPath),
	intKey("dns.max_names", "bound of the VIP table", func(c *Config) *int { return &c.DNS.MaxNames }, checkCount).
		def(DefaultDNSMaxNames),
	key("dns.client_quota", "names one client may hold (0: derived)", func(c *Config) *int { return &c.DNS.ClientQuota }, integer[int](checkQuota)),
	key("dns.pattern_quota", "names one pattern may hold (0: derived)", func(c *Config) *int { return &c.DNS.PatternQuota }, integer[int](checkQuota)),
	intKey("dns.cache_size", "entries of the forwarder's cache", func(c *Config) *int { return &c.DNS.CacheSize }, checkCount).
		def(DefaultDNSCacheSize),
	key("dns.client_rate", "queries per second of one client", func(c *Config) *float64 { return &c.DNS.ClientRate }, rate).
		def(DefaultDNSClientRate).checked(checkRate),
	intKey("dns.client_burst", "query burst of one client", func(c *Config) *int { return &c.DNS.ClientBurst }, checkCount).
		def(DefaultDNSClientBurst),
	key("dns.timeout", "bound of one upstream exchange", func(c *Config) *Duration { return &c.DNS.Timeout }, duration).
		def(Duration{DefaultDNSTimeout}).checked(durationBetween(10*time.Millisecond, time.Minute)),
	key("dns.vip_assignment", "how a new name's VIP is chosen: sequential or hash (the same on every replica)", func(c *Config) *string { return &c.DNS.VIPAssignment }, str).
		def(DNSVIPSequential).checked(func(s string) string { return checkOneOf(s, DNSVIPSequential, DNSVIPHash) }),

	key("upstream_deny", "prefixes the appliance never dials", func(c *Config) *[]netip.Prefix { return &c.UpstreamDeny }, list(parsePrefix)).
		defBy(func(*Config) ([]netip.Prefix, bool) { return slices.Clone(DefaultUpstreamDeny), true }).
		checkedBy(each(checkPrefix)),

	key("ca.dir", "directory of the appliance's CA", func(c *Config) *string { return &c.CA.Dir }, str).
		def(DefaultCADir).checked(checkPath),

	// After ca.dir: audit.dir defaults beside it.
	key("audit.dir", "directory of the durable audit log (default: audit beside ca.dir)", func(c *Config) *string { return &c.Audit.Dir }, str).
		defBy(auditDirBeside).checked(checkControl),
	key("audit.fail", "what an audited request gets when its record cannot be written: closed or open", func(c *Config) *string { return &c.Audit.Fail }, str).
		def(AuditFailClosed).checked(func(s string) string { return checkOneOf(s, AuditFailClosed, AuditFailOpen) }),
	key("audit.timeout", "bound of one record becoming durable", func(c *Config) *Duration { return &c.Audit.Timeout }, duration).
		def(Duration{DefaultAuditTimeout}).checked(durationBetween(time.Millisecond, time.Minute)),
	key("audit.segment_bytes", "size at which the audit log moves to a new segment", func(c *Config) *int64 { return &c.Audit.SegmentBytes }, size(checkAuditSegmentBytes)).
		def(DefaultAuditSegmentBytes).checked(checkAuditSegmentBytes),
	intKey("audit.retain_segments", "segment files kept (0: all)", func(c *Config) *int { return &c.Audit.RetainSegments }, checkRetainSegments),
	key("audit.retain_age", "age after which a segment is deleted (0: never)", func(c *Config) *Duration { return &c.Audit.RetainAge }, duration).
		checked(func(d Duration) string { return checkNonNegative(d.Duration) }),
	key("audit.checkpoint_every", "how often the log's head is signed", func(c *Config) *Duration { return &c.Audit.CheckpointEvery }, duration).
		def(Duration{DefaultAuditCheckpointEvery}).checked(durationBetween(100*time.Millisecond, time.Hour)),

	issuersBlock,
	key("tokens.clock_skew", "leeway on a token's exp and nbf", func(c *Config) *Duration { return &c.Tokens.ClockSkew }, duration).
		def(Duration{DefaultClockSkew}).checked(durationBetween(0, time.Hour)),
	key("tokens.opaque_tokens", "what a bearer token that is not a JWT gets: allow, deny or introspect", func(c *Config) *string { return &c.Tokens.OpaqueTokens }, str).
		def(TokensAllow).checked(func(s string) string { return checkOneOf(s, TokensAllow, TokensDeny, TokensIntrospect) }),
	key("tokens.introspection.url", "RFC 7662 endpoint of opaque_tokens: introspect", func(c *Config) *string { return &c.Tokens.Introspection.URL }, str).
		checked(checkOptionalURL),
	key("tokens.introspection.client_id", "client id the appliance introspects as", func(c *Config) *string { return &c.Tokens.Introspection.ClientID }, str),
	key("tokens.introspection.client_secret_file", "file holding the introspection client secret", func(c *Config) *string { return &c.Tokens.Introspection.ClientSecretFile }, str).
		checked(checkOptionalPath),
	key("tokens.max_header", "bound of an Authorization header (bytes)", func(c *Config) *int64 { return &c.Tokens.MaxHeader }, size(checkTokenMaxHeader)).
		def(DefaultTokenMaxHeader).checked(checkTokenMaxHeader),
	key("tokens.record_identity", "how records carry the caller's iss and sub claims: plain, hash (SHA-256) or off", func(c *Config) *string { return &c.Tokens.RecordIdentity }, str).
		def(IdentityPlain).checked(func(s string) string { return checkOneOf(s, IdentityPlain, IdentityHash, Off) }),

	// After ca.dir: tool_integrity.dir defaults beside it.
	key("tool_integrity.dir", "directory of learned pins, quarantines and the admin token (default: tools beside ca.dir)", func(c *Config) *string { return &c.ToolIntegrity.Dir }, str).
		defBy(toolsDirBeside).checked(checkControl),
	key("tool_integrity.pin_file", "operator-reviewed pin file (tools pin --from-live writes one); relative to this file", func(c *Config) *string { return &c.ToolIntegrity.PinFile }, str).
		checked(checkOptionalPath),
	intKey("tool_integrity.max_tools", "definitions remembered over all servers", func(c *Config) *int { return &c.ToolIntegrity.MaxTools }, checkMaxTools).
		def(DefaultMaxTools),
	key("tool_integrity.divergence_window", "how long one client's sight of a definition is compared with another's", func(c *Config) *Duration { return &c.ToolIntegrity.DivergenceWindow }, duration).
		def(Duration{DefaultDivergenceWindow}).checked(durationBetween(minDivergenceWindow, maxDivergenceWindow)),
	toolPatternsBlock,

	key("telemetry.otlp.endpoint", "OTLP receiver of spans and metrics: host:port or an http(s) URL (empty: tracing off)", func(c *Config) *string { return &c.Telemetry.OTLP.Endpoint }, str).
		checked(checkOTLPEndpoint),
	key("telemetry.otlp.protocol", "OTLP transport: http/protobuf or grpc", func(c *Config) *string { return &c.Telemetry.OTLP.Protocol }, str).
		def(OTLPHTTP).checked(func(s string) string { return checkOneOf(s, OTLPHTTP, OTLPGRPC) }),
	otlpHeadersBlock,
	key("telemetry.otlp.insecure", "exports in plaintext (an http:// endpoint is plaintext anyway)", func(c *Config) *bool { return &c.Telemetry.OTLP.Insecure }, boolean),
	key("telemetry.otlp.ca_file", "PEM roots the receiver's certificate is checked against (default: system roots); relative to this file", func(c *Config) *string { return &c.Telemetry.OTLP.CAFile }, str).
		checked(checkOptionalPath),
	key("telemetry.otlp.sampling_ratio", "share of new traces recorded, 0..1 (a request with a parent follows the parent's sampled flag)", func(c *Config) *float64 { return &c.Telemetry.OTLP.SamplingRatio }, scalar(parseRatio)).
		def(1).checked(checkSamplingRatio),
	intKey("telemetry.otlp.max_queue", "spans held for export; past it spans are dropped and counted", func(c *Config) *int { return &c.Telemetry.OTLP.MaxQueue }, checkOTLPQueue).
		def(DefaultOTLPMaxQueue),
	intKey("telemetry.otlp.max_batch", "spans sent in one export", func(c *Config) *int { return &c.Telemetry.OTLP.MaxBatch }, checkOTLPQueue).
		def(DefaultOTLPMaxBatch),
	key("telemetry.otlp.interval", "how long a partial batch waits before it is sent", func(c *Config) *Duration { return &c.Telemetry.OTLP.Interval }, duration).
		def(Duration{DefaultOTLPInterval}).checked(durationBetween(10*time.Millisecond, time.Minute)),
	key("telemetry.otlp.service_name", "the resource's service.name", func(c *Config) *string { return &c.Telemetry.OTLP.ServiceName }, str).
		def(DefaultOTLPServiceName).checked(func(s string) string {
		if s == "" {
			return "must not be empty"
		}
		return checkControl(s)
	}),

	key("upstream_tls.extra_cas", "PEM files trusted besides the system roots", func(c *Config) *[]string { return &c.Upstream.ExtraCAs }, list(parseString)).
		checkedBy(each(checkPath)),
	key("upstream_tls.handshake_timeout", "bound of the upstream TLS handshake", func(c *Config) *Duration { return &c.Upstream.HandshakeTimeout }, duration).
		def(Duration{DefaultHandshakeTimeout}).checked(positive),

	key("tls.peek_timeout", "how long to wait for a client's first bytes", func(c *Config) *Duration { return &c.TLS.PeekTimeout }, duration).
		def(Duration{DefaultPeekTimeout}).checked(positive),
	intKey("tls.max_client_hello", "bound of a ClientHello (bytes)", func(c *Config) *int { return &c.TLS.MaxClientHello }, checkMaxClientHello).
		def(DefaultMaxClientHello),
	intKey("tls.leaf_cache", "minted leaves kept", func(c *Config) *int { return &c.TLS.LeafCache }, checkCount).
		def(DefaultLeafCache),
	key("tls.leaf_validity", "lifetime of a minted leaf", func(c *Config) *Duration { return &c.TLS.LeafValidity }, duration).
		def(Duration{DefaultLeafValidity}).checked(func(d Duration) string { return checkLeafValidity(d.Duration) }),

	intKey("http.max_header_bytes", "bound of a request head", func(c *Config) *int { return &c.HTTP.MaxHeaderBytes }, checkMaxHeaderBytes).
		def(DefaultMaxHeaderBytes),
	key("http.header_timeout", "bound of a request head's arrival", func(c *Config) *Duration { return &c.HTTP.HeaderTimeout }, duration).
		def(Duration{DefaultHeaderTimeout}).checked(positive),

	routesBlock,
	defaultRouteBlock,
	ruleSetsBlock,

	intKey("limits.max_flows", "flows open at once", func(c *Config) *int { return &c.Limits.MaxFlows }, checkCount).
		def(DefaultMaxFlows),
	intKey("limits.max_flows_per_client", "flows one client may hold open", func(c *Config) *int { return &c.Limits.MaxFlowsPerClient }, checkCount).
		defBy(func(c *Config) (int, bool) {
			// Clamped so that lowering only max_flows does not make the
			// untouched default invalid.
			if c.Limits.MaxFlows >= 1 && c.Limits.MaxFlows < DefaultMaxFlowsPerClient {
				return c.Limits.MaxFlows, true
			}
			return DefaultMaxFlowsPerClient, true
		}),
	key("limits.idle_timeout", "how long a flow may stay silent", func(c *Config) *Duration { return &c.Limits.IdleTimeout }, duration).
		def(Duration{DefaultIdleTimeout}).checked(positive),
	key("limits.body_timeout", "bound of a request body's arrival (Level 1)", func(c *Config) *Duration { return &c.Limits.BodyTimeout }, duration).
		def(Duration{DefaultBodyTimeout}).checked(positive),
	key("limits.connect_timeout", "bound of an upstream connect", func(c *Config) *Duration { return &c.Limits.ConnectTimeout }, duration).
		def(Duration{DefaultConnectTimeout}).checked(positive),
	key("limits.drain_timeout", "how long open flows may finish on shutdown", func(c *Config) *Duration { return &c.Limits.DrainTimeout }, duration).
		def(Duration{DefaultDrainTimeout}).checked(func(d Duration) string { return checkNonNegative(d.Duration) }),

	key("admin.listen", "host:port of the admin endpoint, or off", func(c *Config) *string { return &c.Admin.Listen }, str).
		def(DefaultAdminListen).checked(checkAdminListen),
	key("admin.hosts", "other names or addresses the admin endpoint answers to as Host (others get 421)", func(c *Config) *[]string { return &c.Admin.Hosts }, list(parseAdminHost)).
		checkedBy(unique(checkAdminHost, quote)),

	key("log.level", "debug, info, warn or error", func(c *Config) *string { return &c.Log.Level }, str).
		def(DefaultLogLevel).checked(checkLogLevel),
	key("log.format", "operational log format: text or json", func(c *Config) *string { return &c.Log.Format }, str).
		def(LogText).checked(func(s string) string { return checkOneOf(s, LogFormats...) }),
	key("log.flows", "where the flow log goes: stdout, off or a file", func(c *Config) *string { return &c.Log.Flows }, str).
		def(FlowsStdout).checked(checkLogFlows),
	// Rotation applies to a file only; an explicit flows_max_size: 0 leaves it to logrotate.
	key("log.flows_max_size", "size at which the flow log file rotates (0: never)", func(c *Config) *int64 { return &c.Log.FlowsMaxSize }, size(checkFlowsMaxSize)).
		defBy(func(c *Config) (int64, bool) { return DefaultFlowsMaxSize, c.Log.FlowsFile() }),
	key("log.flows_max_files", "rotated flow log files kept", func(c *Config) *int { return &c.Log.FlowsMaxFiles }, integer[int](checkFlowsMaxFiles)).
		defBy(func(c *Config) (int, bool) { return DefaultFlowsMaxFiles, c.Log.FlowsFile() && c.Log.FlowsMaxSize > 0 }),

	// The federation endpoint (federation.go); its relations to other sections are in validate.
	key("federation.listen", "host:port (an IP address or localhost) of the aggregate MCP endpoint (empty: federation off)", func(c *Config) *string { return &c.Federation.Listen }, str).
		checked(checkFederationListen),
	key("federation.tls.cert_file", "the endpoint's certificate (PEM; unset: plaintext); relative to this file", func(c *Config) *string { return &c.Federation.TLS.CertFile }, relFile).
		checked(checkOptionalPath),
	key("federation.tls.key_file", "the certificate's private key (PEM); relative to this file", func(c *Config) *string { return &c.Federation.TLS.KeyFile }, relFile).
		checked(checkOptionalPath),
	key("federation.development", "allows a plaintext endpoint on a non-loopback address", func(c *Config) *bool { return &c.Federation.Development }, boolean),
	key("federation.refresh", "how often every downstream's catalog is fetched again", func(c *Config) *Duration { return &c.Federation.Refresh }, duration).
		def(Duration{DefaultFederationRefresh}).checked(durationBetween(minFederationRefresh, maxFederationRefresh)),
	key("federation.rule_set", "the rule set judging list entries and calls (empty: allow all)", func(c *Config) *string { return &c.Federation.RuleSet }, str),
	key("federation.tool_pins", "pins every downstream's tool definitions: off, learn or enforce (a quarantined tool is not published)", func(c *Config) *string { return &c.Federation.ToolPins }, scalar(parseToolPins)).
		def(Off),
	key("federation.token_audience", "checks a bearer token's audience (the endpoint's canonical URI) before reading a request: on or off", func(c *Config) *string { return &c.Federation.TokenAudience }, scalar(parseOnOff)).
		def(On),
	intKey("federation.limits.pages", "tools/list pages followed per downstream and refresh", func(c *Config) *int { return &c.Federation.Limits.Pages }, checkFederationPages).
		def(DefaultFederationPages),
	intKey("federation.limits.tools", "tools in one downstream's catalog", func(c *Config) *int { return &c.Federation.Limits.Tools }, checkFederationTools).
		def(DefaultFederationTools),
	key("federation.limits.bytes", "bytes of one downstream's catalog, all pages and discovery", func(c *Config) *int64 { return &c.Federation.Limits.Bytes }, size(checkFederationBytes)).
		def(DefaultFederationBytes).checked(checkFederationBytes),
	key("federation.limits.result_bytes", "bound of one call's response body (past it: uncertain after dispatch)", func(c *Config) *int64 { return &c.Federation.Limits.ResultBytes }, size(checkFederationBytes)).
		def(DefaultFederationResultBytes).checked(checkFederationBytes),
	key("federation.limits.request_bytes", "bound of one request body a client sends the endpoint (413 past it)", func(c *Config) *int64 { return &c.Federation.Limits.RequestBytes }, size(checkFederationBytes)).
		def(DefaultFederationRequestBytes).checked(checkFederationBytes),
	intKey("federation.aggregate_limits.tools", "tools published over all downstreams", func(c *Config) *int { return &c.Federation.AggregateLimits.Tools }, checkFederationAggregate).
		def(DefaultFederationAggregate),
	federationDownstreamsBlock,
}

var mechanismName = scalar(func(n *yaml.Node) (Mechanism, string) {
	s, msg := parseString(n)
	return Mechanism(s), msg
})

// pool decodes a VIP pool prefix of the given family; an empty string is no
// pool of this family (how an unset pool is written back).
func pool(v6 bool) func(*decoder, *yaml.Node, string) (netip.Prefix, bool) {
	return scalar(func(n *yaml.Node) (netip.Prefix, string) {
		if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!str" && strings.TrimSpace(n.Value) == "" {
			return netip.Prefix{}, ""
		}
		p, msg := parsePrefix(n)
		if msg == "" {
			msg = checkPool(p, v6)
		}
		return p, msg
	})
}

func poolCheck(v6 bool) func(netip.Prefix) string {
	return func(p netip.Prefix) string {
		if !p.IsValid() {
			return ""
		}
		return checkPool(p, v6)
	}
}

func positive(d Duration) string { return checkPositive(d.Duration) }

func durationBetween(lo, hi time.Duration) func(Duration) string {
	return func(d Duration) string { return checkBetween(d.Duration, lo, hi) }
}

// applyDefaults fills every key for which given reports false. It works on
// presence rather than zero values so that an explicit 0 in the file is
// validated instead of silently replaced.
func applyDefaults(c *Config, given func(key string) bool) {
	configTable.fill(c, "", given)
}
