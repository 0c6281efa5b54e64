package credentials

import (
	"net/http"
	"strings"
	"testing"
)

// BenchmarkRequest is one keep-alive round trip through exchange.Serve to a local net/http
// server: with no stage (the baseline), and with the two credentials stages replacing the
// placeholder by the injected credential.
func BenchmarkRequest(b *testing.B) {
	benchStages = true
	defer func() { benchStages = false }()
	for _, tc := range []struct {
		name string
		opts func(t testing.TB) *Options
	}{
		{"none", nil},
		{"inject", func(t testing.TB) *Options { return injectOptions(t, realToken) }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			var o *Options
			if tc.opts != nil {
				o = tc.opts(b)
			}
			r := newRig(b, o, 1, false)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				req, _ := http.NewRequest(http.MethodPost, "http://mcp.test/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
				req.Header.Set("Authorization", "Bearer sandbox-placeholder")
				resp, err := r.c.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				resp.Body.Close()
			}
		})
	}
}
