package origin

import (
	"errors"
	"fmt"
	"testing"
)

// TestRefusalThroughWrapping: a refusal wrapped on its way up still names its reason, keeps its
// cause's message and details, and an ordinary failure is no refusal.
func TestRefusalThroughWrapping(t *testing.T) {
	cause := errors.New("upstream address 127.0.0.1 is in the deny list")
	err := fmt.Errorf("dial: %w", Refuse("upstream_denied", cause))
	r, ok := IsRefusal(err)
	if !ok || r.RefuseReason() != "upstream_denied" || !errors.Is(err, cause) {
		t.Fatalf("IsRefusal(%v) = %v, %v", err, r, ok)
	}
	if err.Error() != "dial: "+cause.Error() {
		t.Errorf("message %q", err)
	}
	if _, ok := IsRefusal(errors.New("connection refused")); ok {
		t.Error("a plain failure reads as a refusal")
	}
}
