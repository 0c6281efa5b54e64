package appliance

import (
	"net/netip"
	"strconv"
	"strings"

	"mcpintercept/integrity"
	"mcpintercept/inventory"
)

// inventorySnapshot is GET /inventory's body: the inventory's table, with the tool count of the
// servers the tool-integrity guard knows (routes with tool_pins; the others' is left out).
func (a *Appliance) inventorySnapshot() inventory.Snapshot {
	if a.inventory == nil {
		return inventory.Snapshot{Servers: []inventory.Server{}}
	}
	snap := a.inventory.Snapshot()
	g := a.tools.Load()
	if g == nil {
		return snap
	}
	tools := map[string]int{}
	for _, ss := range g.Snapshot() {
		n := 0
		for _, d := range ss.Defs {
			if d.Kind == integrity.KindTool && d.Seen != "" && d.State != "removed" {
				n++
			}
		}
		tools[ss.Server] = n
	}
	for i := range snap.Servers {
		s := &snap.Servers[i]
		for _, k := range guardKeys(s) {
			if n, ok := tools[k]; ok {
				s.Tools = &n
				break
			}
		}
	}
	return snap
}

// guardKeys are the integrity.Server keys ("host:port/path") s may be known by: its name when it
// has one, else its address (a plaintext record carries no Host header, which the guard prefers:
// a client that named the server by address is found, one that used a name is not).
func guardKeys(s *inventory.Server) []string {
	ap, err := netip.ParseAddrPort(s.Destination)
	if err != nil {
		return nil
	}
	path := strings.TrimRight(s.Path, "/")
	if path == "" || path[0] != '/' {
		path = "/" + path
	}
	port := ":" + strconv.Itoa(int(ap.Port()))
	addr := ap.Addr().Unmap()
	host := addr.String()
	if addr.Is6() {
		host = "[" + host + "]"
	}
	keys := []string{}
	if s.Host != "" {
		keys = append(keys, s.Host+port+path)
	}
	return append(keys, host+port+path)
}
