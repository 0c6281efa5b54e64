package inventory

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"mcpintercept/telemetry"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func rec(level int, dst, client, path, method, version string, at time.Duration) telemetry.FlowRecord {
	return telemetry.FlowRecord{Time: telemetry.Time{Time: t0.Add(at)}, Level: level, OrigDst: dst, Client: client,
		Path: path, MCPMethod: method, MCPVersion: version, TLS: "plaintext"}
}

// TestRecordsMerge: the records of Level 1 and 2 make covered servers, one per destination,
// name and path, merging versions, methods and clients; what is not MCP is left out.
func TestRecordsMerge(t *testing.T) {
	tb := New(Limits{})
	tb.Record(telemetry.KindExchange, rec(1, "10.0.0.2:8080", "10.1.0.1:4000", "/mcp", "", "2025-06-18", 0))
	tb.Record(telemetry.KindExchange, rec(1, "10.0.0.2:8080", "10.1.0.2:4001", "/mcp", "tools/call", "2025-11-25", time.Second))
	tb.Record(telemetry.KindExchange, rec(1, "10.0.0.2:8080", "10.1.0.1:4002", "/mcp", "tools/call", "2025-11-25", 2*time.Second))
	// Plain HTTP on a Level 1 route, a flow record, a server→client message: not sightings.
	tb.Record(telemetry.KindExchange, rec(1, "10.0.0.2:8080", "10.1.0.3:1", "/favicon.ico", "", "", 3*time.Second))
	tb.Record(telemetry.KindFlow, rec(1, "10.0.0.9:1", "10.1.0.3:1", "", "", "", 3*time.Second))
	s2c := rec(2, "10.0.0.3:3011", "10.1.0.4:1", "/mcp", "sampling/createMessage", "2025-11-25", 3*time.Second)
	s2c.Direction = telemetry.ServerToClient
	tb.Record(telemetry.KindMessage, s2c)
	// A Level 0 record never is (the engine's head observer is how uncovered servers are seen).
	tb.Record(telemetry.KindExchange, rec(0, "10.0.0.4:80", "10.1.0.3:1", "/mcp", "initialize", "", 3*time.Second))
	// Level 2, with a TLS name.
	m := rec(2, "10.0.0.5:8444", "10.1.0.5:1", "/mcp", "initialize", "2025-11-25", 4*time.Second)
	m.SNI, m.TLS, m.Direction = "MCP.Example.", "terminate", telemetry.ClientToServer
	tb.Record(telemetry.KindMessage, m)

	snap := tb.Snapshot()
	if len(snap.Servers) != 2 {
		t.Fatalf("servers %+v, want 2", snap.Servers)
	}
	l2, l1 := snap.Servers[0], snap.Servers[1] // last seen first
	if l2.Destination != "10.0.0.5:8444" || l2.Host != "mcp.example" || !l2.Covered || l2.Level != 2 || l2.TLS != "terminate" {
		t.Errorf("Level 2 server %+v", l2)
	}
	if l1.Destination != "10.0.0.2:8080" || l1.Path != "/mcp" || !l1.Covered || l1.Level != 1 || l1.Seen != 3 ||
		strings.Join(l1.Versions, ",") != "2025-06-18,2025-11-25" || strings.Join(l1.Methods, ",") != "tools/call" ||
		strings.Join(l1.Clients, ",") != "10.1.0.1,10.1.0.2" ||
		!l1.FirstSeen.Equal(t0) || !l1.LastSeen.Equal(t0.Add(2*time.Second)) {
		t.Errorf("Level 1 server %+v", l1)
	}
}

// TestCoveredFollowsLastSighting: a server seen uncovered, then through a Level 1 route (a reload
// added one), is covered; seen uncovered again later, it is not.
func TestCoveredFollowsLastSighting(t *testing.T) {
	tb := New(Limits{})
	head := "POST /mcp HTTP/1.1\r\nHost: 10.0.0.2:3010\r\nMcp-Session-Id: abc\r\n\r\n"
	opaque := func(at time.Duration) func() telemetry.FlowRecord {
		return func() telemetry.FlowRecord {
			return telemetry.FlowRecord{Time: telemetry.Time{Time: t0.Add(at)}, OrigDst: "10.0.0.2:3010", Client: "10.1.0.1:5", TLS: "plaintext"}
		}
	}
	tb.Head(opaque(0), []byte(head))
	if s := tb.Snapshot().Servers; len(s) != 1 || s[0].Covered || s[0].Level != 0 || s[0].Host != "" {
		t.Fatalf("after an opaque sighting: %+v", s)
	}
	tb.Record(telemetry.KindExchange, rec(1, "10.0.0.2:3010", "10.1.0.1:6", "/mcp", "tools/list", "2025-06-18", time.Second))
	if s := tb.Snapshot().Servers; len(s) != 1 || !s[0].Covered || s[0].Level != 1 {
		t.Fatalf("after a Level 1 sighting: %+v", s)
	}
	tb.Head(opaque(2*time.Second), []byte(head))
	if s := tb.Snapshot().Servers; len(s) != 1 || s[0].Covered || s[0].Seen != 3 {
		t.Fatalf("after another opaque sighting: %+v", s)
	}
	// A sighting older than the last one (records of one flow written late) leaves it as it is.
	tb.Record(telemetry.KindExchange, rec(1, "10.0.0.2:3010", "10.1.0.1:6", "/mcp", "tools/list", "", time.Second/2))
	if s := tb.Snapshot().Servers; s[0].Covered || !s[0].LastSeen.Equal(t0.Add(2*time.Second)) {
		t.Fatalf("an older sighting changed the last: %+v", s[0])
	}
	// Bytes that are not MCP are no sighting.
	tb.Head(opaque(3*time.Second), []byte("POST /api HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\r\n{\"a\":1}"))
	if s := tb.Snapshot().Servers; len(s) != 1 {
		t.Fatalf("plain HTTP was recorded: %+v", s)
	}
}

