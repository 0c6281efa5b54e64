//go:build linux

package e2e

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netns"
)

// inNS runs open with this OS thread inside a lab namespace and returns what it opened: a socket
// made there stays there afterwards. The thread returns to its own namespace before anything else
// runs on it.
func inNS[T any](t *testing.T, ns string, open func() (T, error)) T {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer orig.Close()
	target, err := netns.GetFromName(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	if err := netns.Set(target); err != nil {
		t.Fatal(err)
	}
	v, oerr := open()
	if err := netns.Set(orig); err != nil {
		t.Fatalf("cannot return to the original namespace: %v", err)
	}
	if oerr != nil {
		t.Fatal(oerr)
	}
	return v
}

// dialInNS opens a TCP connection from inside a lab namespace.
func dialInNS(t *testing.T, ns, addr string) net.Conn {
	t.Helper()
	return inNS(t, ns, func() (net.Conn, error) { return net.DialTimeout("tcp", addr, 10*time.Second) })
}

// toolsCall sends one MCP tools/call (with the 2026-07-28 Mcp-Method and Mcp-Name headers) on an
// open keep-alive connection and returns the HTTP status.
func toolsCall(t *testing.T, c net.Conn, br *bufio.Reader, tool string) int {
	s, _ := toolsCallResp(t, c, br, tool)
	return s
}

func toolsCallResp(t *testing.T, c net.Conn, br *bufio.Reader, tool string) (int, http.Header) {
	t.Helper()
	body := fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":%q,"arguments":{"text":"x"}}}`, tool)
	req := "POST /mcp HTTP/1.1\r\nHost: 10.200.2.2:3002\r\nContent-Type: application/json\r\n" +
		"Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2025-06-18\r\n" +
		"Mcp-Method: tools/call\r\nMcp-Name: " + tool + "\r\n" +
		fmt.Sprintf("Content-Length: %d\r\n\r\n%s", len(body), body)
	c.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := c.Write([]byte(req)); err != nil {
		t.Fatalf("write: %v", err)
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("read response: %v", err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	bufio.NewReader(resp.Body).WriteTo(&b)
	return resp.StatusCode, resp.Header
}

// TestReloadKeepsOpenFlows: SIGHUP swaps the rules ("Reloading the config (SIGHUP) swaps rules
// without dropping open flows"): on one keep-alive connection, echo is allowed before the reload
// and denied after it, and the connection stays usable; a broken file is refused and the running
// rules stay.
func TestReloadKeepsOpenFlows(t *testing.T) {
	needLab(t)
	statelessServer(t)
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "reload.yaml")
	base := level1Config(t, filepath.Join(dir, "ca"))
	base = strings.Replace(base, "rate: 0.01, burst: 10}", "rate: 1000, burst: 1000}", 1)
	if err := os.WriteFile(cfgPath, []byte(base), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := start(nsAppliance, bin("mcpintercept"), "run", "--config", cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	a := &appliance{proc: p, mechanism: "nftables-tproxy"}
	t.Cleanup(func() {
		if !a.stopped {
			a.stopGracefully(t)
		}
	})
	if err := p.waitFor("msg=ready", 30*time.Second); err != nil {
		t.Fatal(err)
	}

	c := dialInNS(t, nsClient, "10.200.2.2:3002")
	defer c.Close()
	br := bufio.NewReader(c)
	if s := toolsCall(t, c, br, "echo"); s != 200 {
		t.Fatalf("echo before reload: %d", s)
	}

	denyEcho := strings.Replace(base, "  lab:\n", "  lab:\n    - name: no-echo-after-reload\n      when: mcp.name == \"echo\"\n      action: deny\n", 1)
	os.WriteFile(cfgPath, []byte(denyEcho), 0o644)
	p.cmd.Process.Signal(syscall.SIGHUP)
	if err := p.waitFor("reloaded routes and rules", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if s := toolsCall(t, c, br, "echo"); s != 403 {
		t.Fatalf("echo after reload on the same connection: %d, want 403", s)
	}
	if s := toolsCall(t, c, br, "add"); s != 200 {
		t.Fatalf("another tool after the deny, same connection: %d, want 200", s)
	}

	// A broken file is refused; the running rules stay.
	os.WriteFile(cfgPath, []byte(denyEcho+"\nrule_sets: [not a map\n"), 0o644)
	p.cmd.Process.Signal(syscall.SIGHUP)
	if err := p.waitFor("reload refused", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if s := toolsCall(t, c, br, "echo"); s != 403 {
		t.Fatalf("echo after a refused reload: %d, want 403 (rules unchanged)", s)
	}
	c.Close()
	a.stopGracefully(t)
}

// TestRateLimitExact: a rate_limit rule with burst 5 lets exactly 5 tools/call through on one
// connection, then answers 429 with Retry-After, and the server sees exactly those 5 ("MAY
// inspect transport-layer headers for policy decisions (rate limiting ...)", Level 1
// Requirements).
func TestRateLimitExact(t *testing.T) {
	needLab(t)
	plain, _ := statelessServer(t)
	cfg := strings.Replace(level1Config(t, filepath.Join(t.TempDir(), "ca")), "rate: 0.01, burst: 10}", "rate: 0.001, burst: 5}", 1)
	a := startAppliance(t, "nftables-tproxy", cfg)
	before := strings.Count(plain.stderr.String(), "mcp_method=tools/call")
	c := dialInNS(t, nsClient, "10.200.2.2:3002")
	defer c.Close()
	br := bufio.NewReader(c)
	for i := 0; i < 5; i++ {
		if s := toolsCall(t, c, br, "echo"); s != 200 {
			t.Fatalf("call %d within the burst: %d", i, s)
		}
	}
	s, h := toolsCallResp(t, c, br, "echo")
	if s != 429 || h.Get("Retry-After") == "" {
		t.Fatalf("call 6: status %d, Retry-After %q; want 429 with Retry-After", s, h.Get("Retry-After"))
	}
	if n := strings.Count(plain.stderr.String(), "mcp_method=tools/call") - before; n != 5 {
		t.Fatalf("the server saw %d tools/call, want exactly the 5 allowed", n)
	}
	c.Close()
	a.stopGracefully(t)
}
