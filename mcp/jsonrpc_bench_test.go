package mcp

import (
	"fmt"
	"strings"
	"testing"
)

// toolsCall1K is a tools/call request of about 1 KiB, the shape a client sends (the same bytes
// as Level 2's benchmarks send through a whole exchange).
var toolsCall1K = func() []byte {
	pad := strings.Repeat("lorem ipsum ", 60)
	b := fmt.Sprintf(`{"jsonrpc":"2.0","id":42,"method":"tools/call","params":{"name":"search_documents",`+
		`"arguments":{"query":"quarterly report","limit":10,"filters":{"owner":"alice","tags":["finance","q3"]},"note":%q},`+
		`"_meta":{"progressToken":"p-42","traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}}}`, pad)
	return []byte(b)
}()

func BenchmarkDecode(b *testing.B) {
	b.SetBytes(int64(len(toolsCall1K)))
	b.ReportAllocs()
	for b.Loop() {
		m, err := DecodeMessage(toolsCall1K, DecodeOptions{})
		if err != nil || m.Method != "tools/call" {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodePolicyView adds what a body policy reads: the tool name and the arguments map.
func BenchmarkDecodePolicyView(b *testing.B) {
	b.SetBytes(int64(len(toolsCall1K)))
	b.ReportAllocs()
	for b.Loop() {
		m, err := DecodeMessage(toolsCall1K, DecodeOptions{})
		if err != nil || m.Name() != "search_documents" || m.Arguments() == nil {
			b.Fatal(err)
		}
	}
}
