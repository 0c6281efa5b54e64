package admin

import (
	"net/http"

	"mcpintercept/audit"
)

// serveAudit adds the audit endpoints to the admin listener. The checkpoint is what an operator
// ships off the box (a log cut after it no longer verifies against it), the public key what
// verifies it.
func (h *handlers) serveAudit(a *Server) {
	text := func(get func(*audit.Store) []byte) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			s := h.Audit()
			if s == nil {
				http.Error(w, "audit is off: no route is audited", http.StatusNotFound)
				return
			}
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.Header().Set("Cache-Control", "no-store")
			w.Write(get(s))
		}
	}
	a.handle("GET /audit/checkpoint", text(func(s *audit.Store) []byte { return s.Checkpoint() }))
	a.handle("GET /audit/pubkey", text(func(s *audit.Store) []byte { return []byte(s.PublicKey() + "\n") }))
}
