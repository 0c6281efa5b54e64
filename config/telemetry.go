package config

import (
	"fmt"
	"math"
	"net"
	"net/url"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// TelemetryConfig is the appliance's OpenTelemetry: spans of MCP calls and the
// mcp.client.operation.duration metric exported over OTLP. Off unless otlp.endpoint is set.
type TelemetryConfig struct {
	OTLP OTLPConfig `yaml:"otlp"`
}

// OTLPConfig is telemetry.otlp: where spans and metrics are exported. The config package does not
// import the tracing package; the appliance turns these values into tracing.Config.
type OTLPConfig struct {
	// Endpoint is the receiver: host:port or an http(s) URL (a base such as
	// http://collector:4318, or the traces URL itself ending in /v1/traces). "" is off.
	Endpoint string `yaml:"endpoint"`
	// Protocol is OTLPHTTP (http/protobuf) or OTLPGRPC.
	Protocol string `yaml:"protocol"`
	// Headers are sent with every export (an API key, a tenant); never logged or declared.
	Headers map[string]string `yaml:"headers,omitempty"`
	// Insecure exports in plaintext (an http:// endpoint is plaintext anyway).
	Insecure bool `yaml:"insecure"`
	// CAFile holds the PEM roots the receiver's certificate is checked against (default: the
	// system roots). Relative to the config file.
	CAFile string `yaml:"ca_file"`
	// SamplingRatio is the share of new traces recorded, 0..1; a request that carries a parent
	// follows its parent's sampled flag.
	SamplingRatio float64 `yaml:"sampling_ratio"`
	// MaxQueue bounds the spans held for export; past it spans are dropped (and counted), so
	// that a slow or dead receiver never slows the traffic.
	MaxQueue int `yaml:"max_queue"`
	// MaxBatch is the spans sent in one export.
	MaxBatch int `yaml:"max_batch"`
	// Interval is how long a partial batch waits before it is sent.
	Interval Duration `yaml:"interval"`
	// ServiceName is the resource's service.name.
	ServiceName string `yaml:"service_name"`
}

// On reports whether spans are exported.
func (t TelemetryConfig) On() bool { return t.OTLP.Endpoint != "" }

// Values of telemetry.otlp.protocol.
const (
	OTLPHTTP = "http/protobuf"
	OTLPGRPC = "grpc"
)

// Values of Route.TracePropagation.
const (
	// TraceRecord records the span and forwards the request's trace context unchanged.
	TraceRecord = "record"
	// TraceInject makes the appliance's span the parent of the server's: the request sent
	// upstream carries it in traceparent (and params._meta when the client put one there).
	TraceInject = "inject"
)

// Defaults and bounds of telemetry.otlp.
const (
	DefaultOTLPMaxQueue    = 2048
	DefaultOTLPMaxBatch    = 512
	DefaultOTLPInterval    = 5 * time.Second
	DefaultOTLPServiceName = "mcpintercept"
	maxOTLPQueue           = 1 << 20
	maxOTLPHeaders         = 64
	maxOTLPHeaderBytes     = 8 << 10
)

// TraceInjectOn reports whether the route makes its spans the parents of the server's.
func (r Route) TraceInjectOn() bool { return r.TracePropagation == TraceInject && r.seesHTTP() }

func checkOTLPQueue(n int64) string { return between(n, 1, maxOTLPQueue) }

func checkSamplingRatio(r float64) string {
	if math.IsNaN(r) || r < 0 || r > 1 {
		return fmt.Sprintf("must be between 0 and 1 (the share of new traces recorded), got %v", r)
	}
	return ""
}

// parseRatio reads a number 0..1 (an integer 0 or 1 too).
func parseRatio(n *yaml.Node) (float64, string) {
	var r float64
	switch {
	case n.Kind == yaml.ScalarNode && n.ShortTag() == "!!int":
		i, msg := parseInt(n)
		if msg != "" {
			return 0, msg
		}
		r = float64(i)
	case n.Kind == yaml.ScalarNode && n.ShortTag() == "!!float":
		if err := n.Decode(&r); err != nil {
			return 0, fmt.Sprintf("invalid number %s", quote(n.Value))
		}
	default:
		return 0, "expected a number between 0 and 1 such as 0.25, got " + describe(n)
	}
	return r, checkSamplingRatio(r)
}

// checkOTLPEndpoint accepts host:port or an http(s) URL with a host, as the tracing package
// reads them.
func checkOTLPEndpoint(s string) string {
	if s == "" {
		return ""
	}
	if msg := checkControl(s); msg != "" {
		return msg
	}
	if strings.Contains(s, "://") {
		u, err := url.Parse(s)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Sprintf("must be host:port or an http(s) URL such as http://collector:4318, got %s", quote(s))
		}
		if u.User != nil {
			return "must not carry credentials in the URL: put them in telemetry.otlp.headers"
		}
		return ""
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil || host == "" || port == "" {
		return fmt.Sprintf("must be host:port or an http(s) URL such as http://collector:4318, got %s", quote(s))
	}
	return ""
}

// checkHeaderName is RFC 9110's token; a gRPC metadata key must also be lower-case ASCII, which
// the exporter folds to.
func checkHeaderName(s string) string {
	if s == "" {
		return "a header name must not be empty"
	}
	for _, c := range []byte(s) {
		if c <= ' ' || c >= 0x7f || strings.IndexByte("\"(),/:;<=>?@[\\]{}", c) >= 0 {
			return fmt.Sprintf("header name %s: not an HTTP token", quote(s))
		}
	}
	return ""
}

// checkHeaderValue refuses what cannot go in a header; the value itself is never shown.
func checkHeaderValue(s string) string {
	for _, c := range []byte(s) {
		if (c < ' ' && c != '\t') || c == 0x7f {
			return "the value contains a control character (not shown)"
		}
	}
	return ""
}

// otlpHeadersBlock is telemetry.otlp.headers: a mapping of header names to values.
var otlpHeadersBlock = block[Config]{
	path: "telemetry.otlp.headers", doc: "headers sent with every export, e.g. an API key (never logged)",
	decodeFn: func(d *decoder, c *Config, v *yaml.Node, key string) bool {
		if isNull(v) {
			return true
		}
		if v.Kind != yaml.MappingNode {
			d.fail(v, key, "expected a mapping of header names to values, got "+describe(v))
			return false
		}
		out := map[string]string{}
		ok := true
		d.pairs(v, key, func(kn, vn *yaml.Node, k string) {
			if !d.count(kn, k, 1) {
				ok = false
				return
			}
			d.keys[k], d.vals[k] = kn, vn
			s, msg := parseString(vn)
			if msg != "" {
				d.fail(vn, k, msg)
				d.bad[k] = true
				ok = false
				return
			}
			out[kn.Value] = s
		})
		if len(out) > 0 {
			c.Telemetry.OTLP.Headers = out
		}
		return ok
	},
	checkFn: func(v *validator, c *Config, key string) {
		h := c.Telemetry.OTLP.Headers
		if len(h) > maxOTLPHeaders {
			v.check(key, fmt.Sprintf("at most %d headers, got %d", maxOTLPHeaders, len(h)))
		}
		n := 0
		for name, val := range h {
			k := join(key, segment(name))
			n += len(name) + len(val)
			v.check(k, checkHeaderName(name))
			v.check(k, checkHeaderValue(val))
		}
		if n > maxOTLPHeaderBytes {
			v.check(key, fmt.Sprintf("at most %d bytes of headers, got %d", maxOTLPHeaderBytes, n))
		}
		if len(h) > 0 && c.Telemetry.OTLP.Endpoint == "" {
			v.checkAlt(key, "telemetry.otlp.endpoint", "headers without an endpoint: set telemetry.otlp.endpoint (tracing is off without it)")
		}
	},
}

// telemetry relates the otlp keys to one another.
func (v *validator) telemetry(c *Config) {
	o := c.Telemetry.OTLP
	if o.MaxBatch > o.MaxQueue && checkOTLPQueue(int64(o.MaxQueue)) == "" {
		v.checkAlt("telemetry.otlp.max_batch", "telemetry.otlp.max_queue", fmt.Sprintf("must not exceed max_queue (%d): a batch is taken from the queue", o.MaxQueue))
	}
	if o.Endpoint == "" {
		return
	}
	if strings.HasPrefix(o.Endpoint, "http://") && o.CAFile != "" {
		v.checkAlt("telemetry.otlp.ca_file", "telemetry.otlp.endpoint", "the endpoint is plaintext (http://): a CA file is only for https or TLS host:port")
	}
	if o.Insecure && o.CAFile != "" {
		v.checkAlt("telemetry.otlp.ca_file", "telemetry.otlp.insecure", "insecure exports in plaintext: a CA file is only for TLS")
	}
}

// traceRoute relates a route's trace_propagation to its disposition and level.
func (v *validator) traceRoute(key string, r Route, ok bool) {
	if r.TracePropagation != TraceInject || !ok {
		return
	}
	k := key + ".trace_propagation"
	switch {
	case r.TLS == TLSPassthrough:
		v.checkAlt(k, key+".tls", "inject needs a route that reads HTTP (tls terminate or plaintext): a passthrough route cannot add a header to an encrypted stream")
	case r.LevelOrDefault() < 1:
		v.checkAlt(k, key+".level", "inject needs level 1 or more: a level 0 route does not read the requests it would carry the trace context in")
	}
}
