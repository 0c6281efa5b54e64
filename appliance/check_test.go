package appliance

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"mcpintercept/config"
	"mcpintercept/pki"
	"mcpintercept/policy"
)

// TestPreflight: each start-up refusal the file alone does not show is found without creating
// anything, all of them in one pass; a clean configuration passes.
func TestPreflight(t *testing.T) {
	dir := t.TempDir()
	write := func(name, src string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(src), mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	mkdir := func(name string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.Mkdir(p, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	goodCA := filepath.Join(dir, "ca-good")
	if _, err := pki.Init(goodCA, false); err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(filepath.Join(goodCA, pki.CertFile))
	if err != nil {
		t.Fatal(err)
	}
	pem := write("roots.pem", string(caPEM), 0o644)
	notPEM := write("not.pem", "hello\n", 0o644)
	loose := mkdir("ca-loose", 0o777)
	half := mkdir("ca-half", 0o700)
	write("ca-half/"+pki.CertFile, string(caPEM), 0o644)
	openKey := filepath.Join(dir, "ca-openkey")
	if _, err := pki.Init(openKey, false); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(openKey, pki.KeyFile), 0o644); err != nil {
		t.Fatal(err)
	}
	aFile := write("a-file", "x", 0o644)
	missing := filepath.Join(dir, "missing")
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	_, busyPort, _ := net.SplitHostPort(busy.Addr().String())

	terminate := "routes:\n  - {name: t, tls: terminate}\n"
	tests := []struct {
		name string
		src  string
		opt  PreflightOptions
		want []string // nil: no problem
	}{
		{name: "clean terminate", src: terminate + "ca: {dir: " + goodCA + "}\nupstream_tls: {extra_cas: [" + pem + "]}\n"},
		{name: "CA to be created in an existing directory", src: terminate + "ca: {dir: " + filepath.Join(dir, "ca-new") + "}\n"},
		{name: "no terminate route: the CA is not read", src: "ca: {dir: " + loose + "}\n"},
		{name: "CA directory writable by others", src: terminate + "ca: {dir: " + loose + "}\n", want: []string{"ca.dir " + loose + ": mode 0777 is writable by group or others"}},
		{name: "half a CA", src: terminate + "ca: {dir: " + half + "}\n", want: []string{"holds only one of ca.pem and ca-key.pem"}},
		{name: "CA key readable by others", src: terminate + "ca: {dir: " + openKey + "}\n", want: []string{"has mode 0644, accessible by group or others"}},
		{name: "CA directory under a file", src: terminate + "ca: {dir: " + filepath.Join(aFile, "ca") + "}\n", want: []string{"ca.dir: stat " + filepath.Join(aFile, "ca") + ": not a directory"}},
		{name: "CA directory is a file", src: terminate + "ca: {dir: " + aFile + "}\n", want: []string{"ca.dir " + aFile + ": not a directory"}},
		{name: "missing extra CA", src: "upstream_tls: {extra_cas: [" + pem + ", " + missing + "]}\n", want: []string{"upstream_tls.extra_cas[1]: open " + missing}},
		{name: "extra CA without a certificate", src: "upstream_tls: {extra_cas: [" + notPEM + "]}\n", want: []string{"upstream_tls.extra_cas[0]: no PEM certificate in " + notPEM}},
		{name: "missing JWKS file", src: "tokens:\n  issuers:\n    - {issuer: https://idp.example, jwks_file: " + missing + "}\n",
			want: []string{"tokens.issuers[0].jwks_file: open " + missing}},
		{name: "missing introspection secret", src: "tokens:\n  opaque_tokens: introspect\n  introspection: {url: https://idp.example/i, client_id: me, client_secret_file: " + missing + "}\n",
			want: []string{"tokens.introspection.client_secret_file: open " + missing}},
		{name: "missing pin file", src: "tool_integrity: {pin_file: " + missing + "}\n", want: []string{"tool_integrity.pin_file: open " + missing}},
		{name: "pin file is a directory", src: "tool_integrity: {pin_file: " + dir + "}\n", want: []string{"tool_integrity.pin_file: " + dir + " is not a regular file"}},
		{name: "missing OTLP CA", src: "telemetry:\n  otlp: {endpoint: \"https://collector.example:4318\", ca_file: " + missing + "}\n",
			want: []string{"telemetry.otlp.ca_file: open " + missing}},
		{name: "flow log in a missing directory", src: "log: {flows: " + filepath.Join(missing, "flows.jsonl") + "}\n", want: []string{"log.flows " + filepath.Join(missing, "flows.jsonl") + ": its directory"}},
		{name: "flow log is a directory", src: "log: {flows: " + dir + "}\n", want: []string{"log.flows " + dir + ": is a directory"}},
		{name: "flow log in an existing directory", src: "log: {flows: " + filepath.Join(dir, "flows.jsonl") + "}\n"},
		{name: "audit directory under a file", src: "routes:\n  - {name: p, tls: plaintext, development: true, audit: true}\naudit: {dir: " + filepath.Join(aFile, "audit") + "}\n",
			want: []string{"audit.dir: stat " + filepath.Join(aFile, "audit") + ": not a directory"}},
		{name: "audit directory under a missing one", src: "routes:\n  - {name: p, tls: plaintext, development: true, audit: true}\naudit: {dir: " + filepath.Join(missing, "a", "b") + "}\n"},
		{name: "listen port in use, --ports", src: "listen: {addresses: [127.0.0.1], port: " + busyPort + "}\nadmin: {listen: off}\n", opt: PreflightOptions{Ports: true},
			want: []string{"listen: " + busy.Addr().String() + " is already in use"}},
		{name: "listen and admin ports in use, --ports", src: "listen: {addresses: [127.0.0.1], port: " + busyPort + "}\nadmin: {listen: \"" + busy.Addr().String() + "\"}\n", opt: PreflightOptions{Ports: true},
			want: []string{"listen: " + busy.Addr().String() + " is already in use", "admin.listen: " + busy.Addr().String() + " is already in use"}},
		{name: "admin port in use, without --ports", src: "admin: {listen: \"" + busy.Addr().String() + "\"}\n"},
		{name: "every problem in one pass", src: terminate + "ca: {dir: " + loose + "}\nupstream_tls: {extra_cas: [" + missing + "]}\ntool_integrity: {pin_file: " + missing + "}\n",
			want: []string{"ca.dir " + loose, "upstream_tls.extra_cas[0]", "tool_integrity.pin_file"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			src := "mechanism: nftables-tproxy\nintercept: {destinations: [10.0.0.0/8], ports: [443]}\n" + tc.src
			cfg, err := config.Parse(filepath.Join(dir, "c.yaml"), []byte(src), config.Overrides{})
			if err != nil {
				t.Fatal(err)
			}
			errs := Preflight(cfg, tc.opt)
			var got []string
			for _, e := range errs {
				got = append(got, e.Error())
			}
			all := strings.Join(got, "\n")
			if tc.want == nil {
				if len(errs) > 0 {
					t.Fatalf("problems:\n%s", all)
				}
				return
			}
			for _, w := range tc.want {
				if !strings.Contains(all, w) {
					t.Errorf("problems lack %q:\n%s", w, all)
				}
			}
			if tc.name != "every problem in one pass" && len(errs) != len(tc.want) {
				t.Errorf("%d problems, want %d:\n%s", len(errs), len(tc.want), all)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(dir, "ca-new")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("preflight created the CA directory: %v", err)
	}
}

// TestPreflightNotWritable: directories the running user cannot write (not as root, to whom
// access(2) grants everything).
func TestPreflightNotWritable(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root may write any directory")
	}
	dir := t.TempDir()
	ro := filepath.Join(dir, "ro")
	if err := os.Mkdir(ro, 0o500); err != nil {
		t.Fatal(err)
	}
	src := "mechanism: nftables-tproxy\nintercept: {destinations: [10.0.0.0/8], ports: [443]}\nroutes:\n  - {name: t, tls: terminate}\n" +
		"ca: {dir: " + filepath.Join(ro, "missing", "ca") + "}\nlog: {flows: " + filepath.Join(ro, "f.jsonl") + "}\n"
	cfg, err := config.Parse("c.yaml", []byte(src), config.Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	errs := Preflight(cfg, PreflightOptions{})
	if len(errs) != 2 || !strings.Contains(errs[0].Error(), "cannot be created") || !strings.Contains(errs[1].Error(), "cannot create the file") {
		t.Fatalf("errs = %v", errs)
	}
}

// TestCheckRulesPartial: the CEL errors of a file with other problems, in the same pass.
func TestCheckRulesPartial(t *testing.T) {
	src := "mechanism: nftables-tproxy\nintercept: {destinations: [10.0.0.0/8], ports: [443]}\nlimits: {idle_timout: 5m}\n" +
		"rule_sets:\n  s:\n    - {name: broken, when: 'mcp.name ==', action: deny}\n"
	cfg, errs, err := config.ParsePartial("c.yaml", []byte(src), config.Overrides{})
	if err != nil || len(errs) != 1 {
		t.Fatalf("ParsePartial: %v %v", errs, err)
	}
	var ce policy.CompileErrors
	if err := CheckRules(cfg); !errors.As(err, &ce) || len(ce) != 1 || ce[0].Pos.Line != 6 || ce[0].Rule != "broken" {
		t.Fatalf("CheckRules: %v", err)
	}
}

func TestNewLoggerFormat(t *testing.T) {
	var text, js strings.Builder
	NewLoggerFormat("info", config.LogText, &text).Info("ready", "k", "v")
	NewLoggerFormat("info", config.LogJSON, &js).Info("ready", "k", "v")
	if !strings.Contains(text.String(), "level=INFO msg=ready k=v") {
		t.Errorf("text: %q", text.String())
	}
	if !strings.HasPrefix(js.String(), `{"time":`) || !strings.Contains(js.String(), `"msg":"ready","k":"v"}`) {
		t.Errorf("json: %q", js.String())
	}
}

// TestCheckAll: a rule that reads what its route's level cannot see is reported although a
// route's token check cannot be built, and a file problem Preflight reports shows once.
func TestCheckAll(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "secret")
	src := "mechanism: nftables-tproxy\nintercept: {destinations: [10.0.0.0/8], ports: [443]}\n" +
		"routes:\n  - {name: p, tls: plaintext, development: true, level: 1, rule_set: s}\n" +
		"rule_sets:\n  s:\n    - {name: args, when: 'mcp.arguments.x == 1', action: deny}\n" +
		"tokens:\n  opaque_tokens: introspect\n  introspection: {url: https://idp.example/i, client_id: me, client_secret_file: " + missing + "}\n"
	cfg, err := config.Parse("c.yaml", []byte(src), config.Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	pre := Preflight(cfg, PreflightOptions{})
	if len(pre) != 1 || !strings.Contains(pre[0].Error(), "tokens.introspection.client_secret_file") {
		t.Fatalf("Preflight: %v", pre)
	}
	errs := CheckAll(cfg, pre)
	var ce policy.CompileErrors
	if len(errs) != 1 || !errors.As(errs[0], &ce) || !strings.Contains(ce.Error(), "needs awareness level 2, the route has level 1") {
		t.Fatalf("CheckAll with the preflight: %v", errs)
	}
	errs = CheckAll(cfg, nil)
	if len(errs) != 2 || !strings.Contains(errs[1].Error(), "introspection client secret") {
		t.Fatalf("CheckAll alone: %v", errs)
	}
	if err := Check(cfg); err == nil {
		t.Error("Check accepts it")
	}
}
