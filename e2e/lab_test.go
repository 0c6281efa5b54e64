//go:build linux

// Package e2e runs mcpintercept in the lab (scripts/lab.sh: network namespaces mcpi-client,
// mcpi-appliance, mcpi-server joined by veth pairs) against real MCP peers from the official SDKs.
// Nothing is mocked: real nftables/iptables rules, real policy routing, real TCP.
package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

const (
	nsClient    = "mcpi-client"
	nsAppliance = "mcpi-appliance"
	nsServer    = "mcpi-server"
)

var (
	repoRoot string
	binDir   string
	skipWhy  string // non-empty: every test skips with this message
)

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	_, file, _, _ := runtime.Caller(0)
	repoRoot = filepath.Dir(filepath.Dir(file))
	switch {
	case os.Geteuid() != 0:
		skipWhy = "end-to-end lab tests need root (network namespaces, netfilter); run `sudo make test`"
	case !haveCmd("ip"):
		skipWhy = "end-to-end lab tests need iproute2 (`make deps`)"
	}
	if skipWhy != "" {
		fmt.Fprintln(os.Stderr, "e2e: SKIP:", skipWhy)
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "mcpi-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	binDir = dir
	for name, pkg := range map[string]string{
		"mcpintercept": "./cmd/mcpintercept",
		"mcpserver":    "./e2e/peers/mcpserver",
		"mcpclient":    "./e2e/peers/mcpclient",
		"bytepump":     "./e2e/peers/bytepump",
		"tlsprobe":     "./e2e/peers/tlsprobe",
		"hostile":      "./e2e/peers/hostile",
	} {
		cmd := exec.Command("go", "build", "-o", filepath.Join(dir, name), pkg)
		cmd.Dir = repoRoot
		if out, err := cmd.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "e2e: build %s: %v\n%s", pkg, err, out)
			return 1
		}
	}
	if out, err := exec.Command(filepath.Join(repoRoot, "scripts/lab.sh"), "up").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: lab up: %v\n%s", err, out)
		return 1
	}
	code := m.Run()
	stopShared()
	// Whatever a failed test left, the host is restored: steering first, then the namespaces.
	exec.Command("ip", "netns", "exec", nsAppliance, filepath.Join(binDir, "mcpintercept"), "cleanup").Run()
	if out, err := exec.Command(filepath.Join(repoRoot, "scripts/lab.sh"), "down").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: lab down: %v\n%s", err, out)
		return 1
	}
	return code
}

func haveCmd(name string) bool { _, err := exec.LookPath(name); return err == nil }

func needLab(t *testing.T) {
	t.Helper()
	if skipWhy != "" {
		t.Skip(skipWhy)
	}
}

func bin(name string) string { return filepath.Join(binDir, name) }

// syncBuf is a goroutine-safe buffer that also lets a test wait for a line.
type syncBuf struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuf) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuf) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// proc is a process started inside a lab namespace.
type proc struct {
	name   string
	cmd    *exec.Cmd
	stdout *syncBuf
	stderr *syncBuf
	done   chan struct{}
	err    error
}

