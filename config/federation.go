package config

import "time"

// FederationConfig is the federation path (Conduit's): one local MCP endpoint that publishes the
// tools of configured downstream MCP servers as one aggregate, `<downstream-id>.<tool>`, and
// dispatches each call to the exact downstream it was published for, its authorization durable in
// the audit log before the downstream sees a byte. Off while Listen is "".
type FederationConfig struct {
	// Listen is host:port of the Streamable HTTP endpoint (path /mcp); "" leaves federation off.
	Listen string `yaml:"listen"`
	// TLS serves the endpoint over TLS with this certificate and key (files, PEM); unset serves
	// plaintext, which a non-loopback Listen refuses unless Development is set.
	TLS FederationTLS `yaml:"tls"`
	// Development allows a plaintext endpoint on a non-loopback address.
	Development bool `yaml:"development"`
	// Refresh is how often every downstream's catalog is fetched again.
	Refresh Duration `yaml:"refresh"`
	// RuleSet names an entry of rule_sets judging list entries and calls ("" allows all).
	RuleSet string `yaml:"rule_set"`
	// Limits bound one downstream's catalog; AggregateLimits the published aggregate.
	Limits          FederationLimits          `yaml:"limits"`
	AggregateLimits FederationAggregateLimits `yaml:"aggregate_limits"`
	// Downstreams are the servers aggregated, each under its id.
	Downstreams []FederationDownstream `yaml:"downstreams"`
}

// FederationTLS is the federation endpoint's own certificate.
type FederationTLS struct {
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
}

// FederationLimits bound what one downstream may make the appliance read.
type FederationLimits struct {
	Pages int   `yaml:"pages"` // tools/list pages followed per refresh
	Tools int   `yaml:"tools"` // tools in one downstream's catalog
	Bytes int64 `yaml:"bytes"` // bytes of one downstream's catalog (all pages, discovery included)
	// ResultBytes bounds one call's response body (a larger one is uncertain-after-dispatch).
	ResultBytes int64 `yaml:"result_bytes"`
	// RequestBytes bounds one request body the ingress accepts from a client (413 past it).
	RequestBytes int64 `yaml:"request_bytes"`
}

// FederationAggregateLimits bound the published aggregate.
type FederationAggregateLimits struct {
	Tools int `yaml:"tools"`
}

// FederationDownstream is one aggregated server.
type FederationDownstream struct {
	// ID prefixes its tools' names: lower-case letters, digits, '-' and '_' (never '.', the
	// separator), unique.
	ID string `yaml:"id"`
	// URL is its Streamable HTTP endpoint, http or https; calls go to exactly this URL.
	URL string `yaml:"url"`
	// Headers are sent on every request to it (discovery and calls), never anything the client
	// sent: each a literal Value or the contents of File (a credential; trailing newline cut,
	// re-read on every refresh and SIGHUP).
	Headers map[string]FederationHeader `yaml:"headers"`
	// HeaderOrder lists Headers' names in file order (the map loses it).
	HeaderOrder []string `yaml:"-"`
	// CAFile is PEM roots its certificate is checked against (default: the system roots and
	// upstream_tls.extra_cas). Relative to the config file.
	CAFile string `yaml:"ca_file"`
	// Timeout bounds one call (and one discovery request): past it the call is
	// uncertain-after-dispatch.
	Timeout Duration `yaml:"timeout"`
}

// FederationHeader is one configured header value: Value, or the contents of File.
type FederationHeader struct {
	Value string `yaml:"value"`
	File  string `yaml:"file"`
}

// Defaults of the federation section.
const (
	DefaultFederationRefresh      = 60 * time.Second
	DefaultFederationPages        = 8
	DefaultFederationTools        = 1000
	DefaultFederationBytes        = 4 << 20
	DefaultFederationResultBytes  = 4 << 20
	DefaultFederationRequestBytes = 1 << 20
	DefaultFederationAggregate    = 5000
	DefaultFederationTimeout      = 30 * time.Second
)

// FederationOn reports whether the federation endpoint is configured.
func (c *Config) FederationOn() bool { return c.Federation.Listen != "" }
