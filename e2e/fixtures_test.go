//go:build linux

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Shared servers in mcpi-server, started once for the whole run.
var (
	sharedMu    sync.Mutex
	sharedProcs = map[string]*proc{}
)

func stopShared() {
	sharedMu.Lock()
	defer sharedMu.Unlock()
	for _, p := range sharedProcs {
		p.kill()
	}
}

func shared(t *testing.T, key, ready string, name string, args ...string) *proc {
	t.Helper()
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if p, ok := sharedProcs[key]; ok {
		select {
		case <-p.done:
		default:
			return p
		}
	}
	p, err := start(nsServer, name, args...)
	if err != nil {
		t.Fatalf("start %s: %v", key, err)
	}
	if err := p.waitFor(ready, 60*time.Second); err != nil {
		p.kill()
		t.Fatalf("%s: %v", key, err)
	}
	sharedProcs[key] = p
	return p
}

// goServer is the Go SDK MCP server (stateful, 2025-11-25 sessions) on port 8080, IPv4 and IPv6
// (Level 1 route), and on 3011 (Level 2 route).
func goServer(t *testing.T) *proc {
	return shared(t, "go-sdk-server", "READY", bin("mcpserver"),
		"-listen", "10.200.2.2:8080,[fd00:200:2::2]:8080,10.200.2.2:3011")
}

// everythingServer is @modelcontextprotocol/server-everything (Node) in Streamable HTTP mode.
func everythingServer(t *testing.T) *proc {
	t.Helper()
	dir := filepath.Join(repoRoot, "e2e", "node")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@modelcontextprotocol", "server-everything")); err != nil {
		t.Fatalf("server-everything is not installed in e2e/node (run `make deps`): %v", err)
	}
	return shared(t, "server-everything", everythingReady, "node", everythingArgs()...)
}

// bytePump is the raw TCP byte-exactness peer on port 3005, IPv4 and IPv6.
func bytePump(t *testing.T) *proc {
	return shared(t, "bytepump", "READY", bin("bytepump"), "serve",
		"-listen", "10.200.2.2:3005,[fd00:200:2::2]:3005", "-reply-bytes", fmt.Sprint(64<<20))
}

// appliance is a running `mcpintercept run` in mcpi-appliance.
type appliance struct {
	*proc
	mechanism string
	stopped   bool
}

// startAppliance runs the daemon with examples/lab.yaml (or cfgText when given) and the mechanism
// override, waits for readiness, and registers a stop plus a state check for the end of the test.
func startAppliance(t *testing.T, mechanism string, cfgText string) *appliance {
	t.Helper()
	cfgPath := filepath.Join(repoRoot, "examples", "lab.yaml")
	if cfgText != "" {
		cfgPath = filepath.Join(t.TempDir(), "mcpintercept.yaml")
		if err := os.WriteFile(cfgPath, []byte(cfgText), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return startApplianceFile(t, mechanism, cfgPath)
}

// startApplianceFile runs the daemon on a configuration file the test keeps (to edit it for a
// SIGHUP, or to start it again), waits for readiness, and registers a stop plus a state check.
func startApplianceFile(t *testing.T, mechanism, cfgPath string) *appliance {
	t.Helper()
	p, err := start(nsAppliance, bin("mcpintercept"), "run", "--config", cfgPath, "--mechanism", mechanism)
	if err != nil {
		t.Fatal(err)
	}
	a := &appliance{proc: p, mechanism: mechanism}
	t.Cleanup(func() {
		if !a.stopped {
			a.stopGracefully(t)
		}
	})
	if err := p.waitFor("msg=ready", 30*time.Second); err != nil {
		p.kill()
		t.Fatal(err)
	}
	return a
}

// stopGracefully sends SIGTERM, checks the daemon exits 0 and removed all its steering, and returns
// the flow log it wrote.
func (a *appliance) stopGracefully(t *testing.T) []flowRecord {
	t.Helper()
	a.stopped = true
	if err := a.stop(syscall.SIGTERM, 30*time.Second); err != nil {
		t.Errorf("appliance did not stop cleanly: %v\nstderr:\n%s", err, a.stderr)
	}
	if left := oursLeft(steeringState(t)); len(left) > 0 {
		t.Errorf("after SIGTERM the daemon left steering installed:\n%s", strings.Join(left, "\n"))
		runT(t, 20*time.Second, nsAppliance, bin("mcpintercept"), "cleanup")
	}
	return parseFlowLog(t, a.stdout.String())
}
