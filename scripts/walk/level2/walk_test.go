// Package walklevel2 is scripts/walk.sh's Level 2 chain: level1's classifier and level2's stage
// (level2.Flow.Stage) behind exchange.Serve on loopback, the chain of level2's
// BenchmarkExchangeLevel2. It uses only the stable API (level2.Flow, (*Flow).Stage,
// exchange.Serve), so that it builds on any tree the walk is run on.
package walklevel2

import (
	"context"
	"net"
	"testing"
	"time"

	"mcpintercept/exchange"
	"mcpintercept/level1"
	"mcpintercept/level2"
	"mcpintercept/policy"
	"mcpintercept/scripts/walk/harness"
)

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
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	sessions := level2.NewSessions(0)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		u, err := net.Dial("tcp", up)
		if err != nil {
			return
		}
		f := &level2.Flow{Rules: func() level2.Evaluator { return set }, Sessions: sessions, Record: func(*level2.Record) {}}
		exchange.Serve(context.Background(), c, u, []exchange.Stage{level1.NewClassifier(level1.Guards{}), f.Stage()}, exchange.Options{}, nil)
	}()
	harness.Run(t, ln.Addr().String(), 100*time.Millisecond)
}
