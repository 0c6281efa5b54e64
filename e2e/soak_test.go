//go:build linux

package e2e

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestSoakShort is `make soak` (issue 31) for 60 seconds: the same driver (e2e/peers/soak), the
// same faults (upstream resets mid-response, upstream hang, audit disk full, SIGHUP every 2 s,
// kill -9 and restart, OTLP collector down) and the same checks, minus the ones that read the
// clock: every call the upstream executed has an authorization record, `audit verify` passes
// across the restart, no client got a result without its own nonce, calls succeed again after the
// last fault, every reload accepted, a clean stop, no steering left and ip rules as before. Where
// the errors fell (inside the fault windows or not) and the appliance's RSS and fd slopes are
// printed, not asserted.
func TestSoakShort(t *testing.T) {
	needLab(t)
	dir := t.TempDir()
	build := exec.Command("go", "build", "-o", dir+"/", "./e2e/peers/soak", "./e2e/peers/soakorigin", "./e2e/peers/loadgen", "./e2e/peers/otlpsink")
	build.Dir = repoRoot
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the soak: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(dir, "soak"), "-bin", binDir+","+dir, "-repo", repoRoot,
		"-duration", "60s", "-strict-windows=false", "-node", "on", "-work", filepath.Join(dir, "work"))
	cmd.Dir = repoRoot
	var stdout, stderr syncBuf
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	t.Logf("soak table:\n%s", stdout.String())
	if err != nil {
		t.Errorf("soak: %v\nstderr:\n%s", err, tail(stderr.String(), 4000))
	}
	if !strings.Contains(stdout.String(), "executed calls have an authorization record") {
		t.Errorf("the soak printed no table")
	}
	if left := oursLeft(steeringState(t)); len(left) > 0 {
		t.Errorf("after the soak, steering is left in %s:\n%s", nsAppliance, strings.Join(left, "\n"))
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}
