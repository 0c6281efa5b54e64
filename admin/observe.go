package admin

import (
	"crypto/sha256"
	"crypto/subtle"
	_ "embed"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	"mcpintercept/audit/auditstage"
	"mcpintercept/engine"
	"mcpintercept/level2"
	"mcpintercept/telemetry"
)

// The live view: every record the engine writes also goes to a telemetry.Hub, which GET /observe
// (JSON lines, or server-sent events for the page) and the /ui page read from. Both need the
// admin token (<tool_integrity.dir>/admin.token, made on first start whether or not a route
// pins tool definitions): as "Authorization: Bearer <token>", or, for the page, as the cookie
// GET /ui/login?token=<token> sets (HttpOnly, SameSite=Strict) before it redirects to /ui.

// LiveHistory is how many recent records the hub keeps for ?since= (and the page's first view).
const LiveHistory = 1024

// observeCookie carries the admin token for the page (the admin listener is on loopback).
const observeCookie = "mcpi_admin"

// maxObserveBuffer bounds ?buffer=, a subscriber's buffer of records.
const maxObserveBuffer = telemetry.DefaultLiveBuffer

//go:embed ui/index.html
var uiPage []byte

// serveObserve adds GET /observe, /ui, /ui/login and /ui/config to the admin listener. Without a
// token (Token.Err) those endpoints answer 503 with the reason; the rest of the listener works.
func (h *handlers) serveObserve(a *Server) {
	a.handle("GET /observe", http.HandlerFunc(h.serveObserveStream))
	a.handle("GET /ui", http.HandlerFunc(h.serveUI))
	a.handle("GET /ui/login", http.HandlerFunc(h.serveUILogin))
	a.handle("GET /ui/config", http.HandlerFunc(h.serveUIConfig))
}

// check answers 503 or 401 and returns false unless the request carries the admin token (bearer
// or the page's cookie).
func (lv *Token) check(w http.ResponseWriter, r *http.Request) bool {
	if lv.Err != nil {
		http.Error(w, "live view unavailable: "+lv.Err.Error(), http.StatusServiceUnavailable)
		return false
	}
	tok := ""
	if scheme, t, ok := strings.Cut(r.Header.Get("Authorization"), " "); ok && strings.EqualFold(scheme, "Bearer") {
		tok = strings.TrimSpace(t)
	} else if c, err := r.Cookie(observeCookie); err == nil {
		tok = c.Value
	}
	if tok != "" && lv.valid(tok) {
		return true
	}
	w.Header().Set("WWW-Authenticate", `Bearer realm="mcpintercept-admin"`)
	http.Error(w, "needs the admin token: Authorization: Bearer <the contents of "+lv.Path+">, or open /ui/login?token=<it> once in the browser", http.StatusUnauthorized)
	return false
}

func (lv *Token) valid(tok string) bool {
	sum := sha256.Sum256([]byte(tok))
	return len(lv.Sum) > 0 && subtle.ConstantTimeCompare(sum[:], lv.Sum) == 1
}

// ObserveFilter is what GET /observe's query selects; the zero value passes every record.
type ObserveFilter struct {
	// Client is an address ("10.0.0.5"), an address and port, a prefix ("10.0.0.0/24") or a
	// process name (the record's process.comm, when the steering knows it).
	Client string
	// Tool is the record's mcp_name (the tool of a tools/call, a prompt's or resource's name).
	Tool string
	// Decisions are the decisions passed (allow, deny, rate_limited, would_deny,
	// would_rate_limit: telemetry.ParseDecisions' values); empty: all.
	Decisions []string
	// Route is the name of the route the record's connection takes under the routing now.
	Route string
	// Since passes records from that time on (and replays the recent ones, see liveHistory).
	Since time.Time
	// Until passes records before that time only (a flow log read back; a live stream's records
	// are all later).
	Until time.Time
	// Kinds are the record kinds passed (flow, exchange, message); empty: all.
	Kinds []string
}

