//go:build linux

package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A fatal runtime error (stack overflow, out of memory, concurrent map writes) is not a panic:
// no recover, no deferred function runs. "The host is never left broken: on exit, and by
// `cleanup` after a crash, steering is removed; a fatal runtime error (which `recover` cannot
// catch) must not leave steering behind either" (DESIGN.md). These tests kill the appliance
// with a real one, from a binary built with -tags faultinject (SIGUSR2 provokes the fault named
// by $MCPINTERCEPT_FAULT), and look at the host once its watchdog is done.

// crashLine is what the watchdog logs when it removes a crashed appliance's steering.
const crashLine = "the appliance crashed (a fatal runtime error); removing its steering"

// faultyBinary builds mcpintercept with the fault injector, once per test.
func faultyBinary(t *testing.T) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "mcpintercept-faultinject")
	cmd := exec.Command("go", "build", "-tags", "faultinject", "-o", out, "./cmd/mcpintercept")
	cmd.Dir = repoRoot
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build faultinject binary: %v\n%s", err, b)
	}
	return out
}

// waitDone waits for p to exit (the deadline is a hang guard only) and returns its exit code.
func waitDone(t *testing.T, p *proc) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(2 * time.Minute):
		p.kill()
		t.Fatalf("%s did not exit:\nstderr:\n%s", p.name, p.stderr)
	}
	return p.cmd.ProcessState.ExitCode()
}

// TestFatalErrorRun: `run` in a terminal killed by `fatal error: concurrent map writes`
// (nftables-tproxy) or `fatal error: stack overflow` (iptables-redirect) while steering: it exits
// with the Go runtime's status 2, its watchdog removes the steering, nothing of ours is left (a
// later `cleanup` finds nothing), and the client reaches the server directly. The control run
// (MCPINTERCEPT_WATCHDOG=off, one process as before the watchdog) shows the same fault leaving
// the steering installed.
func TestFatalErrorRun(t *testing.T) {
	needLab(t)
	goServer(t)
	faulty := faultyBinary(t)
	cases := []struct {
		name, mechanism, fault, message string
		unwatched                       bool
	}{
		{name: "nftables concurrent map writes", mechanism: "nftables-tproxy", fault: "concurrent-map-writes", message: "fatal error: concurrent map writes"},
		{name: "iptables stack overflow", mechanism: "iptables-redirect", fault: "stack-overflow", message: "fatal error: stack overflow"},
		{name: "control: unwatched leaves the steering", mechanism: "nftables-tproxy", fault: "concurrent-map-writes", message: "fatal error: concurrent map writes", unwatched: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Cleanup(func() { runT(t, 30*time.Second, nsAppliance, bin("mcpintercept"), "cleanup") })
			env := []string{"MCPINTERCEPT_FAULT=" + c.fault}
			if c.unwatched {
				env = append(env, "MCPINTERCEPT_WATCHDOG=off")
			}
			p := startT(t, nsAppliance, "env", append(env, faulty, "run", "--config", labConfig(), "--mechanism", c.mechanism)...)
			if err := p.waitFor("msg=ready", 60*time.Second); err != nil {
				t.Fatal(err)
			}
			if len(oursLeft(steeringState(t))) == 0 {
				t.Fatal("no steering installed while the appliance runs; this test would prove nothing")
			}
			// Steered: the call goes through the appliance and is recorded.
			runT(t, 60*time.Second, nsClient, bin("mcpclient"), "-url", "http://10.200.2.2:8080/mcp")
			if err := p.waitFor(`"orig_dst":"10.200.2.2:8080"`, 60*time.Second); err != nil {
				t.Fatal(err)
			}

			p.cmd.Process.Signal(syscall.SIGUSR2)
			code := waitDone(t, p) // the watchdog's exit too: it holds stderr until it is done
			if !strings.Contains(p.stderr.String(), c.message) {
				t.Fatalf("no %q: the appliance did not die of the fault:\n%s", c.message, p.stderr)
			}
			if code != 2 {
				t.Errorf("exit status %d, want the Go runtime's 2", code)
			}
			left := oursLeft(steeringState(t))
			if c.unwatched {
				if len(left) == 0 {
					t.Fatal("the unwatched appliance's steering vanished with it: the control shows nothing")
				}
				return
			}
			if len(left) > 0 {
				t.Fatalf("after the fatal error, still installed:\n%s\nstderr:\n%s", strings.Join(left, "\n"), p.stderr)
			}
			if !strings.Contains(p.stderr.String(), crashLine) {
				t.Errorf("the watchdog did not say why it removed the steering:\n%s", p.stderr)
			}
			if again := runT(t, 30*time.Second, nsAppliance, bin("mcpintercept"), "cleanup"); strings.TrimSpace(again) != "nothing to remove" {
				t.Errorf("cleanup after the watchdog found more: %q", again)
			}
			out := runT(t, 60*time.Second, nsClient, bin("mcpclient"), "-url", "http://10.200.2.2:8080/mcp")
			if !strings.Contains(out, "hello through the network") {
				t.Errorf("the client did not reach the server directly:\n%s", out)
			}
		})
	}
}

