package federation

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"mcpintercept/mcp"
)

// FuzzCatalogPage: whatever a downstream's tools/list answer holds, the catalog either refuses it
// or holds only named objects, and every published definition is valid JSON naming the
// aggregate name (nothing of the downstream's bytes can break out of its entry).
func FuzzCatalogPage(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":2,"result":{"tools":[{"name":"echo","inputSchema":{"type":"object"}}]}}`,
		`{"jsonrpc":"2.0","id":2,"result":{"tools":[{"name":"a"},{"name":"a"}]}}`,
		`{"jsonrpc":"2.0","id":2,"result":{"tools":[{"name":"a\u0000b"}]}}`,
		`{"jsonrpc":"2.0","id":2,"result":{"tools":[{"description":"x","name":"x.y","name2":"z"}],"nextCursor":"c"}}`,
		`{"jsonrpc":"2.0","id":2,"result":{"tools":{}}}`,
		`{"jsonrpc":"2.0","id":2,"result":{"tools":[1,"s",null]}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		m, err := mcp.DecodeMessage(body, mcp.DecodeOptions{})
		if err != nil || m.Kind != mcp.KindResponse {
			return
		}
		c := &Catalog{Downstream: "d"}
		if err := c.addPage(m.Result, map[string]bool{}, 100); err != nil {
			return
		}
		g, err := Build([]*Catalog{c}, nil, 1000)
		if err != nil {
			return
		}
		for _, tl := range g.Tools {
			if err := mcp.ValidateJSON(tl.Def, mcp.DefaultMaxDepth); err != nil {
				t.Fatalf("published definition is not JSON: %s: %v", tl.Def, err)
			}
			if name, _ := mcp.StringMember(tl.Def, "name"); name != tl.Name || tl.Name != "d."+tl.Original {
				t.Fatalf("published %q as %q (def name %q)", tl.Original, tl.Name, name)
			}
		}
	})
}

// FuzzIngress: any request body gets a bounded answer: 202 for a notification, else a JSON-RPC
// message (valid JSON) that echoes the request's id when it had one; never a panic.
func FuzzIngress(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"c","version":"1"}}}`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		`{"jsonrpc":"2.0","id":"x","method":"tools/list"}`,
		`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"d.t","arguments":{"a":1}}}`,
		`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"d.t","arguments":[1]}}`,
		`{"jsonrpc":"2.0","id":4,"method":"server/discover","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}`,
		`[{"jsonrpc":"2.0","id":1,"method":"ping"}]`,
		`{"jsonrpc":"2.0","id":1,"method":"ping","id":2}`,
		`{"jsonrpc":"2.0","id":5,"result":{}}`,
	} {
		f.Add([]byte(s), "")
	}
	f.Add([]byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"d.t"}}`), "2026-07-28")
	s := &Service{o: Options{RequestBytes: 1 << 16, ResultBytes: 1 << 16}, reg: &Registry{}, log: slog.New(slog.DiscardHandler)}
	down := NewDownstream("d", "http://127.0.0.1:1/mcp", time.Second, nil, nil, nil)
	s.disp = NewDispatcher(s.reg, nopStore{}, []*Downstream{down}, 1<<16, nil, nil, s.log)
	g, _ := Build([]*Catalog{{Downstream: "d", Version: "2026-07-28", Tools: []CatalogTool{{Name: "t", Def: []byte(`{"name":"t"}`)}}}}, nil, 10)
	s.reg.Publish(g, nil)
	h := s.ingress()
	f.Fuzz(func(t *testing.T, body []byte, version string) {
		req := httptest.NewRequest(http.MethodPost, Path, strings.NewReader(string(body)))
		req.Header.Set("Content-Type", "application/json")
		if version != "" {
			req.Header.Set("MCP-Protocol-Version", version)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code == http.StatusAccepted {
			if w.Body.Len() != 0 {
				t.Fatalf("202 with a body: %q", w.Body)
			}
			return
		}
		out := w.Body.Bytes()
		m, err := mcp.DecodeMessage(out, mcp.DecodeOptions{})
		if err != nil {
			t.Fatalf("answer is not a JSON-RPC message: %q: %v", out, err)
		}
		if in, err := mcp.DecodeMessage(body, mcp.DecodeOptions{MaxSize: 1 << 16}); err == nil && in.Kind == mcp.KindRequest && w.Code == http.StatusOK {
			if string(m.ID) != string(in.ID) {
				t.Fatalf("answer id %s for request id %s", m.ID, in.ID)
			}
		}
	})
}
