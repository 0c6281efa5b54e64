package config

import (
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

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
	// ToolPins pins the downstreams' tool definitions (tool integrity): off (default), learn or
	// enforce; a quarantined definition (changed since pinned, or unpinned under enforce) is not
	// published.
	ToolPins string `yaml:"tool_pins"`
	// TokenAudience (on by default) refuses a bearer token whose audience is not the endpoint's
	// canonical URI (or a tokens.issuers audience) with 401 before the request is read.
	TokenAudience string `yaml:"token_audience"`
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

// Bounds of the federation section.
const (
	minFederationRefresh   = time.Second
	maxFederationRefresh   = 24 * time.Hour
	maxFederationPages     = 1000
	maxFederationTools     = 100_000
	minFederationBytes     = 1 << 10
	maxFederationBytes     = 256 << 20
	maxFederationAggregate = 1_000_000
	minFederationTimeout   = 100 * time.Millisecond
	maxFederationTimeout   = 10 * time.Minute
	// maxFederationHeaders bounds the configured headers of one downstream.
	maxFederationHeaders = 64
)

// federationReservedHeaders are the headers the dispatcher sets on every request to a downstream
// (framing, content negotiation, the MCP session and per-call headers, trace context): a
// configured one would contradict the appliance's, so none may be configured. Lower case.
var federationReservedHeaders = []string{
	"host", "content-length", "content-type", "accept", "transfer-encoding", "connection",
	"mcp-session-id", "mcp-method", "mcp-name", "mcp-protocol-version", "last-event-id",
	"traceparent", "tracestate",
}

// federationID is a downstream id: it prefixes the published names, `<id>.<tool>`.
var federationID = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)

// HeaderNames lists Headers' names in file order (HeaderOrder), then any HeaderOrder misses (a
// downstream built in code), sorted.
func (ds FederationDownstream) HeaderNames() []string {
	var names []string
	for _, n := range ds.HeaderOrder {
		if _, ok := ds.Headers[n]; ok && !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	var rest []string
	for n := range ds.Headers {
		if !slices.Contains(names, n) {
			rest = append(rest, n)
		}
	}
	slices.Sort(rest)
	return append(names, rest...)
}

// MarshalYAML writes the headers in file order (a map would be sorted), each as the one key it
// was given, so that a written-out config reads back the same.
func (ds FederationDownstream) MarshalYAML() (any, error) {
	type plain FederationDownstream // without this method
	p := plain(ds)
	p.Headers = nil
	n := &yaml.Node{}
	if err := n.Encode(p); err != nil {
		return nil, err
	}
	h := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
	for _, name := range ds.HeaderNames() {
		v := &yaml.Node{}
		if err := v.Encode(ds.Headers[name]); err != nil {
			return nil, err
		}
		h.Content = append(h.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: name}, v)
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == "headers" {
			n.Content[i+1] = h
		}
	}
	return n, nil
}

// MarshalYAML writes value or file, whichever is set.
func (h FederationHeader) MarshalYAML() (any, error) {
	return struct {
		Value string `yaml:"value,omitempty"`
		File  string `yaml:"file,omitempty"`
	}{h.Value, h.File}, nil
}

// relFile decodes a file path relative to the config file. It is resolved here, where the
// decoder knows the file, rather than in resolvePaths: the same rule (a relative path is joined
// to the file's directory, an absolute one and "" stay, nothing is resolved without a file name),
// applied to list entries as well as to the section's own keys.
func relFile(d *decoder, v *yaml.Node, key string) (string, bool) {
	s, ok := str(d, v, key)
	if ok && s != "" && d.file != "" && !filepath.IsAbs(s) {
		s = filepath.Join(filepath.Dir(d.file), s)
	}
	return s, ok
}

// federationHeaderTable is the schema of one configured header.
var federationHeaderTable = table[FederationHeader]{
	key("value", "the header's value", func(h *FederationHeader) *string { return &h.Value }, str),
	key("file", "a file holding the value, e.g. a token (trailing newline cut, re-read on refresh and SIGHUP); relative to this file", func(h *FederationHeader) *string { return &h.File }, relFile),
}

