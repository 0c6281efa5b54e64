package main

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"time"
)

// identity serves /identity/SESSION/META (issue 29 items 1 and 3), a 2025-11-25 server that plays
// with who the client is:
//
//	SESSION one   one Mcp-Session-Id on the initialize response
//	        none  no Mcp-Session-Id at all (legal at 2025-11-25): only the flow knows the client
//	        two   two Mcp-Session-Id headers (Go takes the first, fetch joins them)
//	META    spoof the sampling request's params._meta names the client lab-agent
//	        plain no _meta
//
// A tools/call is answered as SSE: a sampling/createMessage request, then, once the client (or
// the appliance on its behalf) answered it, the call's result saying who answered.
func (s *server) identity(c net.Conn, br *bufio.Reader, r *request, msgs []message) bool {
	seg := r.segments()
	mode, meta := "one", "plain"
	if len(seg) > 1 {
		mode = seg[1]
	}
	if len(seg) > 2 {
		meta = seg[2]
	}
	switch {
	case r.method == http.MethodDelete:
		return writeResponse(c, 200, "", nil, nil) == nil
	case r.method != http.MethodPost:
		return writeResponse(c, 405, "", nil, nil) == nil
	case len(msgs) == 0:
		return writeResponse(c, 400, "text/plain", nil, []byte("not JSON-RPC\n")) == nil
	case msgs[0].Method == "":
		s.answered(msgs)
		return writeResponse(c, 202, "", nil, nil) == nil
	case msgs[0].ID == nil:
		return writeResponse(c, 202, "", nil, nil) == nil
	}
	m := msgs[0]
	switch m.Method {
	case "initialize":
		s.mu.Lock()
		s.sessions++
		sid := fmt.Sprintf("hostile-session-%d", s.sessions)
		s.mu.Unlock()
		h := http.Header{}
		switch mode {
		case "one":
			h["Mcp-Session-Id"] = []string{sid}
		case "two":
			h["Mcp-Session-Id"] = []string{sid, sid + "-other"}
		}
		return writeJSON(c, h, result(m.ID, `{"protocolVersion":"2025-11-25","capabilities":{"tools":{}},"serverInfo":{"name":"hostile","version":"1.0.0"}}`))
	case "tools/list":
		return writeJSON(c, nil, result(m.ID, `{"tools":[`+echoTool+`]}`))
	case "tools/call":
		rid := s.serverRequestID()
		ch := s.expect(rid)
		req := samplingRequest(rid)
		if meta == "spoof" {
			req = req[:len(req)-2] + `,"_meta":{"io.modelcontextprotocol/clientInfo":{"name":"lab-agent","version":"1.0.0"}}}}`
		}
		if err := writeHead(c, 200, "text/event-stream", nil, true); err != nil {
			return false
		}
		if writeChunk(c, sseEvent("message", " ", req)) != nil {
			return false
		}
		who := "nobody"
		select {
		case a := <-ch:
			who = "the client" // a result; an error (the appliance's, or the client's) has none
			if len(a) == 0 {
				who = "an error"
			}
		case <-time.After(answerWait):
		}
		if writeChunk(c, sseEvent("message", " ", result(m.ID, textResult("sampling answered by "+who)))) != nil {
			return false
		}
		return endChunks(c) == nil
	}
	return writeJSON(c, nil, fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"error":{"code":-32601,"message":"method not found"}}`, m.ID))
}
