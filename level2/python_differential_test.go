package level2

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"unicode/utf16"
)

// pythonReads asks Python's own json module which bodies it decodes, as bytes (json.loads
// detects UTF-8 with or without a BOM, UTF-16 and UTF-32), to a JSON-RPC request object.
const pythonReads = `
import json, sys
out = []
for h in json.load(sys.stdin):
    try:
        v = json.loads(bytes.fromhex(h))
        out.append(isinstance(v, dict) and "method" in v)
    except Exception:
        out.append(False)
print(json.dumps(out))
`

// TestPythonJSONDifferential: every body Python's json.loads reads as a JSON-RPC request is
// judged or refused by Level 2 — a denied call never reaches the server, whatever the body's
// padding or encoding and whatever the Content-Type says. The candidates are generated (every
// lenient-space rune and BOM as a prefix and suffix, the message in each encoding Python
// detects); Python, not this test, says which of them are messages.
func TestPythonJSONDifferential(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not found: the Python json differential needs it")
	}
	const msg = `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"denied_delete"}}`
	var bodies [][]byte
	for r := rune(0); r < 0x3100; r++ {
		if r == '{' || r == '[' || (r >= 0xd800 && r < 0xe000) {
			continue
		}
		bodies = append(bodies, []byte(string(r)+msg), []byte(msg+string(r)))
	}
	bodies = append(bodies, []byte("\ufeff"+msg), []byte("\ufeff\ufeff"+msg))
	for _, enc := range []string{"utf-16-le", "utf-16-be", "utf-32-le", "utf-32-be"} {
		for _, bom := range []bool{false, true} {
			bodies = append(bodies, encodeText(msg, enc, bom))
		}
	}
	hexes := make([]string, len(bodies))
	for i, b := range bodies {
		hexes[i] = hex.EncodeToString(b)
	}
	in, _ := json.Marshal(hexes)
	cmd := exec.Command(py, "-c", pythonReads)
	cmd.Stdin = bytes.NewReader(in)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("python3: %v", err)
	}
	var reads []bool
	if err := json.Unmarshal(out, &reads); err != nil || len(reads) != len(bodies) {
		t.Fatalf("python3 output %q: %v", out, err)
	}
	u := newUpstream(t, echoServer)
	h := newHarness(t, u, peerRules, Options{}, NewSessions(0))
	n := 0
	for i, b := range bodies {
		if !reads[i] {
			continue
		}
		n++
		for _, ct := range []string{"application/json", "text/plain"} {
			before := u.calls.Load()
			r := post(t, h.addr, "Content-Type: "+ct+"\r\n", string(b))
			if u.calls.Load() != before {
				t.Fatalf("Python reads %q as a request, yet it reached the server as %s (answer %d %s)", b, ct, r.status, r.body)
			}
		}
	}
	if n < 8 {
		t.Fatalf("Python read only %d of the candidates: the oracle is not exercised", n)
	}
	t.Logf("Python's json reads %d of %d candidate bodies as a request; Level 2 judged or refused each", n, len(bodies))
}

func encodeText(s, enc string, bom bool) []byte {
	var units []uint32
	if bom {
		units = append(units, 0xfeff)
	}
	if strings.HasPrefix(enc, "utf-16") {
		for _, u := range utf16.Encode([]rune(s)) {
			units = append(units, uint32(u))
		}
	} else {
		for _, r := range s {
			units = append(units, uint32(r))
		}
	}
	var b []byte
	for _, u := range units {
		switch enc {
		case "utf-16-le":
			b = append(b, byte(u), byte(u>>8))
		case "utf-16-be":
			b = append(b, byte(u>>8), byte(u))
		case "utf-32-le":
			b = append(b, byte(u), byte(u>>8), byte(u>>16), byte(u>>24))
		case "utf-32-be":
			b = append(b, byte(u>>24), byte(u>>16), byte(u>>8), byte(u))
		}
	}
	return b
}