// federationHeadersBlock is a downstream's headers: a mapping of header names to {value: …} or
// {file: …}.
var federationHeadersBlock = block[FederationDownstream]{
	path: "headers", doc: "headers sent on every request to the downstream, each {value: …} or {file: …}",
	decodeFn: func(d *decoder, ds *FederationDownstream, v *yaml.Node, key string) bool {
		if v.Kind != yaml.MappingNode {
			d.fail(v, key, "expected a mapping of header names to {value: …} or {file: …}, got "+describe(v))
			return false
		}
		out := map[string]FederationHeader{}
		var order []string
		ok := true
		d.pairs(v, key, func(kn, vn *yaml.Node, k string) {
			if !d.count(kn, k, 1) {
				ok = false
				return
			}
			// A problem with the name points at the name.
			d.keys[k], d.vals[k] = kn, kn
			if vn.Kind != yaml.MappingNode {
				d.fail(vn, k, "expected {value: …} or {file: …} (e.g. {file: /etc/mcpintercept/token}), got "+describe(vn))
				d.bad[k] = true
				ok = false
				return
			}
			var h FederationHeader
			if !d.mappingSuggesting(vn, k, federationHeaderTable.fields(d, &h, "")) {
				d.bad[k] = true
				ok = false
			}
			out[kn.Value] = h
			order = append(order, kn.Value)
		})
		if len(out) > 0 {
			ds.Headers, ds.HeaderOrder = out, order
		}
		return ok
	},
	checkFn: func(v *validator, ds *FederationDownstream, key string) {
		if len(ds.Headers) > maxFederationHeaders {
			v.check(key, fmt.Sprintf("at most %d headers, got %d", maxFederationHeaders, len(ds.Headers)))
		}
		first := map[string]string{} // lower-cased name -> the name as first written
		for _, name := range ds.HeaderNames() {
			k := join(key, segment(name))
			lower := strings.ToLower(name)
			switch prev, dup := first[lower]; {
			case checkHeaderName(name) != "":
				v.check(k, checkHeaderName(name))
			case slices.Contains(federationReservedHeaders, lower):
				v.check(k, fmt.Sprintf("header %s is set by the appliance per call; it cannot be configured", quote(name)))
			case dup:
				v.check(k, fmt.Sprintf("duplicate header %s (also %s: header names are case-insensitive)", quote(name), quote(prev)))
			default:
				first[lower] = name
			}
			h := ds.Headers[name]
			switch {
			case h.Value != "" && h.File != "":
				v.check(k+".file", "value and file are exclusive: give the value, or the file holding it")
			case h.Value == "" && h.File == "":
				v.check(k, "needs value or file: the header's value (not empty), or the file holding it, e.g. {file: /etc/mcpintercept/token}")
			}
			v.check(k+".value", checkFederationHeaderValue(h.Value))
			v.check(k+".file", checkOptionalPath(h.File))
		}
	},
}

// checkFederationHeaderValue refuses what cannot go in a header (CR, LF and NUL would split or
// end it; Go's HTTP client refuses the other control characters too); the value itself is never
// shown, since it is often a credential.
func checkFederationHeaderValue(s string) string {
	if strings.ContainsAny(s, "\r\n\x00") {
		return "the value contains CR, LF or NUL (not shown): it would split the request's header"
	}
	return checkHeaderValue(s)
}

// federationDownstreamTable is the schema of one entry of federation.downstreams.
var federationDownstreamTable = table[FederationDownstream]{
	key("id", "prefixes its tools' published names (<id>.<tool>): a-z, 0-9, '-', '_'", func(ds *FederationDownstream) *string { return &ds.ID }, str),
	key("url", "its Streamable HTTP endpoint, http or https; calls go to exactly this URL", func(ds *FederationDownstream) *string { return &ds.URL }, str),
	federationHeadersBlock,
	key("ca_file", "PEM roots its certificate is checked against (default: system roots and upstream_tls.extra_cas); relative to this file", func(ds *FederationDownstream) *string { return &ds.CAFile }, relFile).
		checked(checkOptionalPath),
	key("timeout", "bound of one call and one discovery request", func(ds *FederationDownstream) *Duration { return &ds.Timeout }, duration).
		def(Duration{DefaultFederationTimeout}).checked(durationBetween(minFederationTimeout, maxFederationTimeout)),
}