func start(ns, name string, args ...string) (*proc, error) {
	cmd := exec.Command("ip", append([]string{"netns", "exec", ns, name}, args...)...)
	p := &proc{name: filepath.Base(name), cmd: cmd, stdout: &syncBuf{}, stderr: &syncBuf{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.stdout, p.stderr
	cmd.Dir = repoRoot
	// If the test binary dies (a panic, a timeout), its daemons and servers die with it instead
	// of keeping steering installed and namespaces alive.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	return p, nil
}

// startT starts a process that the test owns: it is killed when the test ends.
func startT(t *testing.T, ns, name string, args ...string) *proc {
	t.Helper()
	p, err := start(ns, name, args...)
	if err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	t.Cleanup(func() { p.kill() })
	return p
}

func (p *proc) kill() {
	select {
	case <-p.done:
		return
	default:
	}
	p.cmd.Process.Kill()
	<-p.done
}

// waitFor waits until the process wrote substr to stdout or stderr, or fails with its output.
func (p *proc) waitFor(substr string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if strings.Contains(p.stdout.String(), substr) || strings.Contains(p.stderr.String(), substr) {
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("%s exited (%v) before %q:\nstdout:\n%s\nstderr:\n%s", p.name, p.err, substr, p.stdout, p.stderr)
		case <-time.After(20 * time.Millisecond):
		}
	}
	return fmt.Errorf("%s: no %q within %v:\nstdout:\n%s\nstderr:\n%s", p.name, substr, timeout, p.stdout, p.stderr)
}

// signal sends sig and waits for the process to exit.
func (p *proc) stop(sig syscall.Signal, timeout time.Duration) error {
	p.cmd.Process.Signal(sig)
	select {
	case <-p.done:
		return p.err
	case <-time.After(timeout):
		p.kill()
		return fmt.Errorf("%s did not exit within %v after %v", p.name, timeout, sig)
	}
}

// run runs a command in a namespace to completion.
func run(ctx context.Context, ns, name string, args ...string) (stdout, stderr string, err error) {
	cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", ns, name}, args...)...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	cmd.Dir = repoRoot
	err = cmd.Run()
	return o.String(), e.String(), err
}

func runT(t *testing.T, timeout time.Duration, ns, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	out, errOut, err := run(ctx, ns, name, args...)
	if err != nil {
		t.Fatalf("%s %s in %s: %v\nstdout:\n%s\nstderr:\n%s", filepath.Base(name), strings.Join(args, " "), ns, err, out, errOut)
	}
	return out
}

// flowRecord is the part of the flow log contract these tests check.
type flowRecord struct {
	Time      string `json:"time"`
	Flow      string `json:"flow"`
	Client    string `json:"client"`
	OrigDst   string `json:"orig_dst"`
	Mechanism string `json:"mechanism"`
	TLS       string `json:"tls"`
	SNI       string `json:"sni"`
	Status    int    `json:"status"`
	MCPMethod string `json:"mcp_method"`
	MCPName   string `json:"mcp_name"`
	JSONRPCID string `json:"jsonrpc_id"`
	Direction string `json:"direction"`
	Rule      string `json:"rule"`
	Level     *int   `json:"level"`
	Decision  string `json:"decision"`
	Reason    string `json:"reason"`
	BytesUp   int64  `json:"bytes_up"`
	BytesDown int64  `json:"bytes_down"`
	Mode      string `json:"mode"`
	Point     string `json:"point"`
}

func parseFlowLog(t *testing.T, s string) []flowRecord {
	t.Helper()
	var out []flowRecord
	sc := bufio.NewScanner(strings.NewReader(s))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var r flowRecord
		if err := json.Unmarshal(line, &r); err != nil {
			t.Fatalf("flow log line is not JSON: %q: %v", line, err)
		}
		if _, err := time.Parse("2006-01-02T15:04:05.000Z07:00", r.Time); err != nil {
			t.Errorf("flow log time %q is not RFC 3339 with milliseconds: %v", r.Time, err)
		}
		if r.Level == nil {
			t.Fatalf("flow log line has no level: %q", line)
		}
		out = append(out, r)
	}
	return out
}

// steeringState is everything of ours that could be installed in the appliance namespace, as the
// kernel reports it (read with the system tools on purpose: an independent view of what the
// daemon did through netlink).
func steeringState(t *testing.T) string {
	t.Helper()
	return steeringStateIn(t, nsAppliance)
}

// steeringStateIn is steeringState of namespace ns.
func steeringStateIn(t *testing.T, ns string) string {
	t.Helper()
	var b strings.Builder
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, c := range [][]string{
		{"nft", "list", "ruleset"},
		{"ip", "-4", "rule", "show"},
		{"ip", "-6", "rule", "show"},
		{"ip", "-4", "route", "show", "table", "all"},
		{"ip", "-6", "route", "show", "table", "all"},
		{"iptables-save", "-t", "nat"},
		{"ip6tables-save", "-t", "nat"},
	} {
		out, _, _ := run(ctx, ns, c[0], c[1:]...)
		// iptables-save prints a timestamp and packet counters; neither is state.
		var keep []string
		for _, l := range strings.Split(out, "\n") {
			if strings.HasPrefix(l, "#") {
				continue
			}
			if strings.HasPrefix(l, ":") {
				if i := strings.LastIndex(l, " ["); i > 0 {
					l = l[:i]
				}
			}
			keep = append(keep, l)
		}
		fmt.Fprintf(&b, "== %s\n%s\n", strings.Join(c, " "), strings.Join(keep, "\n"))
	}
	return b.String()
}

// oursLeft lists anything of ours still installed.
func oursLeft(state string) []string {
	var left []string
	for _, l := range strings.Split(state, "\n") {
		low := strings.ToLower(l)
		if strings.Contains(low, "mcpintercept") || strings.Contains(l, "proto 0xf5") || strings.Contains(l, "proto 245") {
			left = append(left, strings.TrimSpace(l))
		}
	}
	return left
}
