// Package walkengine is scripts/walk.sh's whole-engine chain: an engine.Engine on a loopback
// listener whose one plaintext Level 2 route (two rules) sends every flow to the harness's
// upstream: accept, origin, route choice, disposition, the Level 1 and Level 2 stages, upstream,
// the flow's exit. It uses the engine's exported API as the engine's own tests do; when a later
// tree changes that API, fix this file (walk.sh falls back to the level2 chain meanwhile).
package walkengine

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"testing"
	"time"

	"mcpintercept/chain"
	"mcpintercept/engine"
	"mcpintercept/policy"
	"mcpintercept/scripts/walk/harness"
	"mcpintercept/telemetry"
)

type fixedDst struct{ dst netip.AddrPort }

func (f fixedDst) Origin(*net.TCPConn) (engine.Origin, error) { return engine.Origin{Dst: f.dst}, nil }

type discard struct{}

func (discard) Write(telemetry.FlowRecord) {}

func TestWalk(t *testing.T) {
	if !harness.Enabled() {
		t.Skip("run by scripts/walk.sh (MCPI_WALK=1)")
	}
	set, err := policy.Compile([]policy.RuleSpec{
		{Name: "no-delete", When: `mcp.method == "tools/call" && mcp.name.startsWith("delete_")`, Action: "deny"},
		{Name: "no-etc", When: `mcp.method == "tools/call" && "path" in mcp.arguments && mcp.arguments.path.startsWith("/etc")`, Action: "deny"},
	})
	if err != nil {
		t.Fatal(err)
	}
	up := harness.Upstream(t)
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	eng := engine.New(engine.Options{
		Mechanism: "external", Steering: fixedDst{netip.MustParseAddrPort(up)}, Dialer: &net.Dialer{},
		Limits: engine.Limits{ConnectTimeout: 2 * time.Second}, Flows: discard{}, Metrics: telemetry.NewMetrics(),
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Routing: &engine.Routing{
			Routes:   []*engine.Route{{Name: "l2", TLS: engine.Plaintext, Level: 2, Development: true, RuleSet: "walk"}},
			RuleSets: map[string]engine.RuleSet{"walk": set},
		},
		TLS: engine.TLSOptions{PeekTimeout: 200 * time.Millisecond},
		// The appliance's chain, as every HTTP-aware connection runs it.
		Stages: chain.Stages(chain.Deps{}),
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { eng.Serve(ctx, ln); close(done) }()
	defer func() {
		cancel()
		<-done
		dctx, dcancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer dcancel()
		eng.Drain(dctx)
	}()
	harness.Run(t, ln.Addr().String(), 100*time.Millisecond)
}