// ParseObserveQuery reads the filter from a query (client, tool, decision, route, since, until,
// kind); since and until are RFC 3339 or a duration back from now. A value outside a key's set
// (decision dney) is an error naming the valid ones.
func ParseObserveQuery(q url.Values, now time.Time) (ObserveFilter, error) {
	f := ObserveFilter{Client: q.Get("client"), Tool: q.Get("tool"), Route: q.Get("route")}
	split := func(s string) []string {
		var out []string
		for _, v := range strings.Split(s, ",") {
			if v = strings.TrimSpace(v); v != "" {
				out = append(out, v)
			}
		}
		return out
	}
	var err error
	if f.Decisions, err = telemetry.ParseDecisions(q.Get("decision")); err != nil {
		return f, err
	}
	f.Kinds = split(q.Get("kind"))
	for _, k := range f.Kinds {
		if k != "flow" && k != "exchange" && k != "message" {
			return f, fmt.Errorf("kind %q: want flow, exchange or message", k)
		}
	}
	if s := q.Get("since"); s != "" {
		t, err := ParseSince(s, now)
		if err != nil {
			return f, err
		}
		f.Since = t
	}
	if s := q.Get("until"); s != "" {
		t, err := ParseSince(s, now)
		if err != nil {
			return f, fmt.Errorf("until %s", strings.TrimPrefix(err.Error(), "since "))
		}
		f.Until = t
	}
	if f.Client != "" && strings.Contains(f.Client, "/") {
		if _, err := netip.ParsePrefix(f.Client); err != nil {
			return f, fmt.Errorf("client %q: not a prefix: %v", f.Client, err)
		}
	}
	return f, nil
}

// ParseSince reads an RFC 3339 time or a positive duration back from now ("10m").
func ParseSince(s string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return time.Time{}, fmt.Errorf("since %q: want an RFC 3339 time or a duration such as 10m", s)
	}
	return now.Add(-d), nil
}

// matchRecord says whether f passes the live record; route is the name of the route its
// connection takes (computed only when f asks for one).
func (f *ObserveFilter) matchRecord(l *telemetry.Live, route func() string) bool {
	return f.Match(&l.Record, l.Kind, route)
}

