package appliance

import (
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"syscall"

	"mcpintercept/config"
	"mcpintercept/engine"
	"mcpintercept/pki"
	"mcpintercept/policy"
)

// PreflightOptions are the checks that depend on the moment rather than on the files.
type PreflightOptions struct {
	// Ports also binds every listen address, the admin listener and the dns listeners once (and
	// closes them at once), refusing a port already in use: `check --ports`. Off by default,
	// since the unit's ExecStartPre runs while the previous instance may still hold them.
	Ports bool
}

// Preflight is what `run` refuses at start-up that the configuration file alone does not show:
// the CA directory and key (permissions, owner, a half-made CA, a directory that cannot be
// created), every file the configuration names (upstream_tls.extra_cas, tokens.issuers[].jwks_file,
// tokens.introspection.client_secret_file, tool_integrity.pin_file, telemetry.otlp.ca_file),
// the directories the appliance writes (log.flows' directory, audit.dir, tool_integrity.dir) and,
// with opt.Ports, the listen ports. It reads, never creates or changes anything, and returns
// every problem it finds (nil: none). cfg may be a partial configuration (config.LoadPartial).
func Preflight(cfg *config.Config, opt PreflightOptions) []error {
	var errs []error
	add := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	if UsesTerminate(cfg) {
		add(checkCADir(cfg.CA.Dir))
	}
	for i, f := range cfg.Upstream.ExtraCAs {
		add(checkPEMFile(fmt.Sprintf("upstream_tls.extra_cas[%d]", i), f))
	}
	for i, is := range cfg.Tokens.Issuers {
		if is.JWKSFile != "" {
			add(checkReadable(fmt.Sprintf("tokens.issuers[%d].jwks_file", i), is.JWKSFile))
		}
	}
	if f := cfg.Tokens.Introspection.ClientSecretFile; f != "" {
		add(checkReadable("tokens.introspection.client_secret_file", f))
	}
	if f := cfg.ToolIntegrity.PinFile; f != "" {
		add(checkReadable("tool_integrity.pin_file", f))
	}
	if f := cfg.Telemetry.OTLP.CAFile; f != "" && cfg.Telemetry.On() {
		add(checkPEMFile("telemetry.otlp.ca_file", f))
	}
	if cfg.Log.FlowsFile() {
		add(checkLogFile(cfg.Log.Flows))
	}
	audited, pinned := false, false
	for _, r := range declaredRoutes(cfg) {
		audited = audited || r.Audit
		pinned = pinned || r.ToolPinsOn()
	}
	if audited {
		add(checkWritableDir("audit.dir", cfg.Audit.Dir))
	}
	if pinned {
		add(checkWritableDir("tool_integrity.dir", cfg.ToolIntegrity.Dir))
	}
	if opt.Ports {
		errs = append(errs, checkPorts(cfg)...)
	}
	return errs
}

// CheckAll is Check without stopping at the first problem: the compile errors of every rule set,
// the rules that read what their route's level cannot see (both policy.CompileErrors), then each
// route's token check and the tool pin file. A problem about a file that preflight (the errors
// Preflight returned) already reports is left out, so that each shows once.
func CheckAll(cfg *config.Config, preflight []error) []error {
	var out []error
	sets, err := compileRuleSets(cfg, nil)
	if err != nil {
		return []error{err}
	}
	rt := &engine.Routing{}
	for i := range cfg.Routes {
		rt.Routes = append(rt.Routes, routeFromConfig(cfg, cfg.Routes[i]))
	}
	if d := cfg.DefaultRoute; d != nil && !d.Close && d.Route != nil {
		rt.Default = routeFromConfig(cfg, *d.Route)
	}
	if err := checkLevels(rt, sets); err != nil {
		out = append(out, err)
	}
	seen := map[string]bool{}
	for _, e := range preflight {
		var pe *fs.PathError
		if errors.As(e, &pe) {
			seen[pe.Path] = true
		}
	}
	add := func(err error) {
		var pe *fs.PathError
		if err == nil || errors.As(err, &pe) && seen[pe.Path] {
			return
		}
		out = append(out, err)
	}
	routes := declaredRoutes(cfg)
	for _, r := range routes {
		_, err := tokenChecker(cfg, r, nil)
		add(err)
	}
	full := &engine.Routing{Routes: rt.Routes, Default: rt.Default}
	add(checkToolPins(cfg, full))
	return out
}

