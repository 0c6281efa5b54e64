package federation

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"mcpintercept/audit"
)

// The per-call overhead of the aggregate against calling the downstream directly, in one run:
//
//	MCPI_AUDIT_BENCH_DIR=/var/tmp go test -run '^$' -bench 'Call/' -benchtime 3000x ./federation/
//
// Both post the same 2026-07-28 tools/call (echo, 1 KiB of text) over a keep-alive connection to
// a Go SDK server (stateless, JSON) on loopback; the federated one goes through the ingress,
// the rules (none), the durable authorization record, the dispatcher and the outcome record.
// The audit directory is MCPI_AUDIT_BENCH_DIR (a disk: fdatasync is the cost that matters) or
// a temporary directory.
func BenchmarkCall(b *testing.B) {
	t := &testing.T{}
	srv, _ := goServer(t, "m", true)
	defer srv.Close()
	dir := os.Getenv("MCPI_AUDIT_BENCH_DIR")
	if dir == "" {
		dir = b.TempDir()
	} else {
		d, err := os.MkdirTemp(dir, "fedbench")
		if err != nil {
			b.Fatal(err)
		}
		defer os.RemoveAll(d)
		dir = d
	}
	store, err := audit.Open(audit.Config{Dir: dir}, slog.New(slog.DiscardHandler))
	var st Appender = store
	if os.Getenv("FAKESTORE") != "" {
		st = nopStore{}
	}
	if err != nil {
		b.Fatal(err)
	}
	defer store.Close(context.Background())
	svc, err := Start(Options{Listen: "127.0.0.1:0", Refresh: time.Hour, Limits: Limits{Pages: 8, Tools: 100, Bytes: 1 << 20},
		AggregateTools: 100, RequestBytes: 1 << 20, ResultBytes: 1 << 20,
		Downstreams: []*Downstream{NewDownstream("m", srv.URL, 30*time.Second, nil, nil, nil)},
		Store:       st, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	defer svc.Shutdown(context.Background())
	for svc.Ready() != nil {
		time.Sleep(time.Millisecond)
	}
	text := strings.Repeat("x", 1024)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	post := func(b *testing.B, url, name string) {
		body := fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":%q,"arguments":{"text":%q},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`, name, text)
		req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("MCP-Protocol-Version", "2026-07-28")
		req.Header.Set("Mcp-Method", "tools/call")
		req.Header.Set("Mcp-Name", name)
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		out, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(out), `"result"`) {
			b.Fatalf("%s: %d %s", name, resp.StatusCode, out)
		}
	}
	for _, c := range []struct{ name, url, tool string }{
		{"direct", srv.URL, "echo"},
		{"federated", fedURL(svc), "m.echo"},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				post(b, c.url, c.tool)
			}
		})
		b.Run(c.name+"-parallel16", func(b *testing.B) {
			b.SetParallelism(8) // 8 × GOMAXPROCS(2) = 16 concurrent callers
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					post(b, c.url, c.tool)
				}
			})
		})
	}
}

type nopStore struct{}

func (nopStore) Append(context.Context, *audit.Record) (audit.Receipt, error) {
	return audit.Receipt{Seq: 1}, nil
}
