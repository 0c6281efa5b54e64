package appliance

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"mcpintercept/config"
	"mcpintercept/engine"
	"mcpintercept/integrity"
	"mcpintercept/level2"
)

// routeToolPins is r's tool_pins ("" when r is nil).
func routeToolPins(r *engine.Route) integrity.Mode {
	if r == nil {
		return ""
	}
	return level2.ToolPinsOf(r.Stages)
}

// toolsPinned reports whether some route of rt pins definitions: only then is the guard opened.
func toolsPinned(rt *engine.Routing) bool {
	on := func(r *engine.Route) bool {
		m := routeToolPins(r)
		return m == integrity.ModeLearn || m == integrity.ModeEnforce
	}
	for _, r := range rt.Routes {
		if on(r) {
			return true
		}
	}
	return on(rt.Default)
}

// toolPatterns compiles the configured patterns (nil: the guard's built-in ones). The config
// package compiled them already when it validated the file; an error here is a config built in
// code.
func toolPatterns(ps []config.ToolPattern) ([]integrity.Pattern, error) {
	if len(ps) == 0 {
		return nil, nil
	}
	out := make([]integrity.Pattern, 0, len(ps))
	for _, p := range ps {
		re, err := regexp.Compile(p.Regex)
		if err != nil {
			return nil, fmt.Errorf("tool_integrity.patterns: pattern %q: %w", p.Name, err)
		}
		out = append(out, integrity.Pattern{Name: p.Name, Re: re})
	}
	return out, nil
}

// toolOptions is the guard's share of the configuration.
func toolOptions(ti config.ToolIntegrityConfig, reg prometheus.Registerer, log *slog.Logger) (integrity.Options, error) {
	pats, err := toolPatterns(ti.Patterns)
	if err != nil {
		return integrity.Options{}, err
	}
	return integrity.Options{
		Dir:              ti.Dir,
		PinFile:          ti.PinFile,
		MaxTools:         ti.MaxTools,
		DivergenceWindow: ti.DivergenceWindow.Duration,
		Patterns:         pats,
		Registerer:       reg,
		Log:              log,
	}, nil
}

// checkToolPins is check's share of tool integrity: the pin file must parse (and the patterns
// compile). It opens a guard without a state directory (kept in memory, nothing written) and
// closes it.
func checkToolPins(cfg *config.Config, rt *engine.Routing) error {
	if !toolsPinned(rt) {
		return nil
	}
	o, err := toolOptions(cfg.ToolIntegrity, nil, nil)
	if err != nil {
		return err
	}
	o.Dir = ""
	if o.PinFile == "" {
		return nil
	}
	g, err := integrity.Open(o)
	if err != nil {
		return fmt.Errorf("tool_integrity.pin_file %s: %w", o.PinFile, err)
	}
	return g.Close()
}

// openTools opens the tool-integrity guard when a route of rt pins definitions, and reads (or
// makes) the admin token its mutating endpoints require. Called before the engine exists.
func (a *Appliance) openTools(cfg *config.Config, rt *engine.Routing) error {
	if !toolsPinned(rt) && !fedPins(cfg) {
		return nil
	}
	ti := cfg.ToolIntegrity
	o, err := toolOptions(ti, a.metrics.Registry, a.log.With("component", "tools"))
	if err != nil {
		return err
	}
	g, err := integrity.Open(o)
	if err != nil {
		return fmt.Errorf("tool integrity %s: %w", ti.Dir, err)
	}
	tok, err := adminToken(ti.Dir)
	if err != nil {
		g.Close()
		return err
	}
	sum := sha256.Sum256([]byte(tok))
	a.adminToken = sum[:]
	a.toolsCfg = ti
	a.tools.Store(g)
	pinFile := ti.PinFile
	if pinFile == "" {
		pinFile = "none"
	}
	a.info("tool integrity open", "dir", ti.Dir, "pin_file", pinFile, "max_tools", ti.MaxTools,
		"admin_token", filepath.Join(ti.Dir, config.AdminTokenFile))
	return nil
}

