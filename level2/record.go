package level2

import (
	"time"

	"mcpintercept/exchange"
	"mcpintercept/mcp"
	"mcpintercept/policy"
)

// emit hands r to the flow's Record (none: records are not kept).
func (s *conn) emit(r *Record) {
	if s.f.Record != nil {
		s.f.Record(r)
	}
}

// newRecord starts the record of m.
func newRecord(s *conn, x *exchange.Exchange, st *xstate, m *mcp.Message, dir string) *Record {
	r := &Record{
		Time: time.Now(), Direction: dir, Kind: m.Kind.String(), ID: m.IDText(), rawID: m.ID, Method: m.Method,
		Version: st.version, HTTPMethod: x.Req.Method, Path: st.path, Decision: policy.ActionAllow,
		Caller: policy.CallerFrom(x.Get(policy.CallerKey{})),
	}
	if len(m.ID) > 0 {
		r.key = idKey(m)
	}
	if dir == ClientToServer {
		r.Time = st.start
	}
	if n := m.Name(); n != "" {
		r.Name = mcp.RedactURI(n)
	}
	if m.Kind == mcp.KindResponse || m.Kind == mcp.KindError {
		if req := st.byID[idKey(m)]; req != nil {
			r.Method, r.Name = req.Method, req.Name
		}
	}
	return r
}
