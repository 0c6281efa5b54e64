package admin

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"mcpintercept/integrity"
)

// ToolApproval is the body of POST /tools/approve.
type ToolApproval struct {
	Server string         `json:"server"`
	Kind   integrity.Kind `json:"kind"`
	Name   string         `json:"name"`
	// Hash, when set, is the definition the operator reviewed (full or a prefix of 12+ hex
	// digits): the approval is refused (409) if the definition seen last is another one.
	Hash string `json:"hash,omitempty"`
}

// ToolEvent is an integrity.Event as the admin listener answers it.
type ToolEvent struct {
	Event   string         `json:"event"`
	Server  string         `json:"server"`
	Kind    integrity.Kind `json:"kind"`
	Name    string         `json:"name"`
	OldHash string         `json:"old_hash,omitempty"`
	NewHash string         `json:"new_hash,omitempty"`
	Fields  []string       `json:"fields,omitempty"`
	Detail  string         `json:"detail,omitempty"`
}

// maxApprovalBody bounds POST /tools/approve's body.
const maxApprovalBody = 64 << 10

// serveTools adds the tool-integrity endpoints to the admin listener: GET /tools (what the guard
// knows, as JSON), GET /tools/pins (a pin file of every definition seen, for review) and POST
// /tools/approve (pins a definition as seen last, which ends its quarantine), which requires the
// admin token.
func (h *handlers) serveTools(a *Server) {
	guard := func(w http.ResponseWriter) *integrity.Guard {
		g := h.Tools()
		if g == nil {
			http.Error(w, "tool integrity is off: no route sets tool_pins", http.StatusNotFound)
		}
		return g
	}
	a.handle("GET /tools", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g := guard(w)
		if g == nil {
			return
		}
		snap := g.Snapshot()
		if snap == nil {
			snap = []integrity.ServerState{}
		}
		writeJSON(w, http.StatusOK, snap)
	}))
	a.handle("GET /tools/pins", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g := guard(w)
		if g == nil {
			return
		}
		b, err := g.PinFile()
		if err != nil {
			http.Error(w, "pin file: "+err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		w.Write(b)
	}))
	a.handle("POST /tools/approve", http.HandlerFunc(h.approveTool))
}

func (h *handlers) approveTool(w http.ResponseWriter, r *http.Request) {
	g := h.Tools()
	if g == nil {
		http.Error(w, "tool integrity is off: no route sets tool_pins", http.StatusNotFound)
		return
	}
	if !authorized(r, h.ToolsToken()) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="mcpintercept-admin"`)
		http.Error(w, "approving needs the admin token: Authorization: Bearer <the contents of tool_integrity.dir/"+h.TokenFile+">", http.StatusUnauthorized)
		return
	}
	var req ToolApproval
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxApprovalBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		http.Error(w, "want a JSON object {\"server\", \"kind\", \"name\"}: "+err.Error(), http.StatusBadRequest)
		return
	}
	if dec.More() {
		http.Error(w, "want one JSON object", http.StatusBadRequest)
		return
	}
	if req.Kind == "" {
		req.Kind = integrity.KindTool
	}
	switch {
	case req.Server == "" || req.Name == "":
		http.Error(w, "server and name are required", http.StatusBadRequest)
		return
	case req.Kind != integrity.KindTool && req.Kind != integrity.KindPrompt && req.Kind != integrity.KindTemplate:
		http.Error(w, fmt.Sprintf("kind %q: want tool, prompt or template", req.Kind), http.StatusBadRequest)
		return
	}
	ev, err := g.ApproveHash(req.Server, req.Kind, req.Name, req.Hash)
	if errors.Is(err, integrity.ErrNotSeenLast) {
		http.Error(w, err.Error(), http.StatusConflict)
		return
	}
	if err != nil {
		// The guard's error says what it does not know; a definition it does know and could not
		// approve (its state not written) is the appliance's failure, not the caller's.
		code := http.StatusNotFound
		if known(g.Snapshot(), req) {
			code = http.StatusInternalServerError
			h.Log.Error("tool integrity: approval failed", "server", req.Server, "kind", req.Kind, "name", req.Name, "err", err)
		}
		http.Error(w, err.Error(), code)
		return
	}
	h.Log.Warn("tool integrity: definition approved by the operator", "server", ev.Server, "kind", ev.DefKind, "name", ev.Name,
		"old_hash", ev.OldHash, "new_hash", ev.NewHash, "fields", ev.Fields, "from", r.RemoteAddr)
	writeJSON(w, http.StatusOK, ToolEvent{Event: ev.Kind, Server: ev.Server, Kind: ev.DefKind, Name: ev.Name,
		OldHash: ev.OldHash, NewHash: ev.NewHash, Fields: ev.Fields, Detail: ev.Detail})
}

// known reports whether the snapshot holds the definition req names.
func known(snap []integrity.ServerState, req ToolApproval) bool {
	for _, s := range snap {
		if s.Server != req.Server {
			continue
		}
		for _, d := range s.Defs {
			if d.Kind == req.Kind && d.Name == req.Name {
				return true
			}
		}
	}
	return false
}
