// Package inventory is the appliance's list of the MCP servers it has seen (GET /inventory,
// `mcpintercept inventory`): every destination, name and path that carried MCP, the versions and
// methods seen there, its clients, when it was first and last seen, and whether a route at Level
// 1 or 2 covers it. Covered servers are learnt from the records Level 1 and 2 write (Table is a
// telemetry.Sink); servers on flows forwarded opaque (Level 0) from the first bytes of their
// first request, which the engine hands over after forwarding them (Table.Head, Recognise).
//
// The table lives in memory and is bounded: servers (in all and per destination, so that one
// destination's made-up Host values and paths cannot fill it), clients, versions and methods per
// server. An update is one short critical section, at most once per exchange (Level 1), client
// message (Level 2) or opaque flow (Level 0); nothing blocks.
package inventory

import (
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"mcpintercept/telemetry"
)

// Limits bound the table. Zero values take the defaults.
type Limits struct {
	MaxServers        int // servers kept in all (1024); later ones are counted, not kept
	MaxPerDestination int // servers (name, path) kept per destination address:port (16)
	MaxClients        int // distinct client addresses kept per server (32); later ones counted
	MaxVersions       int // MCP versions kept per server (8)
	MaxMethods        int // MCP methods kept per server (32)
}

// DefaultLimits are the table's bounds when Limits leaves them zero.
var DefaultLimits = Limits{MaxServers: 1024, MaxPerDestination: 16, MaxClients: 32, MaxVersions: 8, MaxMethods: 32}

func (l Limits) withDefaults() Limits {
	d := DefaultLimits
	if l.MaxServers > 0 {
		d.MaxServers = l.MaxServers
	}
	if l.MaxPerDestination > 0 {
		d.MaxPerDestination = l.MaxPerDestination
	}
	if l.MaxClients > 0 {
		d.MaxClients = l.MaxClients
	}
	if l.MaxVersions > 0 {
		d.MaxVersions = l.MaxVersions
	}
	if l.MaxMethods > 0 {
		d.MaxMethods = l.MaxMethods
	}
	return d
}

// Server is one MCP server as GET /inventory lists it.
type Server struct {
	// Destination is the address:port clients connected to (the record's orig_dst).
	Destination string `json:"destination"`
	// Host is the TLS server name, or the name the client resolved (DNS steering), or on an
	// uninspected flow the Host header's name; "" when there was none or it was the address.
	Host string `json:"host,omitempty"`
	// Path is the request path (no query).
	Path string `json:"path"`
	// Versions are the MCP protocol versions seen (MCP-Protocol-Version, or initialize's).
	Versions []string `json:"versions"`
	// Methods are the MCP methods seen (on an uninspected flow: its first request's only).
	Methods []string `json:"methods"`
	// Tools is the number of tools the server listed, when the tool-integrity guard knows it
	// (routes with tool_pins); absent otherwise.
	Tools *int `json:"tools,omitempty"`
	// Clients are the distinct client addresses seen (at most Limits.MaxClients);
	// ClientsNotKept counts the sightings of further ones.
	Clients        []string `json:"clients"`
	ClientsNotKept int      `json:"clients_not_kept,omitempty"`
	// clients are Clients as the table keeps them: addresses, compared and stored without a
	// string per sighting (Snapshot spells them).
	clients   []netip.Addr
	FirstSeen time.Time `json:"first_seen"`
	LastSeen  time.Time `json:"last_seen"`
	// Covered says a route at Level 1 or 2 read the server's traffic when it was last seen;
	// Level is that level (0: forwarded opaque, recognised from its first request's bytes).
	Covered bool `json:"covered"`
	Level   int  `json:"level"`
	// TLS is the flow's disposition when last seen (plaintext, terminate, ...).
	TLS string `json:"tls,omitempty"`
	// Seen counts the sightings: exchanges (Level 1), client messages (Level 2), flows (Level 0).
	Seen int64 `json:"seen"`
}

// Snapshot is GET /inventory's body.
type Snapshot struct {
	// Servers, the most recently seen first.
	Servers []Server `json:"servers"`
	// ServersNotKept counts the sightings of servers the table had no room for.
	ServersNotKept int64  `json:"servers_not_kept"`
	Limits         Limits `json:"limits"`
}

// Sighting is one observation of an MCP server.
type Sighting struct {
	Time        time.Time
	Destination string // address:port
	Host        string
	Path        string
	Client      string // address (a port is dropped)
	Version     string
	Method      string
	Level       int
	TLS         string
}

type key struct{ dst, host, path string }

// Table is the inventory. It is safe for concurrent use; the zero value is not: use New.
type Table struct {
	lim Limits

	mu      sync.Mutex
	servers map[key]*Server
	perDst  map[string]int
	notKept int64
}

// New is an empty table bounded by lim.
func New(lim Limits) *Table {
	return &Table{lim: lim.withDefaults(), servers: map[key]*Server{}, perDst: map[string]int{}}
}

