package engine

import (
	"testing"

	"mcpintercept/level2"
	"mcpintercept/telemetry"
)

// TestDirectionNames: the recorder observes a message's request duration only for
// client→server records, by the value Level 2 writes into the record's direction; the two
// packages must spell the directions alike or the duration metric stops for Level 2 silently.
func TestDirectionNames(t *testing.T) {
	if level2.ClientToServer != telemetry.ClientToServer || level2.ServerToClient != telemetry.ServerToClient {
		t.Fatalf("level2 directions %q/%q, telemetry %q/%q", level2.ClientToServer, level2.ServerToClient,
			telemetry.ClientToServer, telemetry.ServerToClient)
	}
}