// federationDownstreamsBlock is federation.downstreams.
var federationDownstreamsBlock = block[Config]{
	path: "federation.downstreams", doc: "the MCP servers aggregated, each published under its id",
	decodeFn: func(d *decoder, c *Config, v *yaml.Node, key string) bool {
		out, ok := entriesWith(d, v, key, "downstreams", federationDownstreamTable, func(*FederationDownstream, *yaml.Node) {}, d.mappingSuggesting)
		c.Federation.Downstreams = out
		return ok
	},
	fillFn: func(c *Config, key string, given func(string) bool) {
		for i := range c.Federation.Downstreams {
			federationDownstreamTable.fill(&c.Federation.Downstreams[i], fmt.Sprintf("%s[%d]", key, i), given)
		}
	},
	checkFn: func(v *validator, c *Config, key string) {
		ids := map[string]int{}
		for i := range c.Federation.Downstreams {
			ds := &c.Federation.Downstreams[i]
			k := fmt.Sprintf("%s[%d]", key, i)
			federationDownstreamTable.check(v, ds, k)
			switch j, dup := ids[ds.ID]; {
			case checkFederationID(ds.ID) != "":
				v.check(k+".id", checkFederationID(ds.ID))
			case dup:
				v.check(k+".id", fmt.Sprintf("duplicate id %s (also %s[%d])", quote(ds.ID), key, j))
			default:
				ids[ds.ID] = i
			}
			urlMsg := checkFederationURL(ds.URL)
			v.check(k+".url", urlMsg)
			if urlMsg == "" && ds.CAFile != "" && strings.HasPrefix(strings.ToLower(ds.URL), "http://") {
				v.checkAlt(k+".ca_file", k+".url", "the url is plaintext (http://): a CA file is only for https")
			}
		}
	},
}

// mappingSuggesting is mapping that names the valid key an unknown one is a typo of.
func (d *decoder) mappingSuggesting(n *yaml.Node, path string, fields []field) bool {
	refused := map[string]string{}
	if n.Kind == yaml.MappingNode {
		names := make([]string, len(fields))
		for i, f := range fields {
			names[i] = f.name
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			kn := deref(n.Content[i])
			if kn.Kind != yaml.ScalarNode || slices.Contains(names, kn.Value) {
				continue
			}
			if s := closest(kn.Value, names); s != "" {
				refused[kn.Value] = fmt.Sprintf("unknown key %s (did you mean %s? valid: %s)", quote(kn.Value), s, fieldNames(fields))
			}
		}
	}
	return d.mappingRefusing(n, path, fields, refused)
}

// closest is the candidate s is most likely a typo of: at most one edit away (a letter added,
// dropped, changed, or two swapped; case ignored) for a short name, two for a longer one; "" when
// none is that close.
func closest(s string, candidates []string) string {
	best, bestD := "", 3
	for _, c := range candidates {
		limit := 2
		if len(c) <= 4 {
			limit = 1
		}
		if d := editDistance(strings.ToLower(s), strings.ToLower(c)); d <= limit && d < bestD {
			best, bestD = c, d
		}
	}
	return best
}

// editDistance is the optimal string alignment distance between a and b (bytes), giving up past
// 3: only the small distances matter.
func editDistance(a, b string) int {
	if len(a)-len(b) > 3 || len(b)-len(a) > 3 || len(a) > 64 {
		return 4
	}
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}

func checkFederationID(s string) string {
	switch {
	case s == "":
		return "required: the downstream's id, which prefixes its tools' names (<id>.<tool>), e.g. files"
	case strings.Contains(s, "."):
		return fmt.Sprintf("invalid id %s: '.' separates the id from the tool name in published names (<id>.<tool>), so an id cannot contain one; use '-' or '_'", quote(s))
	case !federationID.MatchString(s):
		return fmt.Sprintf("invalid id %s: lower-case letters, digits, '-' and '_', starting with a letter or digit, at most 63 characters", quote(s))
	}
	return ""
}

// checkFederationURL accepts an absolute http or https URL with a host. Credentials belong in
// headers, where they are never logged with the URL; a fragment is never sent.
func checkFederationURL(s string) string {
	const want = "an absolute http or https URL such as https://files.example/mcp"
	if s == "" {
		return "required: the downstream's Streamable HTTP endpoint, " + want
	}
	if msg := checkControl(s); msg != "" {
		return msg
	}
	u, err := url.Parse(s)
	switch {
	case err != nil || u.Scheme != "http" && u.Scheme != "https":
		return fmt.Sprintf("must be %s, got %s", want, quote(s))
	case u.User != nil:
		return "must not carry credentials (user information) in the URL: put them in headers, e.g. Authorization: {file: /etc/mcpintercept/files.token}"
	case u.Opaque != "" || u.Hostname() == "":
		return fmt.Sprintf("must be %s (with a host), got %s", want, quote(s))
	case u.Fragment != "" || strings.Contains(s, "#"):
		return "must not have a fragment (#…): it is never sent to the server"
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.ParseUint(p, 10, 16); err != nil || n == 0 {
			return fmt.Sprintf("port %s must be a number between 1 and 65535", quote(p))
		}
	}
	return ""
}

