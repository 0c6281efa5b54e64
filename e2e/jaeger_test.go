//go:build linux

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Jaeger in the lab: the jaeger program (Jaeger v2, an OpenTelemetry Collector distribution)
// built by scripts/deps.sh into bin/jaeger from the module pinned in e2e/jaeger, run in
// mcpi-server with in-memory storage, the OTLP/HTTP receiver on 10.200.2.2:4318 and the query API
// on 10.200.2.2:16686, so that the appliance (mcpi-appliance) and the server peer (mcpi-server)
// export to it and the test reads what it stored. Neither port is steered (examples/lab.yaml
// intercept.ports), so the appliance's own exports are not intercepted.
const (
	jaegerOTLP      = "10.200.2.2:4318"
	jaegerOTLPURL   = "http://" + jaegerOTLP + "/v1/traces"
	jaegerQueryBase = "http://10.200.2.2:16686"
)

// jaegerConfig is the collector's configuration: only the OTLP/HTTP receiver, memory storage,
// the query API and the health check, each on the lab server's address (no other port opened,
// no self-metrics listener). Metrics received over OTLP (the appliance's
// mcp.client.operation.duration) are printed on stderr by the debug exporter: Jaeger stores
// traces only, and without a metrics pipeline it would answer the appliance's metric exports 404.
const jaegerConfig = `service:
  extensions: [jaeger_storage, jaeger_query, healthcheckv2]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
    metrics:
      receivers: [otlp]
      exporters: [debug]
  telemetry:
    metrics:
      level: none
    logs:
      level: info
extensions:
  healthcheckv2:
    use_v2: true
    http:
      endpoint: 10.200.2.2:13133
  jaeger_query:
    storage:
      traces: lab_memory
    http:
      endpoint: 10.200.2.2:16686
    grpc:
      endpoint: 10.200.2.2:16685
  jaeger_storage:
    backends:
      lab_memory:
        memory:
          max_traces: 100000
receivers:
  otlp:
    protocols:
      http:
        endpoint: ` + jaegerOTLP + `
processors:
  batch:
    timeout: 100ms
exporters:
  debug:
    verbosity: detailed
  jaeger_storage_exporter:
    trace_storage: lab_memory
`

// jaegerBin is bin/jaeger in the repository (scripts/deps.sh builds it).
func jaegerBin(t *testing.T) string {
	t.Helper()
	p := filepath.Join(repoRoot, "bin", "jaeger")
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("Jaeger is not built (run `make deps`, which builds bin/jaeger from e2e/jaeger): %v", err)
	}
	return p
}

