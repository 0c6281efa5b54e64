package admin

import (
	"fmt"
	"net/http"

	"go.yaml.in/yaml/v3"
)

// ConfigDump is the body of GET /config_dump: the configuration in effect, with the spellings and
// keys of the file (defaults filled in), secrets elided (appliance.DumpConfig says which).
type ConfigDump struct {
	// Path is the file the configuration was loaded from.
	Path string `json:"path" yaml:"path"`
	// Reloaded says whether a reload replaced the configuration the appliance started with.
	Reloaded bool `json:"reloaded" yaml:"reloaded"`
	// Config is the configuration, secrets elided.
	Config any `json:"config" yaml:"config"`
}

// serveConfigDump adds GET /config_dump to the admin listener: JSON, or YAML with ?format=yaml.
// It needs the admin token, as /observe does.
func (h *handlers) serveConfigDump(a *Server) {
	a.handle("GET /config_dump", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !h.Token.check(w, r) {
			return
		}
		out, err := h.ConfigDump()
		if err != nil {
			http.Error(w, "config dump: "+err.Error(), http.StatusInternalServerError)
			return
		}
		switch f := r.URL.Query().Get("format"); f {
		case "", "json":
			writeJSON(w, http.StatusOK, out)
		case "yaml":
			b, err := yaml.Marshal(out)
			if err != nil {
				http.Error(w, "config dump: "+err.Error(), http.StatusInternalServerError)
				return
			}
			w.Header().Set("Content-Type", "application/yaml")
			w.Header().Set("Cache-Control", "no-store")
			w.Write(b)
		default:
			http.Error(w, fmt.Sprintf("format %q: want json or yaml", f), http.StatusBadRequest)
		}
	}))
}