// Match says whether f passes record r of kind k (telemetry.KindOf for a record read back from a
// flow log); route is the name of the route its connection takes, asked only when f names one
// (nil: a filter naming a route passes nothing).
func (f *ObserveFilter) Match(r *telemetry.FlowRecord, k telemetry.Kind, route func() string) bool {
	if !f.Since.IsZero() && r.Time.Before(f.Since) {
		return false
	}
	if !f.Until.IsZero() && !r.Time.Before(f.Until) {
		return false
	}
	if len(f.Kinds) > 0 && !contains(f.Kinds, k.String()) {
		return false
	}
	if !telemetry.MatchDecision(f.Decisions, r) {
		return false
	}
	if f.Tool != "" && r.MCPName != f.Tool {
		return false
	}
	if f.Client != "" && !matchClient(f.Client, r) {
		return false
	}
	if f.Route != "" && (route == nil || route() != f.Route) {
		return false
	}
	return true
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func matchClient(c string, r *telemetry.FlowRecord) bool {
	if r.Client == c || (r.Process != nil && r.Process.Comm == c) {
		return true
	}
	ap, err := netip.ParseAddrPort(r.Client)
	if err != nil {
		return false
	}
	if p, err := netip.ParsePrefix(c); err == nil {
		return p.Contains(ap.Addr().Unmap())
	}
	if a, err := netip.ParseAddr(c); err == nil {
		return a.Unmap() == ap.Addr().Unmap()
	}
	return false
}

// routeOf is the name of the route a record's connection takes under rt (the engine's choice
// made again from the record: client, destination, SNI; engine.Routing.Select).
func routeOf(rt *engine.Routing, r *telemetry.FlowRecord) string {
	client, err1 := netip.ParseAddrPort(r.Client)
	dst, err2 := netip.ParseAddrPort(r.OrigDst)
	if err1 != nil || err2 != nil || rt == nil {
		return ""
	}
	if rr := rt.Select(client, dst, func() string { return r.SNI }); rr != nil {
		return rr.Name
	}
	// default_route: close refuses the flow; the record is still shown under the default's name.
	if rt.Default != nil {
		return rt.Default.Name
	}
	return engine.DefaultRouteName
}

// observeKeepalive is how often an idle stream gets a line (a blank one, or an SSE comment), so
// that a reader and the proxies between notice a dead connection.
const observeKeepalive = 15 * time.Second

// observeWriteTimeout bounds each write to a reader: one that does not read is dropped by the
// hub, and its handler must not stay blocked in a write after that.
const observeWriteTimeout = 10 * time.Second

// serveObserveStream is GET /observe: the records the filter passes as JSON lines (the flow
// log's encoding), or as server-sent events with ?format=sse (event "record"); a final line
// {"observe":"end","reason":…} (event "end") says why the stream stopped (dropped for falling
// behind, the appliance stopping; "closed" after follow=0's snapshot). ?buffer=N (1..1024) sizes the subscriber's buffer.
func (h *handlers) serveObserveStream(w http.ResponseWriter, r *http.Request) {
	if !h.Token.check(w, r) {
		return
	}
	q := r.URL.Query()
	f, err := ParseObserveQuery(q, time.Now())
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	sse := q.Get("format") == "sse"
	if v := q.Get("format"); v != "" && v != "sse" && v != "jsonl" {
		http.Error(w, fmt.Sprintf("format %q: want jsonl or sse", v), http.StatusBadRequest)
		return
	}
	buf := maxObserveBuffer
	if v := q.Get("buffer"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxObserveBuffer {
			http.Error(w, fmt.Sprintf("buffer %q: want 1 to %d", v, maxObserveBuffer), http.StatusBadRequest)
			return
		}
		buf = n
	}
	rc := http.NewResponseController(w)
	if sse {
		w.Header().Set("Content-Type", "text/event-stream")
	} else {
		w.Header().Set("Content-Type", "application/x-ndjson")
	}
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	sub := h.Hub.SubscribeSince(buf, f.Since, !f.Since.IsZero())
	defer sub.Close()
	// follow=0: only the replayed history, then the end line (a snapshot: the page's printable
	// view, a headless browser).
	if q.Get("follow") == "0" {
		sub.Close()
	}
	w.WriteHeader(http.StatusOK)
	rc.Flush()

	var line []byte
	write := func(b []byte) bool {
		rc.SetWriteDeadline(time.Now().Add(observeWriteTimeout))
		_, err := w.Write(b)
		return err == nil
	}
	emit := func(l *telemetry.Live) bool {
		cur := &l.Record
		if !f.matchRecord(l, func() string { return routeOf(h.Routing(), cur) }) {
			return true
		}
		line = line[:0]
		if sse {
			line = append(line, "event: record\ndata: "...)
			line = l.Record.AppendJSON(line)
			line = append(line, "\n\n"...)
		} else {
			line = append(l.Record.AppendJSON(line), '\n')
		}
		return write(line)
	}
	end := func(reason string) {
		b := []byte(`{"observe":"end","reason":` + strconv.Quote(reason) + "}")
		if sse {
			b = append(append([]byte("event: end\ndata: "), b...), "\n\n"...)
		} else {
			b = append(b, '\n')
		}
		write(b)
		rc.Flush()
	}
	tick := time.NewTicker(observeKeepalive)
	defer tick.Stop()
	for {
		select {
		case l := <-sub.C:
			if !emit(&l) {
				return
			}
			if len(sub.C) == 0 {
				if rc.Flush() != nil {
					return
				}
			}
		case <-sub.Done():
			for len(sub.C) > 0 { // what was buffered before the drop
				l := <-sub.C
				if !emit(&l) {
					return
				}
			}
			reason := sub.Reason()
			if reason == "" {
				reason = "closed"
			}
			end(reason)
			return
		case <-tick.C:
			ka := []byte("\n")
			if sse {
				ka = []byte(": keepalive\n\n")
			}
			if !write(ka) || rc.Flush() != nil {
				return
			}
		case <-r.Context().Done():
			return
		}
	}
}

// serveUI is GET /ui: the one embedded page (inline script and style, nothing fetched from
// elsewhere): the map of clients → servers → tools, the calls with a detail pane, the counts,
// denials, quarantined tools, routes and rule names, all from /observe, /tools and /ui/config.
func (h *handlers) serveUI(w http.ResponseWriter, r *http.Request) {
	if !h.Token.check(w, r) {
		return
	}
	hdr := w.Header()
	hdr.Set("Content-Type", "text/html; charset=utf-8")
	hdr.Set("Cache-Control", "no-store")
	hdr.Set("X-Content-Type-Options", "nosniff")
	hdr.Set("X-Frame-Options", "DENY")
	hdr.Set("Content-Security-Policy", uiCSP)
	w.Write(uiPage)
}

// uiCSP is the page's Content-Security-Policy: its own inline script and style, requests to the
// listener only (the map is SVG the script draws), no framing.
const uiCSP = "default-src 'self'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src 'self' data:; frame-ancestors 'none'"

// serveUILogin is GET /ui/login?token=…: a valid token becomes the page's cookie and the browser
// goes to /ui (so the token leaves the address bar).
func (h *handlers) serveUILogin(w http.ResponseWriter, r *http.Request) {
	lv := &h.Token
	if lv.Err != nil {
		http.Error(w, "live view unavailable: "+lv.Err.Error(), http.StatusServiceUnavailable)
		return
	}
	tok := strings.TrimSpace(r.URL.Query().Get("token"))
	if !lv.valid(tok) {
		http.Error(w, "wrong or missing token: open /ui/login?token=<the contents of "+lv.Path+">", http.StatusUnauthorized)
		return
	}
	http.SetCookie(w, &http.Cookie{Name: observeCookie, Value: tok, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode})
	w.Header().Set("Cache-Control", "no-store")
	next := "/ui"
	if r.URL.Query().Get("snapshot") == "1" {
		next = "/ui?snapshot=1"
	}
	http.Redirect(w, r, next, http.StatusSeeOther)
}

// UIConfig is GET /ui/config: the loaded routes and the names of the rules, no expressions (they
// may hold literals an operator would not show) and no secrets.
type UIConfig struct {
	Routes       []UIRoute           `json:"routes"`
	DefaultRoute string              `json:"default_route"`
	RuleSets     map[string][]UIRule `json:"rule_sets"`
	ToolPins     bool                `json:"tool_pins"`
}

// UIRoute is one route as the page shows it.
type UIRoute struct {
	Name         string   `json:"name"`
	Destinations []string `json:"destinations,omitempty"`
	Ports        []string `json:"ports,omitempty"`
	SNI          []string `json:"sni,omitempty"`
	Clients      []string `json:"clients,omitempty"`
	TLS          string   `json:"tls"`
	Level        int      `json:"level"`
	RuleSet      string   `json:"rule_set,omitempty"`
	ToolPins     string   `json:"tool_pins,omitempty"`
	Audit        bool     `json:"audit,omitempty"`
}

// UIRule is one rule's name, action and mode.
type UIRule struct {
	Name   string `json:"name"`
	Action string `json:"action"`
	Mode   string `json:"mode,omitempty"`
}

func (h *handlers) serveUIConfig(w http.ResponseWriter, r *http.Request) {
	if !h.Token.check(w, r) {
		return
	}
	out := UIConfig{RuleSets: map[string][]UIRule{}, ToolPins: h.Tools() != nil}
	rt := h.Routing()
	if rt != nil {
		for _, rr := range rt.Routes {
			out.Routes = append(out.Routes, uiRoute(rr))
		}
		switch {
		case rt.DefaultClose:
			out.DefaultRoute = "close"
		case rt.Default != nil:
			out.DefaultRoute = rt.Default.Name
		default:
			out.DefaultRoute = engine.DefaultRouteName
		}
		for name := range rt.RuleSets {
			out.RuleSets[name] = []UIRule{}
		}
	}
	// Rule names from the configuration the appliance started with (a reload's renames show
	// after a restart; the sets themselves are the running ones).
	for name, list := range h.Rules() {
		if _, ok := out.RuleSets[name]; !ok && rt != nil {
			continue
		}
		out.RuleSets[name] = list
	}
	if out.Routes == nil {
		out.Routes = []UIRoute{}
	}
	writeJSON(w, http.StatusOK, out)
}

func uiRoute(r *engine.Route) UIRoute {
	u := UIRoute{Name: r.Name, SNI: r.SNI, TLS: string(r.TLS), Level: r.Level, RuleSet: r.RuleSet,
		ToolPins: string(level2.ToolPinsOf(r.Stages)), Audit: auditstage.Of(r.Stages) != nil}
	for _, p := range r.Destinations {
		u.Destinations = append(u.Destinations, p.String())
	}
	for _, p := range r.Clients {
		u.Clients = append(u.Clients, p.String())
	}
	for _, p := range r.Ports {
		u.Ports = append(u.Ports, portRange(p))
	}
	return u
}

func portRange(p engine.PortRange) string {
	if p.From == p.To {
		return strconv.Itoa(int(p.From))
	}
	return fmt.Sprintf("%d-%d", p.From, p.To)
}
