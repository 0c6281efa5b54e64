package admin

import (
	"encoding/json"
	"fmt"
	"net/http"

	"mcpintercept/inventory"
)

// serveInventory adds GET /inventory to the admin listener: every MCP server the appliance has
// seen, covered by a Level 1 or 2 route or not (inventory.Snapshot, as JSON). It needs the admin
// token, as /observe does: which servers and clients talk MCP is what an attacker would map first.
func (h *handlers) serveInventory(a *Server) {
	a.handle("GET /inventory", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !h.Token.check(w, r) {
			return
		}
		if h.Inventory == nil {
			http.Error(w, "no inventory on this appliance", http.StatusNotFound)
			return
		}
		writeJSON(w, http.StatusOK, h.Inventory())
	}))
}

// Inventory is GET /inventory (with the admin token): the MCP servers the appliance has seen, and
// the answer as it came.
func (c *Client) Inventory() (inventory.Snapshot, []byte, error) {
	var snap inventory.Snapshot
	b, err := c.do(http.MethodGet, "/inventory", nil, true)
	if err != nil {
		return snap, nil, err
	}
	if err := json.Unmarshal(b, &snap); err != nil {
		return snap, nil, fmt.Errorf("the admin listener's /inventory is not an inventory: %v", err)
	}
	return snap, b, nil
}
