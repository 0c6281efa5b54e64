package level2

import (
	"strings"
	"testing"

	"mcpintercept/mcp"
)

// FuzzProgressKey: the progress token a request announces and the one a progress notification
// names are read alike (a call's progress is paired with it on any stream), as idKey reads ids
// (the TypeScript SDK looks both up by Number()); only a string or a number is a token.
func FuzzProgressKey(f *testing.F) {
	for _, s := range []string{`"tok"`, `7`, `"7"`, `" 7 "`, `"0x10"`, `16`, `1.5`, `1e0`, `""`, `0`, `null`, `true`, `{}`, `[]`,
		`"\u0037"`, `9007199254740993`, `-0`, `"-0"`, `"Infinity"`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, tok string) {
		req := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","_meta":{"progressToken":` + tok + `}}}`
		note := `{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":` + tok + `,"progress":1}}`
		rm, _, err1 := mcp.Decode([]byte(req), mcp.DecodeOptions{})
		nm, _, err2 := mcp.Decode([]byte(note), mcp.DecodeOptions{})
		if err1 != nil || err2 != nil {
			return
		}
		rk, nk := progressKey(rm[0]), progressKey(nm[0])
		if rk != nk {
			t.Fatalf("token %s: request reads %q, notification %q", tok, rk, nk)
		}
		v := strings.TrimSpace(tok)
		isToken := v != "" && (v[0] == '"' || v[0] == '-' || ('0' <= v[0] && v[0] <= '9'))
		if (rk != "") != isToken {
			t.Fatalf("token %s: key %q", tok, rk)
		}
		// Where the token is also a valid id, it is read as that id is.
		im, _, err := mcp.Decode([]byte(`{"jsonrpc":"2.0","id":`+tok+`,"method":"ping"}`), mcp.DecodeOptions{})
		if err == nil && idKey(im[0]) != rk {
			t.Fatalf("token %s: key %q, as an id %q", tok, rk, idKey(im[0]))
		}
	})
}
