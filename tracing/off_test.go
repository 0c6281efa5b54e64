//go:build notracing

package tracing

import (
	"context"
	"errors"
	"testing"
	"time"
)

// The demo's build (-tags notracing) refuses a configured OTLP endpoint rather than run without
// the spans it was asked for; with none configured it is tracing off.
func TestNotInBuild(t *testing.T) {
	tr, err := Open(context.Background(), Config{Endpoint: "127.0.0.1:4318"}, nil, nil)
	if !errors.Is(err, ErrNotInBuild) || tr != nil {
		t.Fatalf("Open with an endpoint in a notracing build = %v, %v; want ErrNotInBuild", tr, err)
	}
	tr, err = Open(context.Background(), Config{}, nil, nil)
	if err != nil || tr != nil {
		t.Fatalf("Open without an endpoint = %v, %v; want nil, nil", tr, err)
	}
	s := tr.Start(Parent{}, KindClient, Call{Method: "tools/call"}, time.Time{})
	s.Decision("deny", "r", "x")
	s.End(time.Time{})
	if _, _, ok := s.Inject(); ok || s.TraceID() != "" {
		t.Fatal("a span of a notracing build injects a context")
	}
}
