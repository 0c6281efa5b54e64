package config

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestTelemetryValid(t *testing.T) {
	tests := []struct {
		name  string
		src   string
		check func(t *testing.T, c *Config)
	}{
		{
			name: "defaults: off, http/protobuf, ratio 1, 2048/512, 5s, mcpintercept",
			src:  minimal,
			check: func(t *testing.T, c *Config) {
				o := c.Telemetry.OTLP
				if c.Telemetry.On() || o.Protocol != OTLPHTTP || o.SamplingRatio != 1 || o.MaxQueue != 2048 || o.MaxBatch != 512 ||
					o.Interval.Duration != 5*time.Second || o.ServiceName != "mcpintercept" || o.Headers != nil || o.Insecure || o.CAFile != "" {
					t.Errorf("telemetry = %+v", o)
				}
			},
		},
		{
			name: "every key; ca_file relative to the file; an explicit ratio 0 kept",
			src: minimal + "telemetry:\n  otlp:\n    endpoint: collector:4317\n    protocol: grpc\n    headers: {x-api-key: secret-1, X-Tenant: a}\n" +
				"    insecure: false\n    ca_file: ca.pem\n    sampling_ratio: 0\n    max_queue: 100\n    max_batch: 100\n    interval: 250ms\n    service_name: edge\n",
			check: func(t *testing.T, c *Config) {
				o := c.Telemetry.OTLP
				if !c.Telemetry.On() || o.Endpoint != "collector:4317" || o.Protocol != OTLPGRPC || o.SamplingRatio != 0 ||
					o.MaxQueue != 100 || o.MaxBatch != 100 || o.Interval.Duration != 250*time.Millisecond || o.ServiceName != "edge" ||
					o.CAFile != filepath.Join("conf", "ca.pem") || len(o.Headers) != 2 || o.Headers["x-api-key"] != "secret-1" || o.Headers["X-Tenant"] != "a" {
					t.Errorf("telemetry = %+v", o)
				}
				roundTrip(t, c)
			},
		},
		{
			name: "URL endpoint, ratio 0.5 and 1 (an integer)",
			src:  minimal + "telemetry: {otlp: {endpoint: 'http://127.0.0.1:4318/otlp', sampling_ratio: 1}}\n",
			check: func(t *testing.T, c *Config) {
				if c.Telemetry.OTLP.Endpoint != "http://127.0.0.1:4318/otlp" || c.Telemetry.OTLP.SamplingRatio != 1 {
					t.Errorf("telemetry = %+v", c.Telemetry.OTLP)
				}
			},
		},
		{
			name: "trace_propagation: record filled where HTTP is read, inject kept",
			src: withRoutes + "  - {name: a, tls: terminate, level: 1, trace_propagation: inject}\n" +
				"  - {name: b, tls: plaintext, level: 2}\n" +
				"  - {name: c, tls: passthrough}\n" +
				"  - {name: d, tls: plaintext, level: 0, development: true, trace_propagation: record}\n",
			check: func(t *testing.T, c *Config) {
				got := ""
				for _, r := range c.Routes {
					got += r.Name + ":" + r.TracePropagation + " "
				}
				if want := "a:inject b:record c: d:record "; got != want {
					t.Errorf("routes %q, want %q", got, want)
				}
				if !c.Routes[0].TraceInjectOn() || c.Routes[1].TraceInjectOn() || c.Routes[2].TraceInjectOn() {
					t.Error("TraceInjectOn wrong")
				}
			},
		},
		{
			name: "default_route takes trace_propagation",
			src:  minimal + "default_route: {tls: plaintext, level: 2, trace_propagation: inject}\n",
			check: func(t *testing.T, c *Config) {
				if !c.DefaultRoute.Route.TraceInjectOn() {
					t.Errorf("default_route = %+v", c.DefaultRoute.Route)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse("conf/test.yaml", []byte(tt.src), Overrides{})
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if err := c.Validate(); err != nil {
				t.Fatalf("Validate after Parse: %v", err)
			}
			tt.check(t, c)
		})
	}
}

func TestTelemetryErrors(t *testing.T) {
	tests := []struct {
		name string
		src  string
		want []wantErr
	}{
		{name: "endpoint without port", src: minimal + "telemetry: {otlp: {endpoint: collector}}\n",
			want: []wantErr{{4, "telemetry.otlp.endpoint", "must be host:port or an http(s) URL"}}},
		{name: "endpoint scheme", src: minimal + "telemetry: {otlp: {endpoint: 'grpc://collector:4317'}}\n",
			want: []wantErr{{4, "telemetry.otlp.endpoint", "must be host:port or an http(s) URL"}}},
		{name: "endpoint with credentials", src: minimal + "telemetry: {otlp: {endpoint: 'https://u:p@collector'}}\n",
			want: []wantErr{{4, "telemetry.otlp.endpoint", "must not carry credentials"}}},
		{name: "protocol", src: minimal + "telemetry: {otlp: {endpoint: 'c:1', protocol: http/json}}\n",
			want: []wantErr{{4, "telemetry.otlp.protocol", `unknown value "http/json" (valid: http/protobuf, grpc)`}}},
		{name: "ratio above 1", src: minimal + "telemetry: {otlp: {sampling_ratio: 1.5}}\n",
			want: []wantErr{{4, "telemetry.otlp.sampling_ratio", "must be between 0 and 1"}}},
		{name: "ratio negative", src: minimal + "telemetry: {otlp: {sampling_ratio: -0.1}}\n",
			want: []wantErr{{4, "telemetry.otlp.sampling_ratio", "must be between 0 and 1"}}},
		{name: "ratio a string", src: minimal + "telemetry: {otlp: {sampling_ratio: half}}\n",
			want: []wantErr{{4, "telemetry.otlp.sampling_ratio", "expected a number between 0 and 1"}}},
		{name: "max_queue zero", src: minimal + "telemetry: {otlp: {max_queue: 0}}\n",
			want: []wantErr{{4, "telemetry.otlp.max_queue", "must be between 1 and 1048576"}}},
		{name: "max_batch over max_queue", src: minimal + "telemetry: {otlp: {max_queue: 10, max_batch: 11}}\n",
			want: []wantErr{{4, "telemetry.otlp.max_batch", "must not exceed max_queue (10)"}}},
		{name: "interval too short", src: minimal + "telemetry: {otlp: {interval: 1ms}}\n",
			want: []wantErr{{4, "telemetry.otlp.interval", "must be between 10ms and 1m0s"}}},
		{name: "service_name empty", src: minimal + "telemetry: {otlp: {service_name: ''}}\n",
			want: []wantErr{{4, "telemetry.otlp.service_name", "must not be empty"}}},
		{name: "headers not a mapping", src: minimal + "telemetry: {otlp: {endpoint: 'c:1', headers: [a]}}\n",
			want: []wantErr{{4, "telemetry.otlp.headers", "expected a mapping of header names to values"}}},
		{name: "header value not a string", src: minimal + "telemetry: {otlp: {endpoint: 'c:1', headers: {a: [1]}}}\n",
			want: []wantErr{{4, "telemetry.otlp.headers.a", "expected a string"}}},
		{name: "header name not a token", src: minimal + "telemetry:\n  otlp:\n    endpoint: 'c:1'\n    headers:\n      'a b': x\n",
			want: []wantErr{{8, "telemetry.otlp.headers", `header name "a b": not an HTTP token`}}},
		{name: "header value with a control character", src: minimal + "telemetry:\n  otlp:\n    endpoint: 'c:1'\n    headers:\n      k: \"s3cr\\u0001t\"\n",
			want: []wantErr{{8, "telemetry.otlp.headers.k", "control character (not shown)"}}},
		{name: "headers without endpoint", src: minimal + "telemetry: {otlp: {headers: {a: b}}}\n",
			want: []wantErr{{4, "telemetry.otlp.headers", "headers without an endpoint"}}},
		{name: "ca_file with insecure", src: minimal + "telemetry: {otlp: {endpoint: 'c:1', insecure: true, ca_file: /ca.pem}}\n",
			want: []wantErr{{4, "telemetry.otlp.ca_file", "insecure exports in plaintext"}}},
		{name: "ca_file with http://", src: minimal + "telemetry: {otlp: {endpoint: 'http://c:1', ca_file: /ca.pem}}\n",
			want: []wantErr{{4, "telemetry.otlp.ca_file", "the endpoint is plaintext"}}},
		{name: "unknown key", src: minimal + "telemetry: {otlp: {endpiont: x}}\n",
			want: []wantErr{{4, "telemetry.otlp.endpiont", `unknown key "endpiont"`}}},
		{name: "trace_propagation unknown", src: withRoutes + "  - {name: a, tls: terminate, trace_propagation: always}\n",
			want: []wantErr{{5, "routes[0].trace_propagation", `unknown value "always" (valid: record, inject)`}}},
		{name: "inject on passthrough", src: withRoutes + "  - {name: a, tls: passthrough, trace_propagation: inject}\n",
			want: []wantErr{{5, "routes[0].trace_propagation", "inject needs a route that reads HTTP"}}},
		{name: "inject at level 0", src: withRoutes + "  - {name: a, tls: plaintext, level: 0, development: true, trace_propagation: inject}\n",
			want: []wantErr{{5, "routes[0].trace_propagation", "inject needs level 1 or more"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse("test.yaml", []byte(tt.src), Overrides{})
			if c != nil {
				t.Fatal("got a config despite errors")
			}
			var errs Errors
			if !errors.As(err, &errs) {
				t.Fatalf("error %v (%T) is not an Errors", err, err)
			}
			if len(errs) != len(tt.want) {
				t.Fatalf("got %d errors, want %d:\n%v", len(errs), len(tt.want), err)
			}
			for i, w := range tt.want {
				e := errs[i]
				if e.Line != w.line || !strings.HasPrefix(e.Key, w.key) || !strings.Contains(e.Msg, w.msg) || e.Column == 0 {
					t.Errorf("error %d = %q (line %d col %d, key %q)\nwant line %d, key %q, message containing %q",
						i, e.Error(), e.Line, e.Column, e.Key, w.line, w.key, w.msg)
				}
			}
			if strings.Contains(err.Error(), "s3cr") {
				t.Errorf("a header value is in the error: %v", err)
			}
		})
	}
}

func TestTelemetryWarnings(t *testing.T) {
	src := withRoutes + "  - {name: a, tls: terminate, trace_propagation: inject}\n"
	c, err := Parse("test.yaml", []byte(src), Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	if w := strings.Join(c.Warnings(), "\n"); !strings.Contains(w, "routes[0] (a): trace_propagation: inject has no effect without telemetry.otlp.endpoint") {
		t.Errorf("warnings %q", w)
	}
	c, err = Parse("test.yaml", []byte(src+"telemetry: {otlp: {endpoint: 'c:4318'}}\n"), Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	if w := strings.Join(c.Warnings(), "\n"); strings.Contains(w, "trace_propagation") {
		t.Errorf("warnings with an endpoint %q", w)
	}
}