// startJaeger runs Jaeger in mcpi-server and waits until its query API answers; the test owns it.
func startJaeger(t *testing.T) *proc {
	t.Helper()
	cfg := filepath.Join(t.TempDir(), "jaeger.yaml")
	if err := os.WriteFile(cfg, []byte(jaegerConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	p := startT(t, nsServer, jaegerBin(t), "--config", "file:"+cfg)
	if err := p.waitFor("Everything is ready", 120*time.Second); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		if _, code, err := jaegerGet(jaegerQueryBase + "/api/services"); err == nil && code == 200 {
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("Jaeger's query API does not answer:\n%s", p.stderr)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// jaegerGet GETs a URL from mcpi-server (where the query API listens) and returns the body and
// HTTP status.
func jaegerGet(u string) (string, int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, errOut, err := run(ctx, nsServer, "curl", "-sS", "-w", "\n%{http_code}", u)
	if err != nil {
		return "", 0, fmt.Errorf("curl %s: %v %s", u, err, errOut)
	}
	i := strings.LastIndexByte(out, '\n')
	var code int
	fmt.Sscan(out[i+1:], &code)
	return out[:i], code, nil
}

// jaegerTraceJSON is the query API's v1 JSON (GET /api/traces/{id}, /api/traces?service=...).
type jaegerTraceJSON struct {
	TraceID   string                   `json:"traceID"`
	Spans     []jaegerSpan             `json:"spans"`
	Processes map[string]jaegerProcess `json:"processes"`
}

type jaegerSpan struct {
	TraceID       string `json:"traceID"`
	SpanID        string `json:"spanID"`
	OperationName string `json:"operationName"`
	References    []struct {
		RefType string `json:"refType"`
		TraceID string `json:"traceID"`
		SpanID  string `json:"spanID"`
	} `json:"references"`
	Tags      []jaegerTag `json:"tags"`
	ProcessID string      `json:"processID"`
	// Service is filled from the trace's processes.
	Service string `json:"-"`
}

type jaegerTag struct {
	Key   string `json:"key"`
	Type  string `json:"type"`
	Value any    `json:"value"`
}

type jaegerProcess struct {
	ServiceName string `json:"serviceName"`
}

// tag returns a tag's value as text ("" when absent).
func (s jaegerSpan) tag(key string) string {
	for _, t := range s.Tags {
		if t.Key == key {
			return fmt.Sprint(t.Value)
		}
	}
	return ""
}

// parent is the span id of the CHILD_OF reference ("" for a root).
func (s jaegerSpan) parent() string {
	for _, r := range s.References {
		if r.RefType == "CHILD_OF" {
			return hexID(r.SpanID, 16)
		}
	}
	return ""
}

func (s jaegerSpan) String() string {
	var tags []string
	for _, t := range s.Tags {
		tags = append(tags, fmt.Sprintf("%s=%v", t.Key, t.Value))
	}
	return fmt.Sprintf("%s %q span %s parent %q [%s]", s.Service, s.OperationName, s.SpanID, s.parent(), strings.Join(tags, " "))
}

// hexID left-pads a Jaeger id (it may drop leading zeros) to n hex digits, lower case.
func hexID(s string, n int) string {
	s = strings.ToLower(s)
	if len(s) < n {
		s = strings.Repeat("0", n-len(s)) + s
	}
	return s
}

func decodeTraces(body string) ([]jaegerTraceJSON, error) {
	var r struct {
		Data []jaegerTraceJSON `json:"data"`
	}
	if err := json.Unmarshal([]byte(body), &r); err != nil {
		return nil, fmt.Errorf("query API answer %.300q: %v", body, err)
	}
	for i := range r.Data {
		for j := range r.Data[i].Spans {
			sp := &r.Data[i].Spans[j]
			sp.Service = r.Data[i].Processes[sp.ProcessID].ServiceName
			sp.SpanID, sp.TraceID = hexID(sp.SpanID, 16), hexID(sp.TraceID, 32)
		}
		r.Data[i].TraceID = hexID(r.Data[i].TraceID, 32)
	}
	return r.Data, nil
}

// jaegerTrace polls GET /api/traces/{traceID} until done accepts its spans or the deadline passes
// (spans arrive batched, from two exporters); it returns the last spans seen either way.
func jaegerTrace(t *testing.T, traceID string, timeout time.Duration, done func([]jaegerSpan) bool) ([]jaegerSpan, bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var spans []jaegerSpan
	for {
		body, code, err := jaegerGet(jaegerQueryBase + "/api/traces/" + traceID)
		if err != nil {
			t.Fatal(err)
		}
		if code == 200 {
			traces, err := decodeTraces(body)
			if err != nil {
				t.Fatal(err)
			}
			spans = nil
			for _, tr := range traces {
				spans = append(spans, tr.Spans...)
			}
			if done(spans) {
				return spans, true
			}
		}
		if time.Now().After(deadline) {
			return spans, false
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// jaegerSearch is GET /api/traces?service=S&operation=O (the most recent traces, up to limit).
func jaegerSearch(t *testing.T, service, operation string, limit int) []jaegerTraceJSON {
	t.Helper()
	q := url.Values{"service": {service}, "operation": {operation}, "limit": {fmt.Sprint(limit)}, "lookback": {"1h"}}
	body, code, err := jaegerGet(jaegerQueryBase + "/api/traces?" + q.Encode())
	if err != nil || code != 200 {
		t.Fatalf("search %s: HTTP %d %v %.300s", q.Encode(), code, err, body)
	}
	traces, err := decodeTraces(body)
	if err != nil {
		t.Fatal(err)
	}
	return traces
}

// findSpan returns the first span of service named op.
func findSpan(spans []jaegerSpan, service, op string) (jaegerSpan, bool) {
	for _, s := range spans {
		if s.Service == service && s.OperationName == op {
			return s, true
		}
	}
	return jaegerSpan{}, false
}

// countSpans counts the spans of service named op.
func countSpans(spans []jaegerSpan, service, op string) int {
	n := 0
	for _, s := range spans {
		if s.Service == service && s.OperationName == op {
			n++
		}
	}
	return n
}

func spansText(spans []jaegerSpan) string {
	var b strings.Builder
	for _, s := range spans {
		fmt.Fprintf(&b, "  %s\n", s)
	}
	return b.String()
}