// TestBounds: the table keeps at most MaxServers servers, MaxPerDestination per destination,
// MaxClients clients and MaxVersions versions per server, and counts what it did not keep.
func TestBounds(t *testing.T) {
	tb := New(Limits{MaxServers: 5, MaxPerDestination: 2, MaxClients: 3, MaxVersions: 2, MaxMethods: 2})
	// One destination with many paths (made-up Host values and paths cost it only its share).
	for i := range 10 {
		tb.Record(telemetry.KindExchange, rec(1, "10.0.0.1:80", "10.1.0.1:1", fmt.Sprintf("/p%d", i), "ping", "", 0))
	}
	for i := range 10 {
		tb.Record(telemetry.KindExchange, rec(1, fmt.Sprintf("10.0.0.%d:80", 10+i), "10.1.0.1:1", "/mcp", "ping", "", 0))
	}
	snap := tb.Snapshot()
	if len(snap.Servers) != 5 || snap.ServersNotKept != 15 {
		t.Fatalf("%d servers, %d not kept; want 5, 15", len(snap.Servers), snap.ServersNotKept)
	}
	per := map[string]int{}
	for _, s := range snap.Servers {
		per[s.Destination]++
	}
	if per["10.0.0.1:80"] != 2 {
		t.Errorf("destination 10.0.0.1:80 holds %d servers, want 2", per["10.0.0.1:80"])
	}
	for i := range 10 {
		tb.Record(telemetry.KindExchange, rec(1, "10.0.0.10:80", fmt.Sprintf("10.2.0.%d:1", i), "/mcp",
			fmt.Sprintf("m%d", i), fmt.Sprintf("v%d", i), time.Second))
	}
	for _, s := range tb.Snapshot().Servers {
		if s.Destination != "10.0.0.10:80" {
			continue
		}
		if len(s.Clients) != 3 || s.ClientsNotKept != 8 || len(s.Versions) != 2 || len(s.Methods) != 2 {
			t.Errorf("bounded server %+v", s)
		}
	}
	// Long values are cut.
	long := New(Limits{})
	long.Record(telemetry.KindExchange, rec(1, "10.0.0.1:80", "10.1.0.1:1", "/"+strings.Repeat("a", 5000), "ping", strings.Repeat("v", 100), 0))
	s := long.Snapshot().Servers[0]
	if len(s.Path) > maxField || len(s.Versions[0]) > maxVersion {
		t.Errorf("path %d bytes, version %d bytes", len(s.Path), len(s.Versions[0]))
	}
}

// TestSnapshotIsACopy: the snapshot's slices are not the table's.
func TestSnapshotIsACopy(t *testing.T) {
	tb := New(Limits{})
	tb.Record(telemetry.KindExchange, rec(1, "10.0.0.1:80", "10.1.0.1:1", "/mcp", "ping", "v1", 0))
	s := tb.Snapshot()
	s.Servers[0].Clients[0] = "x"
	if tb.Snapshot().Servers[0].Clients[0] != "10.1.0.1" {
		t.Fatal("the snapshot shares the table's clients")
	}
}

// TestRecordRepeatAllocs: the sink runs for every Level 1 exchange and Level 2 client message,
// so a sighting of a server and client already in the table allocates nothing.
func TestRecordRepeatAllocs(t *testing.T) {
	tb := New(Limits{})
	r := telemetry.FlowRecord{Level: 2, Direction: telemetry.ClientToServer, OrigDst: "10.0.0.1:3000", Path: "/mcp",
		Client: "10.0.0.2:40000", MCPVersion: "2025-11-25", MCPMethod: "tools/call", TLS: "plaintext"}
	tb.Record(telemetry.KindMessage, r)
	if n := testing.AllocsPerRun(100, func() { tb.Record(telemetry.KindMessage, r) }); n != 0 {
		t.Errorf("a repeated sighting allocates %v times", n)
	}
	if s := tb.Snapshot(); len(s.Servers) != 1 || len(s.Servers[0].Clients) != 1 || s.Servers[0].Clients[0] != "10.0.0.2" {
		t.Fatalf("snapshot %+v", s)
	}
}
