package telemetry

import (
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
)

// TestAdminReadinessChecks: /readyz is 503 with the failing check's reason while a check fails,
// and ready again once it passes; Handle serves on the admin listener.
func TestAdminReadinessChecks(t *testing.T) {
	a, err := NewAdmin("127.0.0.1:0", NewMetrics(), func() any { return nil }, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	var broken atomic.Bool
	a.AddReadiness("audit", func() error {
		if broken.Load() {
			return errors.New("disk full")
		}
		return nil
	})
	a.Handle("GET /extra", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "extra") }))
	a.Start()
	defer a.Shutdown(t.Context())
	get := func(p string) (int, string) {
		t.Helper()
		r, err := http.Get("http://" + a.Addr().String() + p)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Body.Close()
		b, _ := io.ReadAll(r.Body)
		return r.StatusCode, string(b)
	}
	a.SetReady(true)
	for _, step := range []struct {
		broken bool
		code   int
		body   string
	}{
		{false, 200, "ready"},
		{true, 503, "not ready: audit: disk full"},
		{false, 200, "ready"},
	} {
		broken.Store(step.broken)
		if code, body := get("/readyz"); code != step.code || !strings.Contains(body, step.body) {
			t.Errorf("broken=%v: /readyz %d %q, want %d %q", step.broken, code, body, step.code, step.body)
		}
	}
	a.SetReady(false)
	if code, body := get("/readyz"); code != 503 || !strings.Contains(body, "steering not installed") {
		t.Errorf("not ready: /readyz %d %q", code, body)
	}
	if code, body := get("/extra"); code != 200 || body != "extra" {
		t.Errorf("/extra: %d %q", code, body)
	}
}