// reloadTools is Reload's share: the pin file is read again (on error the pins held before
// stay); a guard cannot be opened or closed without a restart, which the log says.
func (a *Appliance) reloadTools(next *config.Config, rt *engine.Routing) {
	g := a.tools.Load()
	switch {
	case g == nil && toolsPinned(rt):
		a.log.Warn("reload: routes with tool_pins were added; the tool-integrity guard is opened at start-up, restart to pin their definitions (until then they are not checked)")
		return
	case g == nil:
		return
	case !toolsPinned(rt):
		a.log.Warn("reload: no route pins tool definitions any more; the tool-integrity state stays open until a restart")
	}
	was, now := a.toolsCfg, next.ToolIntegrity
	was.PinFile, now.PinFile = "", ""
	if !reflect.DeepEqual(was, now) {
		a.log.Warn("reload: the tool_integrity section changed; the guard keeps the settings it opened with (the pin file aside), restart to apply them")
	}
	path := next.ToolIntegrity.PinFile
	if path == "" {
		if a.toolsCfg.PinFile != "" {
			a.log.Warn("reload: tool_integrity.pin_file was removed; its pins stay until a restart", "pin_file", a.toolsCfg.PinFile)
		}
		return
	}
	if err := g.ReloadPinFile(path); err != nil {
		a.log.Error("reload: tool pin file refused; keeping the pins held before", "pin_file", path, "err", err)
		return
	}
	a.toolsCfg.PinFile = path
	a.log.Info("reload: tool pin file read", "pin_file", path)
}

// closeTools writes what the guard has not persisted yet. Stop calls it after the drain.
func (a *Appliance) closeTools() {
	g := a.tools.Swap(nil)
	if g == nil {
		return
	}
	if err := g.Close(); err != nil {
		a.log.Error("tool integrity: close", "err", err)
		return
	}
	a.info("tool integrity closed")
}

// adminToken reads dir/admin.token, making it (32 random bytes, hex, mode 0600) when it does
// not exist. A token others can read, or one too short to be a secret, is refused: the token is
// what keeps any local process from approving a definition.
func adminToken(dir string) (string, error) {
	if dir == "" {
		return "", errors.New("tool integrity: no tool_integrity.dir for the admin token")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("tool integrity: %w", err)
	}
	path := filepath.Join(dir, config.AdminTokenFile)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	switch {
	case err == nil:
		var b [32]byte
		rand.Read(b[:])
		tok := hex.EncodeToString(b[:])
		_, werr := io.WriteString(f, tok+"\n")
		if werr == nil {
			werr = f.Sync()
		}
		if cerr := f.Close(); werr == nil {
			werr = cerr
		}
		if werr != nil {
			os.Remove(path)
			return "", fmt.Errorf("admin token %s: %w", path, werr)
		}
		return tok, nil
	case !errors.Is(err, fs.ErrExist):
		return "", fmt.Errorf("admin token %s: %w", path, err)
	}
	fi, err := os.Lstat(path)
	if err != nil {
		return "", fmt.Errorf("admin token %s: %w", path, err)
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("admin token %s: not a regular file (%s)", path, fi.Mode().Type())
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return "", fmt.Errorf("admin token %s: mode %04o lets others read it; chmod 600 it (or delete it for a new one)", path, perm)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("admin token %s: %w", path, err)
	}
	tok := strings.TrimSpace(string(b))
	if len(tok) < 32 || strings.ContainsAny(tok, " \t\r\n") {
		return "", fmt.Errorf("admin token %s: want one line of at least 32 characters (delete the file for a new one)", path)
	}
	return tok, nil
}

// fedPins reports whether the federation pins its downstreams' definitions.
func fedPins(cfg *config.Config) bool {
	return cfg.FederationOn() && (cfg.Federation.ToolPins == config.ToolPinsLearn || cfg.Federation.ToolPins == config.ToolPinsEnforce)
}
