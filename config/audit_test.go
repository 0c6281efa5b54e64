package config

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestAuditValid(t *testing.T) {
	tests := []struct {
		name  string
		src   string
		check func(t *testing.T, c *Config)
	}{
		{
			name: "defaults: beside ca.dir, closed, 2s",
			src:  minimal,
			check: func(t *testing.T, c *Config) {
				want := AuditConfig{Dir: "/var/lib/mcpintercept/audit", Fail: AuditFailClosed,
					Timeout: Duration{2 * time.Second}, SegmentBytes: 64 << 20, CheckpointEvery: Duration{time.Second}}
				if c.Audit != want {
					t.Errorf("audit = %+v, want %+v", c.Audit, want)
				}
				if c.Audited() {
					t.Error("Audited() with no audited route")
				}
			},
		},
		{
			name: "default dir follows ca.dir",
			src:  minimal + "ca: {dir: /srv/mcpi/ca}\n",
			check: func(t *testing.T, c *Config) {
				if c.Audit.Dir != "/srv/mcpi/audit" {
					t.Errorf("audit.dir = %q, want /srv/mcpi/audit", c.Audit.Dir)
				}
			},
		},
		{
			name: "relative dir resolved against the file",
			src:  minimal + "audit: {dir: log/audit}\n",
			check: func(t *testing.T, c *Config) {
				if want := filepath.Join("conf", "log/audit"); c.Audit.Dir != want {
					t.Errorf("audit.dir = %q, want %q", c.Audit.Dir, want)
				}
			},
		},
		{
			name: "every key",
			src: minimal + "audit:\n  dir: /a\n  fail: open\n  timeout: 250ms\n  segment_bytes: 1MiB\n" +
				"  retain_segments: 7\n  retain_age: 48h\n  checkpoint_every: 10s\n",
			check: func(t *testing.T, c *Config) {
				want := AuditConfig{Dir: "/a", Fail: AuditFailOpen, Timeout: Duration{250 * time.Millisecond},
					SegmentBytes: 1 << 20, RetainSegments: 7, RetainAge: Duration{48 * time.Hour}, CheckpointEvery: Duration{10 * time.Second}}
				if c.Audit != want {
					t.Errorf("audit = %+v, want %+v", c.Audit, want)
				}
			},
		},
		{
			name: "audited level 1 and level 2 routes",
			src: withRoutes + "  - {name: a, tls: terminate, audit: true}\n" +
				"  - {name: b, tls: plaintext, level: 2, audit: true, audit_arguments: true}\n",
			check: func(t *testing.T, c *Config) {
				if !c.Routes[0].Audit || c.Routes[0].AuditArguments || !c.Routes[1].Audit || !c.Routes[1].AuditArguments {
					t.Errorf("routes = %+v", c.Routes)
				}
				if !c.Audited() {
					t.Error("Audited() false with audited routes")
				}
			},
		},
		{
			name: "default_route audited",
			src:  minimal + "default_route: {tls: plaintext, level: 1, audit: true}\n",
			check: func(t *testing.T, c *Config) {
				if !c.Audited() {
					t.Error("Audited() false with an audited default_route")
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
			tt.check(t, c)
		})
	}
}

func TestAuditErrors(t *testing.T) {
	tests := []struct {
		name string
		src  string
		want []wantErr
	}{
		{name: "fail neither closed nor open", src: minimal + "audit: {fail: halt}\n",
			want: []wantErr{{4, "audit.fail", `unknown value "halt"`}}},
		{name: "timeout zero", src: minimal + "audit: {timeout: 0s}\n",
			want: []wantErr{{4, "audit.timeout", "must be between 1ms and 1m0s"}}},
		{name: "segment too small", src: minimal + "audit: {segment_bytes: 1024}\n",
			want: []wantErr{{4, "audit.segment_bytes", "between 64KiB"}}},
		{name: "retain_segments negative", src: minimal + "audit: {retain_segments: -1}\n",
			want: []wantErr{{4, "audit.retain_segments", "between 0 and"}}},
		{name: "retain_age negative", src: minimal + "audit: {retain_age: -1h}\n",
			want: []wantErr{{4, "audit.retain_age", "negative"}}},
		{name: "checkpoint too often", src: minimal + "audit: {checkpoint_every: 1ms}\n",
			want: []wantErr{{4, "audit.checkpoint_every", "must be between 100ms"}}},
		{name: "unknown audit key", src: minimal + "audit: {dirr: /x}\n",
			want: []wantErr{{4, "audit.dirr", "unknown key"}}},
		{name: "audit not a bool", src: withRoutes + "  - {name: a, tls: terminate, audit: yes please}\n",
			want: []wantErr{{5, "routes[0].audit", "expected true or false"}}},
		{name: "audit_arguments without audit", src: withRoutes + "  - {name: a, tls: plaintext, level: 2, audit_arguments: true}\n",
			want: []wantErr{{5, "routes[0].audit_arguments", "needs audit: true"}}},
		{name: "audit_arguments at level 1", src: withRoutes + "  - {name: a, tls: terminate, audit: true, audit_arguments: true}\n",
			want: []wantErr{{5, "routes[0].audit_arguments", "needs level 2"}}},
		{name: "audit on an opaque route", src: withRoutes + "  - {name: a, tls: passthrough, audit: true}\n",
			want: []wantErr{{5, "routes[0].audit", "needs level 1"}}},
		{name: "audit with no dir", src: minimal + "audit: {dir: \"\"}\n" + "routes:\n  - {name: a, tls: terminate, audit: true}\n",
			want: []wantErr{{6, "routes[0].audit", "needs audit.dir"}}},
		{name: "default_route audit_arguments without audit", src: minimal + "default_route: {tls: plaintext, level: 2, audit_arguments: true}\n",
			want: []wantErr{{4, "default_route.audit_arguments", "needs audit: true"}}},
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
				if e.Line != w.line || e.Key != w.key || !strings.Contains(e.Msg, w.msg) || e.Column == 0 {
					t.Errorf("error %d = %q (line %d col %d, key %q)\nwant line %d, key %q, message containing %q",
						i, e.Error(), e.Line, e.Column, e.Key, w.line, w.key, w.msg)
				}
			}
		})
	}
}