// Add records one sighting.
func (t *Table) Add(s Sighting) {
	if s.Destination == "" {
		return
	}
	host := strings.ToLower(strings.TrimSuffix(s.Host, "."))
	if ap, err := netip.ParseAddrPort(s.Destination); err == nil && host != "" {
		if a, err := netip.ParseAddr(host); err == nil && a.Unmap() == ap.Addr().Unmap() {
			host = "" // the address itself: nothing the destination does not say
		}
	}
	k := key{s.Destination, clip(host, maxField), clip(s.Path, maxField)}
	var client netip.Addr
	if ap, err := netip.ParseAddrPort(s.Client); err == nil {
		client = ap.Addr().Unmap()
	} else if a, err := netip.ParseAddr(s.Client); err == nil {
		client = a.Unmap()
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.servers[k]
	if e == nil {
		if len(t.servers) >= t.lim.MaxServers || t.perDst[k.dst] >= t.lim.MaxPerDestination {
			t.notKept++
			return
		}
		e = &Server{Destination: k.dst, Host: k.host, Path: k.path, FirstSeen: s.Time, LastSeen: s.Time,
			Versions: []string{}, Methods: []string{}, Clients: []string{}}
		t.servers[k] = e
		t.perDst[k.dst]++
	}
	e.Seen++
	if s.Time.Before(e.FirstSeen) {
		e.FirstSeen = s.Time
	}
	if !s.Time.Before(e.LastSeen) {
		e.LastSeen = s.Time
		e.Level, e.Covered, e.TLS = s.Level, s.Level >= 1, s.TLS
	}
	addBounded(&e.Versions, clip(s.Version, maxVersion), t.lim.MaxVersions)
	addBounded(&e.Methods, clip(s.Method, maxField), t.lim.MaxMethods)
	if client.IsValid() && !slices.Contains(e.clients, client) {
		if len(e.clients) < t.lim.MaxClients {
			e.clients = append(e.clients, client)
		} else {
			e.ClientsNotKept++
		}
	}
}

// addBounded adds v to the set *list when it is new and there is room.
func addBounded(list *[]string, v string, max int) {
	if v == "" || len(*list) >= max || slices.Contains(*list, v) {
		return
	}
	*list = append(*list, v)
}

// Record implements telemetry.Sink: a Level 1 exchange that carried MCP (an MCP method or
// version in its record), or a Level 2 client→server message, is a sighting of a covered
// server. Flow records (Level 0, or refused before any exchange) and server→client messages
// (their request's sighting counts) are not.
func (t *Table) Record(k telemetry.Kind, r telemetry.FlowRecord) {
	if r.Level < 1 || r.Direction == telemetry.ServerToClient {
		return
	}
	switch k {
	case telemetry.KindMessage:
	case telemetry.KindExchange:
		if r.MCPMethod == "" && r.MCPVersion == "" {
			return // plain HTTP on a Level 1 route: not (yet) known to be MCP
		}
	default:
		return
	}
	t.Add(Sighting{Time: r.Time.Time, Destination: r.OrigDst, Host: r.SNI, Path: r.Path, Client: r.Client,
		Version: r.MCPVersion, Method: r.MCPMethod, Level: r.Level, TLS: r.TLS})
}

// Head looks at the first bytes a client sent on a flow forwarded opaque (at most MaxHead;
// they were forwarded already) and, when they are an MCP request, records an uncovered
// sighting. rec gives the flow's record (called only then); head is not kept.
func (t *Table) Head(rec func() telemetry.FlowRecord, head []byte) {
	h, ok := Recognise(head)
	if !ok {
		return
	}
	r := rec()
	host := h.Host
	if host == "" {
		host = r.SNI // the name the client resolved (DNS steering)
	}
	t.Add(Sighting{Time: r.Time.Time, Destination: r.OrigDst, Host: host, Path: h.Path, Client: r.Client,
		Version: h.Version, Method: h.MCPMethod, Level: 0, TLS: r.TLS})
}

// Snapshot is the table now, the most recently seen server first (then by destination, host and
// path).
func (t *Table) Snapshot() Snapshot {
	t.mu.Lock()
	out := Snapshot{Servers: make([]Server, 0, len(t.servers)), ServersNotKept: t.notKept, Limits: t.lim}
	for _, e := range t.servers {
		s := *e
		s.Versions = slices.Clone(e.Versions)
		s.Methods = slices.Clone(e.Methods)
		s.Clients, s.clients = make([]string, len(e.clients)), nil
		for i, a := range e.clients {
			s.Clients[i] = a.String()
		}
		out.Servers = append(out.Servers, s)
	}
	t.mu.Unlock()
	slices.SortFunc(out.Servers, func(a, b Server) int {
		if c := b.LastSeen.Compare(a.LastSeen); c != 0 {
			return c
		}
		if c := strings.Compare(a.Destination, b.Destination); c != 0 {
			return c
		}
		if c := strings.Compare(a.Host, b.Host); c != 0 {
			return c
		}
		return strings.Compare(a.Path, b.Path)
	})
	return out
}

// More implements engine.HeadObserver (package function More).
func (t *Table) More(head []byte) bool { return More(head) }
