package appliance

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"mcpintercept/config"
	"mcpintercept/tracing"
	"mcpintercept/tracing/tracestage"
)

const tracedRoutes = `
  - name: lab-traced
    match: {ports: [3005]}
    tls: plaintext
    level: 2
    development: true
    trace_propagation: inject
`

// TestTracingWired: with telemetry.otlp set the appliance opens the exporter (nothing dialled
// until a span is exported), logs and declares the endpoint and the header names but never a
// header value, gives the inject route TraceInject, warns on a reload that changes the section,
// and flushes on Stop.
func TestTracingWired(t *testing.T) {
	var exports atomic.Int32
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		exports.Add(1)
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer recv.Close()
	telemetrySection := "telemetry:\n  otlp:\n    endpoint: " + recv.URL + "\n    headers: {x-api-key: s3cret-value}\n    sampling_ratio: 1\n"
	src := strings.Replace(labLike, "routes:\n", "routes:"+tracedRoutes, 1) + telemetrySection
	path := filepath.Join(t.TempDir(), "lab.yaml")
	cfg := writeConfig(t, path, src)
	cfg.Admin.Listen = "127.0.0.1:0"
	var logs syncBuffer
	a, err := New(context.Background(), cfg, Options{Log: NewLogger("info", &logs), Mechanism: &fakeMech{},
		Listeners: []*net.TCPListener{loopbackListener(t)}})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Stop(context.Background())
	if a.tracer == nil {
		t.Fatal("no tracer with telemetry.otlp.endpoint set")
	}
	var inject []string
	for _, r := range a.Engine().Routing().Routes {
		if tracestage.Inject(r.Stages) {
			inject = append(inject, r.Name)
		}
	}
	if len(inject) != 1 || inject[0] != "lab-traced" {
		t.Errorf("TraceInject on %q, want lab-traced", inject)
	}
	if !strings.Contains(logs.String(), "tracing: exporting spans over OTLP") || !strings.Contains(logs.String(), "x-api-key") {
		t.Errorf("no tracing line naming the header:\n%s", logs.String())
	}

	resp, err := http.Get("http://" + a.AdminAddr().String() + "/declaration")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var d struct {
		Tracing       string `json:"tracing"`
		ToolIntegrity string `json:"tool_integrity"`
	}
	if err := json.Unmarshal(body, &d); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{recv.URL, "x-api-key (values not shown)", "inject (the request upstream carries the appliance's span as parent, tracestate mcpi) on routes lab-traced",
		"record (trace context forwarded unchanged) on routes lab-plaintext", "per connection, nothing changed, on routes lab-passthrough"} {
		if !strings.Contains(d.Tracing, want) {
			t.Errorf("declared tracing lacks %q: %s", want, d.Tracing)
		}
	}
	if d.ToolIntegrity == "" {
		t.Error("the declaration lost its other fields")
	}

	// A reload that keeps the section says nothing; one that changes it needs a restart.
	if err := a.Reload(""); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(logs.String(), "telemetry section changed") {
		t.Error("warned about an unchanged telemetry section")
	}
	if err := os.WriteFile(path, []byte(strings.Replace(src, "s3cret-value", "other-value", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := a.Reload(""); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "telemetry section changed; the OTLP exporter keeps the settings it started with, needs a restart") {
		t.Errorf("no restart warning:\n%s", logs.String())
	}

	// A span made by hand is flushed by Stop.
	sp := a.tracer.Start(tracing.Parent{}, tracing.KindClient, tracing.Call{Method: "ping", Route: "lab-traced"}, time.Now())
	sp.End(time.Now())
	if err := a.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if a.tracer != nil {
		t.Error("tracer left open after Stop")
	}
	if exports.Load() == 0 {
		t.Error("Stop did not flush the span")
	}
	if strings.Contains(logs.String(), "s3cret") || strings.Contains(logs.String(), "other-value") || strings.Contains(string(body), "s3cret") {
		t.Errorf("a header value was logged or declared:\n%s\n%s", logs.String(), body)
	}
}

func TestTracingOff(t *testing.T) {
	cfg := writeConfig(t, filepath.Join(t.TempDir(), "lab.yaml"), labLike)
	if got := TracingOf(cfg); !strings.HasPrefix(got, "off") {
		t.Errorf("TracingOf = %q", got)
	}
	tc := tracingConfig(cfg)
	if tc.Endpoint != "" || tc.Dial == nil || tc.Ratio != 1 || tc.MaxQueue != config.DefaultOTLPMaxQueue {
		t.Errorf("tracingConfig = %+v", tc)
	}
	a, err := New(context.Background(), cfg, Options{Mechanism: &fakeMech{}, NoAdmin: true, Stdout: io.Discard,
		Listeners: []*net.TCPListener{loopbackListener(t)}})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Stop(context.Background())
	if a.tracer != nil {
		t.Error("a tracer without telemetry.otlp.endpoint")
	}
}
