package admin

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"io"
	"log/slog"
	"net/http/httptest"
	"testing"

	"mcpintercept/integrity"
)

// echoDef and testServer are appliance/tools_test.go's: a tool definition and the server that
// lists it.
func echoDef(desc string) integrity.Def {
	return integrity.Def{Kind: integrity.KindTool, Name: "echo",
		Raw: json.RawMessage(`{"name":"echo","description":` + strconvQuote(desc) + `,"inputSchema":{"type":"object"}}`)}
}

func strconvQuote(s string) string { b, _ := json.Marshal(s); return string(b) }

const testServer = "10.200.2.2:3011/mcp"

// FuzzApproveBody: POST /tools/approve answers any body with 400, 404 or 409, and 200 only for the
// one definition the guard knows (then with its event); never a panic, never a 5xx.
func FuzzApproveBody(f *testing.F) {
	for _, s := range []string{
		`{"server":"` + testServer + `","kind":"tool","name":"echo"}`,
		`{"server":"` + testServer + `","name":"echo"}`,
		`{"server":"x","kind":"prompt","name":"echo"}`,
		`{"server":1}`, `[]`, `{"server":"s","name":"n"} {}`, `{"server":"s","name":"n","x":1}`, ``, `{"kind":"template","server":"s","name":"n"}`,
	} {
		f.Add([]byte(s))
	}
	g, err := integrity.Open(integrity.Options{})
	if err != nil {
		f.Fatal(err)
	}
	defer g.Close()
	const token = "0123456789abcdef0123456789abcdef"
	sum := sha256Sum(token)
	h := &handlers{Sources: Sources{Log: slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelError})),
		Tools: func() *integrity.Guard { return g }, ToolsToken: func() []byte { return sum }}}
	rg := g.Route(integrity.RouteOptions{Mode: integrity.ModeEnforce})
	f.Fuzz(func(t *testing.T, body []byte) {
		// Each run starts from a pending echo: approving it leaves it pinned, so observe a new
		// description (pending again under enforce: changed since its pin).
		rg.Observe(integrity.Server{Key: testServer}, "v", []integrity.Def{echoDef(string(body))}, true)
		req := httptest.NewRequest("POST", "/tools/approve", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		w := httptest.NewRecorder()
		h.approveTool(w, req)
		var q ToolApproval
		named := json.Unmarshal(body, &q) == nil && q.Server == testServer && q.Name == "echo" && (q.Kind == "" || q.Kind == integrity.KindTool)
		switch w.Code {
		case 200:
			var ev ToolEvent
			if !named || json.Unmarshal(w.Body.Bytes(), &ev) != nil || ev.Name != "echo" || ev.Event != integrity.EventApproved {
				t.Fatalf("200 for %q: %s", body, w.Body)
			}
		case 400, 404, 409:
		default:
			t.Fatalf("%d for %q: %s", w.Code, body, w.Body)
		}
	})
}

func sha256Sum(s string) []byte { h := sha256.Sum256([]byte(s)); return h[:] }
