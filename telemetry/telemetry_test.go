package telemetry

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestFlowRecordJSON(t *testing.T) {
	tests := []struct {
		name string
		at   time.Time
		want string
	}{
		{"whole second keeps three digits", time.Date(2026, 11, 30, 23, 4, 21, 0, time.UTC), `"2026-11-30T23:04:21.000Z"`},
		{"milliseconds, not more", time.Date(2026, 11, 30, 23, 4, 21, 123456789, time.UTC), `"2026-11-30T23:04:21.123Z"`},
		{"converted to UTC", time.Date(2026, 11, 30, 23, 0, 0, 5e6, time.FixedZone("x", 3600)), `"2026-11-30T22:00:00.005Z"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := json.Marshal(FlowRecord{Time: Time{tt.at}, Client: "[fd00::1]:443"})
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Contains(b, []byte(`"time":`+tt.want)) {
				t.Fatalf("got %s, want time %s", b, tt.want)
			}
			// The contract's keys are always present, level as a number.
			var m map[string]any
			json.Unmarshal(b, &m)
			for _, k := range []string{"time", "flow", "client", "orig_dst", "mechanism", "sni", "tls", "level",
				"http_method", "path", "status", "mcp_version", "mcp_method", "mcp_name", "decision", "rule",
				"reason", "bytes_up", "bytes_down", "duration_ms"} {
				if _, ok := m[k]; !ok {
					t.Errorf("key %q missing", k)
				}
			}
			if _, ok := m["level"].(float64); !ok {
				t.Errorf("level is %T, want a number", m["level"])
			}
		})
	}
}

// blockingWriter stands for a stuck log consumer (a full pipe).
type blockingWriter struct {
	release chan struct{}
	mu      sync.Mutex
	buf     bytes.Buffer
}

func (w *blockingWriter) Write(p []byte) (int, error) {
	<-w.release
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.Write(p)
}

// TestFlowLogNeverBlocks: a slow reader never stalls Write; overflow is dropped and counted.
func TestFlowLogNeverBlocks(t *testing.T) {
	m := NewMetrics()
	w := &blockingWriter{release: make(chan struct{})}
	fl := NewFlowLog(w, 4, slog.New(slog.NewTextHandler(io.Discard, nil)), m.LogDropped.Inc)
	done := make(chan struct{})
	go func() {
		for i := 0; i < 100; i++ {
			fl.Write(FlowRecord{Flow: "f"})
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Write blocked on a stuck consumer")
	}
	dropped := testutil.ToFloat64(m.LogDropped)
	if dropped < 100-4-1 {
		t.Fatalf("dropped %v records, want at least 95", dropped)
	}
	close(w.release)
	fl.Close()
	lines := strings.Count(w.buf.String(), "\n")
	if float64(lines)+dropped != 100 {
		t.Fatalf("%d written + %v dropped != 100", lines, dropped)
	}
}

// TestFlowLogWholeLinesPerWrite: every write carries whole lines only, so a reader that tails the
// log never sees half a record; the records arrive once each, in order. (One write per record
// before the writer batched; the batches are TestFlowLogBatches'.)
func TestFlowLogWholeLinesPerWrite(t *testing.T) {
	var writes []string
	var mu sync.Mutex
	w := writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		writes = append(writes, string(p))
		mu.Unlock()
		return len(p), nil
	})
	fl := NewFlowLog(w, 16, slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
	for i := 0; i < 10; i++ {
		fl.Write(FlowRecord{Flow: fmt.Sprintf("f%d", i), Client: "10.0.0.1:1"})
	}
	fl.Close()
	if len(writes) < 1 || len(writes) > 10 {
		t.Fatalf("%d writes for 10 records", len(writes))
	}
	var flows []string
	for _, s := range writes {
		if !strings.HasSuffix(s, "\n") {
			t.Fatalf("write %q does not end a line", s)
		}
		for _, line := range strings.SplitAfter(s, "\n") {
			if line == "" {
				continue
			}
			var r FlowRecord
			if err := json.Unmarshal([]byte(line), &r); err != nil {
				t.Fatalf("line %q of write %q is not one JSON object: %v", line, s, err)
			}
			flows = append(flows, r.Flow)
		}
	}
	if want := []string{"f0", "f1", "f2", "f3", "f4", "f5", "f6", "f7", "f8", "f9"}; !slices.Equal(flows, want) {
		t.Fatalf("records %q, want %q", flows, want)
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// TestDeclaration: the draft's MUST-declare items are all present ("An intermediary MUST declare
// the highest tier it satisfies", "MUST declare which level it supports", "MUST declare which
// disposition it implements", and for integration-provided selection "MUST document which
// mechanism it expects and how the original destination reaches it").
func TestDeclaration(t *testing.T) {
	d := Declare([]Interception{{Mechanism: "external", OriginalDestination: "integration-provided: ...", InEffect: true}}, Capabilities{Levels: []int{0, 1}, Dispositions: []string{"terminate"}})
	if d.Tier == "" || len(d.ModeSet) != 1 || d.ModeSet[0] != "Transparent" {
		t.Fatalf("tier/mode: %+v", d)
	}
	if d.AwarenessLevels == nil || d.AwarenessNote == "" || len(d.TLSDispositions) == 0 {
		t.Fatalf("awareness/tls: %+v", d)
	}
	if len(d.Interception) != 1 || d.Interception[0].Mechanism != "external" ||
		d.Interception[0].OriginalDestination != "integration-provided: ..." || !d.Interception[0].InEffect {
		t.Fatalf("interception: %+v", d.Interception)
	}
	if len(d.TLSDispositions) != 1 || d.TLSDispositions[0] != "terminate" {
		t.Fatalf("dispositions %v, want exactly the ones in effect: [terminate]", d.TLSDispositions)
	}
	b, _ := json.Marshal(d)
	if !bytes.Contains(b, []byte(`"awareness_levels":[1]`)) {
		t.Fatalf("awareness_levels must list level 1 and not the opaque level 0: %s", b)
	}
	if d := Declare(nil, Capabilities{Levels: []int{0}}); d.AwarenessLevels == nil || len(d.AwarenessLevels) != 0 {
		t.Fatalf("an opaque-only configuration declares no awareness level: %+v", d.AwarenessLevels)
	}
}

// TestDeclarationLevel1Trust: the declaration says that Level 1's MCP fields are the client's
// assertion (verified by the server only from 2026-07-28, strict routes refusing older versions)
// and how protocol switches are treated (refused at level >= 1 unless allowed per route, h2c
// never), naming the routes of a configuration that change either.
func TestDeclarationLevel1Trust(t *testing.T) {
	d := Declare(nil, BuildCapabilities)
	for _, want := range []string{"client assertion", "verified by the server only at MCP 2026-07-28 and later",
		"strict_mcp_headers", "older than 2026-07-28", "a level 2 route does, and refuses a header that disagrees"} {
		if !strings.Contains(d.Level1HeaderTrust, want) {
			t.Errorf("level1_header_trust lacks %q: %s", want, d.Level1HeaderTrust)
		}
	}
	for _, want := range []string{"refused", "level >= 1", "unless the route allows the protocol (allow_upgrade", "h2c never", "HTTP2-Settings"} {
		if !strings.Contains(d.UpgradePolicy, want) {
			t.Errorf("upgrade_policy lacks %q: %s", want, d.UpgradePolicy)
		}
	}
	if strings.Contains(d.Level1HeaderTrust, "in effect") || strings.Contains(d.UpgradePolicy, "in effect") {
		t.Errorf("without a configuration nothing is in effect: %q, %q", d.Level1HeaderTrust, d.UpgradePolicy)
	}
	b, _ := json.Marshal(d)
	for _, key := range []string{`"level1_header_trust":"client assertion`, `"upgrade_policy":"refused`} {
		if !bytes.Contains(b, []byte(key)) {
			t.Errorf("JSON lacks %s: %s", key, b)
		}
	}

	d = Declare(nil, Capabilities{Levels: []int{0, 1}, Dispositions: []string{"terminate", "passthrough"}, Routes: []RouteCapability{
		{Name: "strict-tls", Level: 1, StrictMCPHeaders: true},
		{Name: "ws", Level: 1, AllowUpgrade: []string{"websocket", "connect"}},
		{Name: "opaque", Level: 0, AllowUpgrade: []string{"websocket"}}, // config refuses it; never declared
	}})
	if !strings.HasPrefix(d.Level1HeaderTrust, HeaderTrustStatement) || !strings.HasSuffix(d.Level1HeaderTrust, "; in effect: strict_mcp_headers on strict-tls") {
		t.Errorf("level1_header_trust with a configuration: %s", d.Level1HeaderTrust)
	}
	if !strings.HasPrefix(d.UpgradePolicy, UpgradeStatement) || !strings.HasSuffix(d.UpgradePolicy, "; in effect: allow_upgrade on ws (websocket, connect)") {
		t.Errorf("upgrade_policy with a configuration: %s", d.UpgradePolicy)
	}
	d = Declare(nil, Capabilities{Levels: []int{1}, Routes: []RouteCapability{{Name: "r", Level: 1}}})
	if !strings.HasSuffix(d.Level1HeaderTrust, "; in effect: no route sets strict_mcp_headers") ||
		!strings.HasSuffix(d.UpgradePolicy, "; in effect: no route allows a protocol switch") {
		t.Errorf("a configuration without strict or upgrade routes: %q, %q", d.Level1HeaderTrust, d.UpgradePolicy)
	}

	d = Declare(nil, Capabilities{Levels: []int{0}, Routes: []RouteCapability{}})
	if !strings.HasPrefix(d.Level1HeaderTrust, "not applicable") || !strings.HasPrefix(d.UpgradePolicy, "not applicable") {
		t.Errorf("an opaque-only configuration reads no header: %q, %q", d.Level1HeaderTrust, d.UpgradePolicy)
	}
}

func TestLabelCap(t *testing.T) {
	c := NewLabelCap(2)
	m := NewMetrics()
	tests := []struct{ name, in, want string }{
		{"first", "echo", "echo"},
		{"not UTF-8 is cleaned, not a panic", "caf\xe9", "caf\uFFFD"},
		{"known value stays", "echo", "echo"},
		{"past the cap", "random-1", "other"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := c.Value(tt.in)
			if got != tt.want {
				t.Fatalf("Value(%q) = %q, want %q", tt.in, got, tt.want)
			}
			m.Requests.Inc("d", "tools/call", got, "c", "allow") // must not panic
		})
	}
}

// TestDeclarationLevel2: with a level 2 route, the declaration says what Level 2 reads and that
// it never starts its own handshake with the server (the draft's single-handshake rule).
func TestDeclarationLevel2(t *testing.T) {
	d := Declare(nil, Capabilities{Levels: []int{1, 2}})
	if len(d.AwarenessLevels) != 2 || d.AwarenessLevels[1] != 2 {
		t.Fatalf("levels %v", d.AwarenessLevels)
	}
	for _, want := range []string{"single handshake", "never starts its own handshake", "-32020", "never a fabricated result"} {
		if !strings.Contains(d.AwarenessNote, want) {
			t.Errorf("awareness note lacks %q: %s", want, d.AwarenessNote)
		}
	}
	if !strings.Contains(d.TierLayers, "Level 2") {
		t.Errorf("tier layers: %s", d.TierLayers)
	}
	if d := Declare(nil, Capabilities{Levels: []int{1}}); strings.Contains(d.AwarenessNote, "Level 2") {
		t.Errorf("a Level 1 only configuration declares Level 2: %s", d.AwarenessNote)
	}
}