// checkFederationListen accepts "" (off) or host:port, the host an IP address or localhost.
func checkFederationListen(s string) string {
	if s == "" {
		return ""
	}
	if msg := checkControl(s); msg != "" {
		return msg
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Sprintf(`must be host:port such as 127.0.0.1:8765 or "[::1]:8765" ("" leaves federation off), got %s`, quote(s))
	}
	if p, err := strconv.ParseUint(port, 10, 16); err != nil || p == 0 {
		return fmt.Sprintf("port %s must be a number between 1 and 65535", quote(port))
	}
	switch a, err := netip.ParseAddr(host); {
	case host == "localhost":
	case host == "":
		return "needs a host: an IP address or localhost (for every address, say so: 0.0.0.0 or \"[::]\")"
	case err != nil:
		return fmt.Sprintf("host %s must be an IP address or localhost (a name could resolve elsewhere)", quote(host))
	case a.Zone() != "":
		return fmt.Sprintf("host %s: an address with a zone is not supported", quote(host))
	}
	return ""
}

// federationLoopback reports whether a valid listen is on loopback only.
func federationLoopback(listen string) bool {
	host, _, _ := net.SplitHostPort(listen)
	a, err := netip.ParseAddr(host)
	return host == "localhost" || err == nil && a.Unmap().IsLoopback()
}

func checkFederationBytes(n int64) string {
	if n < minFederationBytes || n > maxFederationBytes {
		return fmt.Sprintf("must be between 1KiB (%d) and 256MiB (%d), got %d", int64(minFederationBytes), int64(maxFederationBytes), n)
	}
	return ""
}

func checkFederationPages(n int64) string     { return between(n, 1, maxFederationPages) }
func checkFederationTools(n int64) string     { return between(n, 1, maxFederationTools) }
func checkFederationAggregate(n int64) string { return between(n, 1, maxFederationAggregate) }

// federation relates the federation section to the rest of the file. The table checks each key's
// own value whether or not the endpoint is on; with listen "" (off) nothing else is required.
func (v *validator) federation(c *Config) {
	f := c.Federation
	switch {
	case f.TLS.CertFile != "" && f.TLS.KeyFile == "":
		v.check("federation.tls.key_file", "required with cert_file: the certificate's private key (PEM)")
	case f.TLS.CertFile == "" && f.TLS.KeyFile != "":
		v.check("federation.tls.cert_file", "required with key_file: the endpoint's certificate (PEM)")
	}
	if f.Listen == "" || checkFederationListen(f.Listen) != "" {
		return
	}
	if f.TLS == (FederationTLS{}) && !f.Development && !federationLoopback(f.Listen) {
		v.check("federation.listen", "not a loopback address, and federation.tls is not set: clients' calls and the tokens they carry would cross the network in plaintext; set tls (cert_file and key_file), listen on 127.0.0.1 or \"[::1]\", or set development: true")
	}
	if len(f.Downstreams) == 0 {
		v.checkAlt("federation.downstreams", "federation.listen", "required with federation.listen: at least one downstream, e.g. [{id: files, url: https://files.example/mcp}]")
	}
	if _, ok := c.RuleSets[f.RuleSet]; f.RuleSet != "" && !ok {
		v.check("federation.rule_set", c.unknownRuleSet(f.RuleSet))
	}
	if c.Audit.Fail == AuditFailOpen {
		v.checkAlt("audit.fail", "federation.listen", "must be closed while federation.listen is set: federation records every call durably before dispatching it, and open would let a call whose record could not be written reach the downstream")
	}
	if c.Audit.Dir == "" {
		v.checkAlt("federation.listen", "audit.dir", "needs audit.dir: federation records every call durably before dispatching it")
	}
}

// unknownRuleSet says that name is no rule set, naming the one it is likely a typo of.
func (c *Config) unknownRuleSet(name string) string {
	names := c.ruleSetNames()
	if len(names) == 0 {
		return fmt.Sprintf("unknown rule set %s: rule_sets defines none", quote(name))
	}
	hint := ""
	if s := closest(name, names); s != "" {
		hint = fmt.Sprintf("did you mean %s? ", quote(s))
	}
	for i, n := range names {
		names[i] = quote(n)
	}
	return fmt.Sprintf("unknown rule set %s (%sdefined: %s)", quote(name), hint, strings.Join(names, ", "))
}