// CheckRules compiles the rule sets of a configuration that has other problems (a partial one,
// config.LoadPartial), so that their CEL errors are reported in the same pass: nil, or
// policy.CompileErrors.
func CheckRules(cfg *config.Config) error {
	_, err := compileRuleSets(cfg, nil)
	return err
}

// checkCADir refuses what pki.LoadOrInit would refuse, without creating anything: a complete CA
// is loaded (directory and key permissions and owner, the certificate), a missing one must be
// creatable.
func checkCADir(dir string) error {
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if err := creatable(dir); err != nil {
			return fmt.Errorf("ca.dir %s: does not exist and cannot be created (the CA is made on first start): %w", dir, err)
		}
		return nil
	case err != nil:
		return fmt.Errorf("ca.dir: %w", err)
	case !fi.IsDir():
		return fmt.Errorf("ca.dir %s: not a directory", dir)
	}
	if perm := fi.Mode().Perm(); perm&0o022 != 0 {
		return fmt.Errorf("ca.dir %s: mode %04o is writable by group or others, who could replace the CA key; run chmod 700 %s", dir, perm, dir)
	}
	if uid, ok := fileOwner(fi); ok && uid != os.Geteuid() {
		return fmt.Errorf("ca.dir %s: owned by uid %d, not by the running user (uid %d); run chown %d %s", dir, uid, os.Geteuid(), os.Geteuid(), dir)
	}
	present := 0
	for _, n := range []string{pki.CertFile, pki.KeyFile} {
		if _, err := os.Lstat(filepath.Join(dir, n)); err == nil {
			present++
		}
	}
	switch present {
	case 0:
		if err := writable(dir); err != nil {
			return fmt.Errorf("ca.dir %s: holds no CA and the appliance cannot create one there: %w", dir, err)
		}
		return nil
	case 1:
		return fmt.Errorf("ca.dir %s: holds only one of %s and %s; restore the other, or replace the CA with mcpintercept ca init --force", dir, pki.CertFile, pki.KeyFile)
	}
	if _, err := pki.Load(dir); err != nil {
		return fmt.Errorf("ca.dir: %w", err)
	}
	return nil
}

// checkReadable refuses a file that is missing, not a regular file or unreadable.
func checkReadable(key, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("%s: %w", key, err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil {
		return fmt.Errorf("%s: %w", key, err)
	} else if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s: %s is not a regular file", key, path)
	}
	return nil
}

// checkPEMFile refuses a file that holds no PEM certificate, as the appliance would on start.
func checkPEMFile(key, path string) error {
	if err := checkReadable(key, path); err != nil {
		return err
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("%s: %w", key, err)
	}
	if !x509.NewCertPool().AppendCertsFromPEM(b) {
		return fmt.Errorf("%s: no PEM certificate in %s", key, path)
	}
	return nil
}

// checkLogFile: the flow log is opened for appending (created if missing) in a directory that
// must exist.
func checkLogFile(path string) error {
	fi, err := os.Stat(path)
	switch {
	case err == nil && fi.IsDir():
		return fmt.Errorf("log.flows %s: is a directory", path)
	case err == nil:
		if err := writable(path); err != nil {
			return fmt.Errorf("log.flows %s: %w", path, err)
		}
		return nil
	case !errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("log.flows: %w", err)
	}
	dir := filepath.Dir(path)
	di, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("log.flows %s: its directory: %w (it is not created)", path, err)
	}
	if !di.IsDir() {
		return fmt.Errorf("log.flows %s: %s is not a directory", path, dir)
	}
	if err := writable(dir); err != nil {
		return fmt.Errorf("log.flows %s: cannot create the file: %w", path, err)
	}
	return nil
}

// checkWritableDir: a state directory that exists must be a writable directory; a missing one
// is created (MkdirAll), so its nearest existing parent must be writable.
func checkWritableDir(key, dir string) error {
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if err := creatable(dir); err != nil {
			return fmt.Errorf("%s %s: does not exist and cannot be created: %w", key, dir, err)
		}
		return nil
	case err != nil:
		return fmt.Errorf("%s: %w", key, err)
	case !fi.IsDir():
		return fmt.Errorf("%s %s: not a directory", key, dir)
	}
	if err := writable(dir); err != nil {
		return fmt.Errorf("%s %s: %w", key, dir, err)
	}
	return nil
}

