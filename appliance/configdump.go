package appliance

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"go.yaml.in/yaml/v3"

	"mcpintercept/config"
)

// GET /config_dump on the admin listener: the configuration in effect, with the spellings and
// keys of the file (defaults filled in), as JSON (or YAML with ?format=yaml). It needs the admin
// token, as /observe does. Values that may be secrets are replaced by Elided: every value of a
// headers map (telemetry.otlp.headers carries collector credentials), any key that names a
// credential (authorization, cookie, password, secret, api key, a token that is not a policy
// setting), and the password of a URL's user information (as xxxxx). Paths to secret files stay: they say
// where a secret is, not what it is.

// Elided replaces a secret value in /config_dump.
const Elided = "[elided]"

// ConfigDump is the body of GET /config_dump.
type ConfigDump struct {
	// Path is the file the configuration was loaded from.
	Path string `json:"path" yaml:"path"`
	// Reloaded says whether a reload replaced the configuration the appliance started with.
	Reloaded bool `json:"reloaded" yaml:"reloaded"`
	// Config is the configuration, secrets elided.
	Config any `json:"config" yaml:"config"`
}

// runningConfig is the configuration in effect: the last one a reload applied, else the one New
// was given. (A reload applies routes, rules and the pin file; the sections it cannot apply
// without a restart are logged as such and are still the file's in the dump.)
func (a *Appliance) runningConfig() (cfg *config.Config, reloaded bool) {
	if c := a.running.Load(); c != nil {
		return c, true
	}
	return a.cfg, false
}

// serveConfigDump adds GET /config_dump to the admin listener.
func (a *Appliance) serveConfigDump() {
	a.admin.Handle("GET /config_dump", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !a.live.check(w, r) {
			return
		}
		cfg, reloaded := a.runningConfig()
		tree, err := DumpConfig(cfg)
		if err != nil {
			http.Error(w, "config dump: "+err.Error(), http.StatusInternalServerError)
			return
		}
		out := ConfigDump{Path: cfg.Path, Reloaded: reloaded, Config: tree}
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

// DumpConfig returns cfg as a tree of maps, lists and scalars keyed as the file is, secrets
// elided (see Elided).
func DumpConfig(cfg *config.Config) (any, error) {
	// Through YAML: the config's own marshallers write the file's spellings (ports, durations,
	// default_route), which encoding/json of the structs would not.
	b, err := yaml.Marshal(cfg)
	if err != nil {
		return nil, fmt.Errorf("marshal: %w", err)
	}
	var tree any
	if err := yaml.Unmarshal(b, &tree); err != nil {
		return nil, fmt.Errorf("unmarshal: %w", err)
	}
	return elide(tree, ""), nil
}

// elide walks v, the value at key, and replaces what may be a secret.
func elide(v any, key string) any {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			switch {
			case strings.EqualFold(key, "headers"):
				// Header values are credentials as often as not (an OTLP collector's
				// Authorization, an API key header).
				if e != nil {
					v[k] = Elided
				}
			case secretKey(k) && e != nil && !isEmpty(e):
				v[k] = Elided
			default:
				v[k] = elide(e, k)
			}
		}
		return v
	case []any:
		for i, e := range v {
			v[i] = elide(e, key)
		}
		return v
	case string:
		return elideURL(v)
	}
	return v
}

// secretKey says whether a key names a credential rather than where one is or how it is used.
func secretKey(k string) bool {
	k = strings.ToLower(strings.ReplaceAll(k, "-", "_"))
	for _, suffix := range []string{"_file", "_dir", "_path", "_url"} {
		if strings.HasSuffix(k, suffix) {
			return false
		}
	}
	switch k {
	case "token_audience", "opaque_tokens", "tokens", "max_header", "record_identity":
		return false // policy settings, not credentials
	}
	for _, s := range []string{"authorization", "cookie", "password", "passwd", "secret", "api_key", "apikey", "token", "bearer", "private_key", "credential"} {
		if strings.Contains(k, s) {
			return true
		}
	}
	return false
}

func isEmpty(v any) bool {
	switch v := v.(type) {
	case string:
		return v == ""
	case map[string]any:
		return len(v) == 0
	case []any:
		return len(v) == 0
	}
	return false
}

// elideURL hides the password of a URL's user information (https://user:pass@host/).
func elideURL(s string) string {
	if !strings.Contains(s, "://") || !strings.Contains(s, "@") {
		return s
	}
	u, err := url.Parse(s)
	if err != nil || u.User == nil {
		return s
	}
	if _, ok := u.User.Password(); !ok {
		return s
	}
	return u.Redacted() // the password as "xxxxx"
}