// TestFatalErrorExec: `exec` dies of `fatal error: stack overflow` while its command runs: no
// cgroup, link or pin of ours is left (the watchdog removed the cgroup, moving the command out of
// it; the kernel had detached the links with the dead process's descriptors), and the command,
// still running as after a SIGKILLed exec (fail-open), then reaches the server directly.
func TestFatalErrorExec(t *testing.T) {
	needLab(t)
	goServer(t)
	bytePump(t)
	faulty := faultyBinary(t)
	fifo := filepath.Join(t.TempDir(), "go")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	p := startT(t, nsClient, "env", "MCPINTERCEPT_FAULT=stack-overflow", faulty, "exec", "--", "sh", "-c",
		bin("bytepump")+" send -addr 10.200.2.2:3005 -bytes 100 >/dev/null; read x < "+fifo+"; exec "+bin("mcpclient")+" -url http://10.200.2.2:8080/mcp")
	// Unblocks the command whatever happens below, so that the test never waits on it forever
	// (non-blocking: when nobody reads the FIFO any more, there is nothing to unblock).
	t.Cleanup(func() {
		if fd, err := syscall.Open(fifo, syscall.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			syscall.Write(fd, []byte("go\n"))
			syscall.Close(fd)
		}
	})
	if err := p.waitFor("connection to 10.200.2.2:3005", 60*time.Second); err != nil {
		t.Fatal(err)
	}
	if len(ourCgroups(t)) == 0 {
		t.Fatal("no cgroup of ours while exec runs; this test would prove nothing")
	}
	p.cmd.Process.Signal(syscall.SIGUSR2)
	// exec's stdout stays open in the command, so p.done comes only after the command: wait for
	// the watchdog's last line instead.
	if err := p.waitFor("steering removed after the crash", 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(p.stderr.String(), "fatal error: stack overflow") {
		t.Fatalf("exec did not die of the fault:\n%s", p.stderr)
	}
	if left := ourCgroups(t); len(left) > 0 {
		t.Errorf("cgroups of ours left: %v\n%s", left, p.stderr)
	}
	if _, err := os.Stat("/sys/fs/bpf/mcpintercept"); err == nil {
		t.Error("/sys/fs/bpf/mcpintercept left behind")
	}
	if haveCmd("bpftool") {
		o, _ := exec.Command("bpftool", "link", "show").Output()
		if strings.Contains(string(o), "mcpi_") {
			t.Errorf("bpf links of ours left:\n%s", o)
		}
	}
	if err := os.WriteFile(fifo, []byte("go\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code := waitDone(t, p); code != 2 {
		t.Errorf("exit status %d, want the Go runtime's 2", code)
	}
	if !strings.Contains(p.stdout.String(), "hello through the network") {
		t.Fatalf("the command did not reach the server directly after the fault:\nstdout:\n%s\nstderr:\n%s", p.stdout, p.stderr)
	}
	if out := runT(t, 30*time.Second, nsAppliance, bin("mcpintercept"), "cleanup"); strings.TrimSpace(out) != "nothing to remove" {
		t.Errorf("cleanup after the watchdog found more: %q", out)
	}
}