// creatable says whether MkdirAll(dir) could succeed: its nearest existing ancestor is a
// directory the running user can write.
func creatable(dir string) error {
	p := filepath.Clean(dir)
	for {
		parent := filepath.Dir(p)
		if parent == p {
			return fmt.Errorf("no existing parent")
		}
		fi, err := os.Stat(parent)
		if errors.Is(err, fs.ErrNotExist) {
			p = parent
			continue
		}
		if err != nil {
			return err
		}
		if !fi.IsDir() {
			return fmt.Errorf("%s is not a directory", parent)
		}
		if err := writable(parent); err != nil {
			return fmt.Errorf("%s: %w", parent, err)
		}
		return nil
	}
}

// checkPorts binds each address the appliance would listen on, once, and closes it at once.
func checkPorts(cfg *config.Config) []error {
	var errs []error
	try := func(key, network, addr string) {
		var err error
		if network == "udp" {
			var c net.PacketConn
			if c, err = net.ListenPacket(network, addr); err == nil {
				c.Close()
			}
		} else {
			var l net.Listener
			if l, err = net.Listen(network, addr); err == nil {
				l.Close()
			}
		}
		if errors.Is(err, syscall.EADDRINUSE) {
			errs = append(errs, fmt.Errorf("%s: %s is already in use", key, addr))
		}
	}
	if cfg.Listen.Port != 0 {
		for _, a := range cfg.Listen.Addresses {
			try("listen", "tcp", netip.AddrPortFrom(a, cfg.Listen.Port).String())
		}
	}
	if l := cfg.Admin.Listen; l != "" && l != config.Off {
		try("admin.listen", "tcp", l)
	}
	if cfg.Mechanism == config.DNS {
		for _, a := range cfg.DNS.Listen {
			try("dns.listen", "udp", a.String())
			try("dns.listen", "tcp", a.String())
		}
	}
	return errs
}

// Problem is one line of `check`'s report, placed by its position in the file (Line 0: none,
// first; NoLine: not about a line, last).
type Problem struct {
	Line, Column int
	Text         string
}

// NoLine is the Line of a Problem that is not about a line of the file.
const NoLine = math.MaxInt

// CheckReport is what `check` finds in a configuration file.
type CheckReport struct {
	// Config is the configuration as far as it loaded (partial when there are Problems).
	Config *config.Config
	// Problems are every problem at once, in the order of the file: the file's errors, the CEL
	// of the rules (those without a problem of their own too), the files and directories the
	// configuration names (Preflight).
	Problems []Problem
	// PolicyOnly: the file is valid and every problem is in its rules.
	PolicyOnly bool
}

// CheckFile is `check`: everything run refuses before installing anything, in one pass (the
// file's errors, then the CEL of every rule without one, then the files and directories the
// configuration names). An error: the file could not be loaded at all.
func CheckFile(path string, ov config.Overrides, opt PreflightOptions) (*CheckReport, error) {
	cfg, cerrs, err := config.LoadPartial(path, ov)
	if err != nil {
		return nil, err
	}
	var probs []Problem
	for _, e := range cerrs {
		probs = append(probs, Problem{e.Line, e.Column, e.Error()})
	}
	pre := Preflight(cfg, opt)
	if len(cerrs) > 0 {
		// The rules without a problem of their own still compile, so their CEL errors show now
		// rather than after the others are fixed.
		if err := CheckRules(cfg); err != nil {
			probs = append(probs, policyProblems(err)...)
		}
	} else {
		for _, err := range CheckAll(cfg, pre) {
			probs = append(probs, policyProblems(err)...)
		}
	}
	policyOnly := len(cerrs) == 0 && len(probs) > 0
	for _, e := range pre {
		probs = append(probs, Problem{Line: NoLine, Text: path + ": " + e.Error()})
		policyOnly = false
	}
	sort.SliceStable(probs, func(i, j int) bool {
		if probs[i].Line != probs[j].Line {
			return probs[i].Line < probs[j].Line
		}
		return probs[i].Column < probs[j].Column
	})
	return &CheckReport{Config: cfg, Problems: probs, PolicyOnly: policyOnly}, nil
}

// policyProblems turns a rule compile error (policy.CompileErrors, or another error) into problems.
func policyProblems(err error) []Problem {
	var ce policy.CompileErrors
	if !errors.As(err, &ce) {
		return []Problem{{Line: NoLine, Text: err.Error()}}
	}
	var out []Problem
	for _, e := range ce {
		out = append(out, Problem{e.Pos.Line, e.Pos.Column, e.Error()})
	}
	return out
}
