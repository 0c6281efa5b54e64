package admin

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"

	"mcpintercept/audit"
	"mcpintercept/engine"
	"mcpintercept/integrity"
	"mcpintercept/inventory"
	"mcpintercept/telemetry"
)

// Sources is what the appliance's endpoints read, each through the appliance's own accessor (the
// guard, the audit store and the routing change on a reload).
type Sources struct {
	// Log is the appliance's logger: an approval, and a failed one, are logged there.
	Log *slog.Logger
	// Hub is the live view every record also goes to (GET /observe, the page).
	Hub *telemetry.Hub
	// Token is the admin token GET /observe, /ui, /ui/config, /config_dump and /inventory require.
	Token Token
	// TokenFile is the admin token's file name in tool_integrity.dir, as POST /tools/approve's
	// refusal names it.
	TokenFile string
	// Routing is the engine's routing now; nil before the engine exists.
	Routing func() *engine.Routing
	// Rules are the rule names, actions and modes of the configuration the appliance started
	// with, by rule set (GET /ui/config).
	Rules func() map[string][]UIRule
	// Tools is the tool-integrity guard (nil: no route pins definitions); ToolsToken the SHA-256
	// of the admin token POST /tools/approve requires (empty: none read).
	Tools      func() *integrity.Guard
	ToolsToken func() []byte
	// Audit is the audit store (nil: no route is audited); AuditReady what /readyz requires of it.
	Audit      func() *audit.Store
	AuditReady func() error
	// ConfigDump is GET /config_dump's body: the configuration in effect, secrets elided.
	ConfigDump func() (ConfigDump, error)
	// Inventory is GET /inventory's body: the MCP servers seen (nil: the endpoint answers 404).
	Inventory func() inventory.Snapshot
}

// Token is the admin token as the live view checks it.
type Token struct {
	Sum  []byte // SHA-256 of the token
	Err  error  // why there is none (the live view answers 503 with it)
	Path string // its file, as a 401 names it
}

// Serve adds the appliance's endpoints and the audit readiness check to the listener. Call it
// before Start.
func (a *Server) Serve(src Sources) {
	h := &handlers{Sources: src}
	if src.AuditReady != nil {
		a.AddReadiness("audit", src.AuditReady)
	}
	h.serveAudit(a)
	h.serveTools(a)
	h.serveObserve(a)
	h.serveConfigDump(a)
	h.serveInventory(a)
}

// handlers are the appliance's endpoints over what Sources reads.
type handlers struct {
	Sources
}

// authorized checks the request's bearer token against the admin token in constant time (both
// hashed first, so that the comparison does not depend on the length either).
func authorized(r *http.Request, token []byte) bool {
	if len(token) == 0 {
		return false
	}
	h := r.Header.Get("Authorization")
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	sum := sha256.Sum256([]byte(strings.TrimSpace(tok)))
	return subtle.ConstantTimeCompare(sum[:], token) == 1
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}
