package main

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"mcpintercept/appliance"
)

// TestWatchdog runs the real binary (built with -tags faultinject) as `run` with mechanism
// external (no privileges needed; nothing to remove): the appliance is still the process that was
// started (signals, exit status, readiness as before), with one watchdog child; a fatal runtime
// error is noticed by the watchdog (which would remove that steering) and the runtime's status 2
// is the process's; an orderly stop and SIGKILL are not taken for a crash.
func TestWatchdog(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "mcpintercept")
	if out, err := exec.Command("go", "build", "-tags", "faultinject", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	const crashLine = "the appliance crashed (a fatal runtime error); removing its steering"
	t.Run("signals and orderly stop", func(t *testing.T) {
		p := startRun(t, bin, externalConfig(t), "MCPINTERCEPT_FAULT=concurrent-map-writes")
		p.waitFor(t, "msg=ready")
		if kids := children(p.cmd.Process.Pid); len(kids) != 1 {
			t.Fatalf("children %v, want one watchdog", kids)
		}
		p.cmd.Process.Signal(syscall.SIGHUP)
		p.waitFor(t, "reloaded routes and rules")
		p.cmd.Process.Signal(syscall.SIGTERM)
		if code := p.wait(t); code != 0 {
			t.Fatalf("exit %d after SIGTERM, want 0:\n%s", code, p.stderr.String())
		}
		if s := p.stderr.String(); strings.Contains(s, "crashed") || !strings.Contains(s, "steering removed") {
			t.Fatalf("an orderly stop was taken for a crash, or did not stop the appliance:\n%s", s)
		}
	})
	t.Run("SIGKILL is not a crash", func(t *testing.T) {
		p := startRun(t, bin, externalConfig(t))
		p.waitFor(t, "msg=ready")
		p.cmd.Process.Kill()
		p.wait(t) // after the watchdog too: it holds stderr until it exits
		if s := p.stderr.String(); strings.Contains(s, "crashed") {
			t.Fatalf("SIGKILL was taken for a crash:\n%s", s)
		}
	})
	for _, fault := range []string{"concurrent-map-writes", "stack-overflow"} {
		t.Run(fault, func(t *testing.T) {
			p := startRun(t, bin, externalConfig(t), "MCPINTERCEPT_FAULT="+fault)
			p.waitFor(t, "msg=ready")
			p.cmd.Process.Signal(syscall.SIGUSR2)
			if code := p.wait(t); code != 2 {
				t.Fatalf("exit %d, want the runtime's 2:\n%s", code, p.stderr.String())
			}
			s := p.stderr.String()
			if !strings.Contains(s, "fatal error: "+strings.ReplaceAll(fault, "-", " ")) {
				t.Fatalf("the appliance did not die of %s:\n%s", fault, s)
			}
			if !strings.Contains(s, crashLine) || !strings.Contains(s, "mechanism=external") {
				t.Fatalf("the watchdog did not notice the crash:\n%s", s)
			}
		})
	}
	t.Run("opted out", func(t *testing.T) {
		p := startRun(t, bin, externalConfig(t), appliance.EnvWatchdog+"=off", "MCPINTERCEPT_FAULT=concurrent-map-writes")
		p.waitFor(t, "msg=ready")
		if kids := children(p.cmd.Process.Pid); len(kids) != 0 {
			t.Fatalf("children %v with %s=off", kids, appliance.EnvWatchdog)
		}
		p.cmd.Process.Signal(syscall.SIGUSR2)
		if code := p.wait(t); code != 2 || strings.Contains(p.stderr.String(), crashLine) {
			t.Fatalf("exit %d:\n%s", code, p.stderr.String())
		}
	})
}

// externalConfig is a `run` configuration that installs nothing: mechanism external on an
// loopback port that was free a moment ago.
func externalConfig(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	cfg := filepath.Join(t.TempDir(), "run.yaml")
	src := fmt.Sprintf("mechanism: external\nlisten: {addresses: [127.0.0.1], port: %d}\n", port) +
		"intercept: {destinations: [10.200.2.0/24], ports: [8080]}\nadmin: {listen: \"off\"}\nlog: {flows: \"off\"}\n"
	if err := os.WriteFile(cfg, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// runProc is a started `mcpintercept run` whose stderr the test reads while it runs.
type runProc struct {
	cmd    *exec.Cmd
	stderr *notifyBuffer
	done   chan struct{}
}

func startRun(t *testing.T, bin, cfg string, env ...string) *runProc {
	t.Helper()
	cmd := exec.Command(bin, "run", "--config", cfg)
	cmd.Env = append(filterEnv(os.Environ(), "NOTIFY_SOCKET", appliance.EnvWatchdog, "MCPINTERCEPT_FAULT"), env...)
	p := &runProc{cmd: cmd, stderr: newNotifyBuffer(), done: make(chan struct{})}
	cmd.Stderr = p.stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// waitFor waits until stderr holds s (or the process exits); the deadline is a hang guard.
func (p *runProc) waitFor(t *testing.T, s string) {
	t.Helper()
	if !p.stderr.waitFor(s, p.done, 2*time.Minute) {
		t.Fatalf("no %q on stderr:\n%s", s, p.stderr.String())
	}
}

// wait returns the exit code; the deadline is a hang guard.
func (p *runProc) wait(t *testing.T) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(2 * time.Minute):
		t.Fatalf("did not exit:\n%s", p.stderr.String())
	}
	return p.cmd.ProcessState.ExitCode()
}

func filterEnv(env []string, drop ...string) []string {
	var out []string
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		keep := true
		for _, d := range drop {
			keep = keep && k != d
		}
		if keep {
			out = append(out, kv)
		}
	}
	return out
}

// children are the processes pid started.
func children(pid int) []int {
	files, _ := filepath.Glob(filepath.Join("/proc", strconv.Itoa(pid), "task", "*", "children"))
	var kids []int
	for _, f := range files {
		b, _ := os.ReadFile(f)
		for _, s := range strings.Fields(string(b)) {
			if k, err := strconv.Atoi(s); err == nil {
				kids = append(kids, k)
			}
		}
	}
	return kids
}
