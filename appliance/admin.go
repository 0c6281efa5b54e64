package appliance

import (
	"crypto/sha256"
	"errors"
	"path/filepath"

	"mcpintercept/admin"
	"mcpintercept/audit"
	"mcpintercept/config"
	"mcpintercept/engine"
	"mcpintercept/integrity"
	"mcpintercept/telemetry"
)

// The appliance's side of the admin HTTP API (package admin): the live view's hub and admin
// token, and what the endpoints read (Sources).

// liveView is the appliance's share of the live view: the hub every record also goes to and the
// admin token GET /observe, /ui and /config_dump require.
type liveView struct {
	hub   *telemetry.Hub
	token admin.Token
}

// newLive makes the hub (its metrics in reg).
func newLive(a *Appliance) *liveView {
	return &liveView{hub: telemetry.NewHubWithHistory(a.metrics.Registry, admin.LiveHistory)}
}

// recorder is the engine's one writer of records: the flow log and Options.Observe (sink), and
// the live view's hub.
func (a *Appliance) recorder() *telemetry.Recorder {
	var flows telemetry.Sink
	if s := a.sink(); s != nil {
		flows = telemetry.SinkFunc(func(_ telemetry.Kind, r telemetry.FlowRecord) { s.Write(r) })
	}
	var hub telemetry.Sink
	if a.live != nil && a.admin != nil && a.live.token.Err == nil {
		// Only when somebody can subscribe: the hub's history costs every record a copy.
		hub = a.live.hub
	}
	var inv telemetry.Sink
	if a.inventory != nil {
		inv = a.inventory
	}
	return telemetry.NewRecorder(a.metrics, flows, hub, inv)
}

// closeLive ends every live stream (the admin listener's shutdown would wait for them).
func (a *Appliance) closeLive() {
	if a.live != nil {
		a.live.hub.Close("appliance stopping")
	}
}

// serveAdmin reads (or makes) the admin token and adds the appliance's endpoints to the admin
// listener. Without a token (no tool_integrity.dir, or it cannot be written) the live view's
// endpoints answer 503 with the reason; the rest of the listener works.
func (a *Appliance) serveAdmin() {
	lv := a.live
	dir := a.cfg.ToolIntegrity.Dir
	if dir == "" {
		lv.token.Err = errors.New("no admin token: tool_integrity.dir (or ca.dir, which it defaults beside) is not set")
	} else {
		lv.token.Path = filepath.Join(dir, config.AdminTokenFile)
		if tok, err := adminToken(dir); err != nil {
			lv.token.Err = err
		} else {
			sum := sha256.Sum256([]byte(tok))
			lv.token.Sum = sum[:]
		}
	}
	if lv.token.Err != nil {
		a.log.Warn("live view (/observe, /ui) off: "+lv.token.Err.Error(), "err", lv.token.Err)
	}
	a.admin.Serve(admin.Sources{
		Log:       a.log,
		Hub:       lv.hub,
		Token:     lv.token,
		TokenFile: config.AdminTokenFile,
		Routing: func() *engine.Routing {
			if a.eng == nil {
				return nil
			}
			return a.eng.Routing()
		},
		Rules:      a.ruleNames,
		Tools:      func() *integrity.Guard { return a.tools.Load() },
		ToolsToken: func() []byte { return a.adminToken },
		Audit:      func() *audit.Store { return a.audit.Load() },
		AuditReady: a.auditReady,
		ConfigDump: a.configDump,
		Inventory:  a.inventorySnapshot,
	})
}

// ruleNames are the names, actions and modes of the rules of the configuration the appliance
// started with (GET /ui/config).
func (a *Appliance) ruleNames() map[string][]admin.UIRule {
	out := make(map[string][]admin.UIRule, len(a.cfg.RuleSets))
	for name, rules := range a.cfg.RuleSets {
		list := make([]admin.UIRule, 0, len(rules))
		for _, ru := range rules {
			list = append(list, admin.UIRule{Name: ru.Name, Action: ru.Action, Mode: ru.Mode})
		}
		out[name] = list
	}
	return out
}
