package level1

import (
	"bytes"
	"slices"
	"testing"
)

// FuzzGuards: the checks the Classifier runs on every head take any head the framing accepts, and
// never let h2c, or a protocol nobody asked for, through.
func FuzzGuards(f *testing.F) {
	for _, s := range []string{
		"GET / HTTP/1.1\r\nHost: a\r\n\r\n",
		"GET /ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket, h2c\r\n\r\n",
		"GET /mcp HTTP/1.1\r\nHost: x\r\nHTTP2-Settings: AAMAAABk\r\n\r\n",
		"CONNECT x:443 HTTP/1.1\r\nHost: x:443\r\n\r\n",
		"POST /mcp HTTP/1.1\r\nHost: [::1]:8080\r\nContent-Type: application/vnd.x+json\r\nMcp-Method: a\r\nMcp-Method: b\r\nMCP-Protocol-Version: 2025-11-25\r\nContent-Length: 0\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r := NewReader(bytes.NewReader(data), Limits{MaxHeaderBytes: 2048, MaxHeaders: 16, MaxChunkLine: 128})
		h, err := r.ReadRequestHead()
		if err != nil {
			return
		}
		info := Classify(h)
		protos, asked := h.UpgradeProtocols()
		if _, ok := upgradeVerdict(protos, []string{"websocket"}); ok && (slices.Contains(protos, "h2c") || !asked && len(protos) > 0) {
			t.Fatalf("protocols %q allowed", protos)
		}
		hostVerdict(h, "x")
		strictVerdict(h, info)
	})
}
