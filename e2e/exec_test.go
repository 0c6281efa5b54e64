//go:build linux

package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// execIn runs `mcpintercept exec ARGS...` in mcpi-client: the appliance and its client processes
// share the namespace, as on a developer's host.
func execIn(t *testing.T, dir string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var e syncBuf
	o, code, err := execInErr(dir, &e, args...)
	if err != nil {
		t.Fatal(err)
	}
	return o, e.String(), code
}

// execInErr is execIn for goroutines (no t.Fatal); stderr streams into e as it is written.
func execInErr(dir string, e *syncBuf, args ...string) (string, int, error) {
	cmd := exec.Command("ip", append([]string{"netns", "exec", nsClient, bin("mcpintercept"), "exec"}, args...)...)
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var o syncBuf
	cmd.Stdout, cmd.Stderr = &o, e
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		return "", -1, err
	}
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		cmd.Process.Kill()
		return o.String(), -1, fmt.Errorf("exec %v did not finish:\n%s", args, e.String())
	}
	return o.String(), cmd.ProcessState.ExitCode(), nil
}

func labConfig() string { return filepath.Join(repoRoot, "examples", "lab.yaml") }

// TestExecNodeTLS: `mcpintercept exec --config examples/lab.yaml -- node client.mjs
// https://mcp.lab.test:8443/mcp` — the Node SDK client, unmodified, succeeds against the TLS lab
// server through eBPF steering and terminate, and its calls are listed.
func TestExecNodeTLS(t *testing.T) {
	needLab(t)
	tlsServer(t)
	direct := runNode(t, labPKI("server-ca.pem"), "https://mcp.lab.test:8443/mcp")
	out, errOut, code := execIn(t, filepath.Join(repoRoot, "e2e", "node"), "--config", labConfig(), "--",
		"node", "client.mjs", "https://mcp.lab.test:8443/mcp")
	if code != 0 || out != direct {
		t.Fatalf("exit %d; output:\n%s\nwant\n%s\nstderr:\n%s", code, out, direct, errOut)
	}
	if !strings.Contains(errOut, "node[") || !strings.Contains(errOut, "-> 10.200.2.2:8443 200") && !strings.Contains(errOut, "-> [fd00:200:2::2]:8443 200") {
		t.Errorf("no live line for the node client's requests:\n%s", errOut)
	}
	if !strings.Contains(errOut, "PROCESS") {
		t.Errorf("no summary table:\n%s", errOut)
	}
}

// TestExecGoIPv6AndMapped: the Go SDK client over IPv6 and over an IPv4-mapped address (an IPv6
// socket connecting to ::ffff:10.200.2.2), with the appliance CA trusted only through the
// SSL_CERT_FILE that exec sets.
func TestExecGoIPv6AndMapped(t *testing.T) {
	needLab(t)
	tlsServer(t)
	cases := []struct{ name, url, network, dst string }{
		{"ipv6", "https://[fd00:200:2::2]:8443/mcp", "tcp", "[fd00:200:2::2]:8443"},
		{"ipv4-mapped", "https://[::ffff:10.200.2.2]:8443/mcp", "tcp6", "10.200.2.2:8443"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			direct := runT(t, 60*time.Second, nsClient, bin("mcpclient"), "-url", c.url, "-dial-network", c.network, "-ca", labPKI("server-ca.pem"))
			out, errOut, code := execIn(t, repoRoot, "--config", labConfig(), "--",
				bin("mcpclient"), "-url", c.url, "-dial-network", c.network)
			if code != 0 || out != direct {
				t.Fatalf("exit %d; output:\n%s\nwant\n%s\nstderr:\n%s", code, out, direct, errOut)
			}
			if !strings.Contains(errOut, "mcpclient[") || !strings.Contains(errOut, "-> "+c.dst+" 200") {
				t.Errorf("no live line for a request to %s:\n%s", c.dst, errOut)
			}
		})
	}
}

// TestExecScope: a process outside the cgroup is not intercepted, a loopback destination is left
// alone under --no-loopback, and exec exits with the command's exit code.
func TestExecScope(t *testing.T) {
	needLab(t)
	goServer(t)
	bytePump(t)
	lo := startT(t, nsClient, bin("bytepump"), "serve", "-listen", "127.0.0.1:3009", "-reply-bytes", "1000")
	if err := lo.waitFor("READY", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	// Inside the cgroup: one loopback connection (left alone) and one to the lab server (steered:
	// the positive control), then a pause during which a process outside the cgroup connects.
	script := bin("bytepump") + ` send -addr 127.0.0.1:3009 -bytes 1000 -expect-bytes 1000 >/dev/null && ` +
		bin("bytepump") + ` send -addr 10.200.2.2:3005 -bytes 1000 >/dev/null && sleep 3; exit 7`
	type result struct {
		out  string
		code int
		err  error
	}
	var errOut syncBuf
	res := make(chan result, 1)
	go func() {
		o, c, err := execInErr(repoRoot, &errOut, "--no-loopback", "--", "sh", "-c", script)
		res <- result{o, c, err}
	}()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(errOut.String(), "connection to 10.200.2.2:3005") {
		if time.Now().After(deadline) {
			t.Fatalf("the command's connect to the lab server was not steered:\n%s", errOut.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Outside the cgroup, in the same namespace, while the hooks are attached.
	runT(t, 60*time.Second, nsClient, bin("mcpclient"), "-url", "http://10.200.2.2:8080/mcp")
	r := <-res
	if r.err != nil {
		t.Fatal(r.err)
	}
	out := errOut.String()
	if r.code != 7 {
		t.Errorf("exit code %d, want the command's 7:\n%s", r.code, out)
	}
	if strings.Contains(out, "mcpclient[") {
		t.Errorf("a process outside the cgroup was intercepted:\n%s", out)
	}
	if strings.Contains(out, "-> 127.0.0.1:3009") || strings.Contains(out, "connection to 127.0.0.1:3009") {
		t.Errorf("a loopback connection was intercepted:\n%s", out)
	}
	if !strings.Contains(out, "bytepump[") {
		t.Errorf("the steered connection does not name its process:\n%s", out)
	}
}

// TestExecLoopback: a development MCP server on localhost (the Go SDK server on 127.0.0.1 and ::1
// in the client's namespace) is intercepted by default — same output as direct, a live line per
// request — and with --no-loopback exec says why nothing was intercepted: the connects it saw and
// left alone, by destination and reason.
func TestExecLoopback(t *testing.T) {
	needLab(t)
	srv := startT(t, nsClient, bin("mcpserver"), "-listen", "127.0.0.1:3334,[::1]:3334")
	if err := srv.waitFor("READY", 30*time.Second); err != nil {
		t.Fatal(err)
	}
	for _, url := range []string{"http://127.0.0.1:3334/mcp", "http://[::1]:3334/mcp"} {
		direct := runT(t, 60*time.Second, nsClient, bin("mcpclient"), "-url", url)
		out, errOut, code := execIn(t, repoRoot, "--", bin("mcpclient"), "-url", url)
		if code != 0 || out != direct {
			t.Fatalf("%s: exit %d; output:\n%s\nwant\n%s\nstderr:\n%s", url, code, out, direct, errOut)
		}
		host := strings.TrimSuffix(strings.TrimPrefix(url, "http://"), "/mcp")
		if !strings.Contains(errOut, "mcpclient[") || !strings.Contains(errOut, "-> "+host+" 200") {
			t.Errorf("%s: no live line for the localhost server's requests:\n%s", url, errOut)
		}
	}
	out, errOut, code := execIn(t, repoRoot, "--no-loopback", "--", bin("mcpclient"), "-url", "http://127.0.0.1:3334/mcp")
	if code != 0 || out == "" {
		t.Fatalf("--no-loopback: exit %d, output %q:\n%s", code, out, errOut)
	}
	for _, want := range []string{"no intercepted traffic", "connects seen and left alone", "127.0.0.1:3334 x", "loopback destination (--no-loopback)"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("--no-loopback: stderr lacks %q:\n%s", want, errOut)
		}
	}
}

// TestExecCommRule: a rule on client.comm denies a tool to one program and allows it to another
// ("only this program may call that tool").
func TestExecCommRule(t *testing.T) {
	needLab(t)
	statelessServer(t)
	dir := t.TempDir()
	for _, name := range []string{"agent-a", "agent-b"} {
		b, _ := os.ReadFile(bin("mcpclient"))
		os.WriteFile(filepath.Join(dir, name), b, 0o755)
	}
	cfgText, err := os.ReadFile(labConfig())
	if err != nil {
		t.Fatal(err)
	}
	cfg := strings.Replace(string(cfgText), "  lab:\n", `  lab:
    - name: only-agent-b-may-echo
      when: 'client.comm == "agent-a" && mcp.name == "echo"'
      action: deny
      reason: agent-a may not call echo
`, 1)
	cfg = strings.Replace(cfg, "dir: ../.lab/appliance-ca", "dir: "+filepath.Join(repoRoot, ".lab", "appliance-ca"), 1)
	cfg = strings.Replace(cfg, "extra_cas: [../.lab/pki/server-ca.pem]", "extra_cas: ["+labPKI("server-ca.pem")+"]", 1)
	cfgPath := filepath.Join(dir, "comm.yaml")
	os.WriteFile(cfgPath, []byte(cfg), 0o644)
	args := []string{"-url", "http://10.200.2.2:3002/mcp", "-tool", "echo", "-args", `{"text":"hi"}`}
	_, errA, codeA := execIn(t, dir, append([]string{"--config", cfgPath, "--", filepath.Join(dir, "agent-a")}, args...)...)
	outB, errB, codeB := execIn(t, dir, append([]string{"--config", cfgPath, "--", filepath.Join(dir, "agent-b")}, args...)...)
	if codeA == 0 || !strings.Contains(errA, "deny (only-agent-b-may-echo)") {
		t.Errorf("agent-a: exit %d; want a denial by only-agent-b-may-echo:\n%s", codeA, errA)
	}
	if codeB != 0 || !strings.Contains(outB, `"hi"`) {
		t.Errorf("agent-b: exit %d, output %s; want the echo:\n%s", codeB, outB, errB)
	}
}

// TestExecFailOpen: SIGKILL the appliance while its command runs: the kernel detaches the
// programs (bpf_link), so the command connects directly afterwards; `cleanup` then leaves no
// link, pin or cgroup of ours.
func TestExecFailOpen(t *testing.T) {
	needLab(t)
	goServer(t)
	bytePump(t)
	fifo := filepath.Join(t.TempDir(), "go")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	// One steered connect (proves the hooks were attached), then wait for the test's go-ahead,
	// which comes only once the appliance is dead.
	p := startT(t, nsClient, bin("mcpintercept"), "exec", "--", "sh", "-c",
		bin("bytepump")+" send -addr 10.200.2.2:3005 -bytes 100 >/dev/null; read x < "+fifo+"; exec "+bin("mcpclient")+" -url http://10.200.2.2:8080/mcp")
	if err := p.waitFor("connection to 10.200.2.2:3005", 30*time.Second); err != nil {
		t.Fatal(err)
	}
	pid := p.cmd.Process.Pid
	p.cmd.Process.Signal(syscall.SIGKILL)
	for deadline := time.Now().Add(10 * time.Second); syscall.Kill(pid, 0) == nil; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the appliance did not die")
		}
	}
	if err := os.WriteFile(fifo, []byte("go\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.done: // waits for the orphaned command too: it holds the same stdout
	case <-time.After(60 * time.Second):
		t.Fatal("the command did not finish after the appliance was killed")
	}
	if !strings.Contains(p.stdout.String(), "hello through the network") {
		t.Fatalf("the command did not reach the server directly after the kill:\nstdout:\n%s\nstderr:\n%s", p.stdout, p.stderr)
	}
	out := runT(t, 30*time.Second, nsAppliance, bin("mcpintercept"), "cleanup")
	if !strings.Contains(out, "cgroup") {
		t.Errorf("cleanup did not remove the orphaned cgroup:\n%s", out)
	}
	if left := ourCgroups(t); len(left) > 0 {
		t.Errorf("cgroups of ours left: %v", left)
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
}

// ourCgroups lists mcpintercept-* cgroups under every cgroup2 mount of this mount namespace.
func ourCgroups(t *testing.T) []string {
	t.Helper()
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var left []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		for i, fld := range fields {
			if fld == "-" && i+1 < len(fields) && fields[i+1] == "cgroup2" {
				m, _ := filepath.Glob(filepath.Join(fields[4], "mcpintercept-*"))
				for _, cg := range m {
					if !createdElsewhere(cg) {
						left = append(left, cg)
					}
				}
			}
		}
	}
	return left
}

// createdElsewhere reports whether the cgroup (mcpintercept-<pid>-<n>...) belongs to a running
// process that this test binary did not start: CI runs the unit tests (the eBPF ones make such
// cgroups) beside the e2e package, and their cgroups are none of this test's business. A creator
// that is gone counts as ours: its cgroup is an orphan some test left.
func createdElsewhere(cg string) bool {
	rest := strings.TrimPrefix(filepath.Base(cg), "mcpintercept-")
	pidStr, _, _ := strings.Cut(rest, "-")
	pid, err := strconv.Atoi(pidStr)
	if err != nil || pid <= 0 {
		return false
	}
	self := os.Getpid()
	for hops := 0; pid > 1 && hops < 64; hops++ {
		if pid == self {
			return false
		}
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return hops > 0 // a dead creator: ours to answer for
		}
		// The parent pid is the second field after the command, which is in parentheses.
		i := strings.LastIndexByte(string(stat), ')')
		f := strings.Fields(string(stat[i+1:]))
		if len(f) < 2 {
			return false
		}
		if pid, err = strconv.Atoi(f[1]); err != nil {
			return false
		}
	}
	return true
}

// TestHostModeEBPF: `run` with `mechanism: ebpf` and `ebpf.cgroup` steers an existing cgroup on
// the appliance's own host; flow records name the process.
func TestHostModeEBPF(t *testing.T) {
	needLab(t)
	goServer(t)
	// A cgroup v2 mount outside /sys, which `ip netns exec` remounts without cgroups.
	mnt := filepath.Join(t.TempDir(), "cg2")
	os.MkdirAll(mnt, 0o755)
	if err := syscall.Mount("cgroup2", mnt, "cgroup2", 0, ""); err != nil {
		t.Skipf("cannot mount cgroup2: %v", err)
	}
	t.Cleanup(func() { syscall.Unmount(mnt, syscall.MNT_DETACH) })
	cg := filepath.Join(mnt, fmt.Sprintf("mcpi-hostmode-%d", os.Getpid()))
	if err := os.Mkdir(cg, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for i := 0; i < 50 && os.Remove(cg) != nil; i++ {
			time.Sleep(100 * time.Millisecond)
		}
	})
	cfg := coreConfig + "ebpf:\n  cgroup: " + cg + "\n"
	cfgPath := filepath.Join(t.TempDir(), "host.yaml")
	os.WriteFile(cfgPath, []byte(cfg), 0o644)
	p := startT(t, nsClient, bin("mcpintercept"), "run", "--config", cfgPath, "--mechanism", "ebpf")
	if err := p.waitFor("msg=ready", 30*time.Second); err != nil {
		t.Fatal(err)
	}
	want := runT(t, 60*time.Second, nsClient, bin("mcpclient"), "-url", "http://10.200.2.2:8080/mcp")
	got := runT(t, 60*time.Second, nsClient, "sh", "-c",
		"echo $$ > "+cg+"/cgroup.procs && exec "+bin("mcpclient")+" -url http://10.200.2.2:8080/mcp")
	if got != want {
		t.Errorf("client in the steered cgroup:\n%s\nwant\n%s", got, want)
	}
	if err := p.stop(syscall.SIGTERM, 30*time.Second); err != nil {
		t.Fatalf("stop: %v\n%s", err, p.stderr)
	}
	var rec struct {
		OrigDst   string `json:"orig_dst"`
		Mechanism string `json:"mechanism"`
		Process   *struct {
			PID  int    `json:"pid"`
			Comm string `json:"comm"`
		} `json:"process"`
	}
	found := 0
	for _, l := range strings.Split(strings.TrimSpace(p.stdout.String()), "\n") {
		if json.Unmarshal([]byte(l), &rec) == nil && rec.Mechanism == "ebpf" && rec.OrigDst == "10.200.2.2:8080" &&
			rec.Process != nil && rec.Process.Comm == "mcpclient" && rec.Process.PID > 0 {
			found++
		}
	}
	if found == 0 {
		t.Fatalf("no ebpf flow record naming the mcpclient process:\n%s\n%s", p.stdout, p.stderr)
	}
}

// TestExecRunsAsInvokingUser: `sudo mcpintercept exec -- CMD` runs CMD as the user who ran sudo
// (SUDO_UID/SUDO_GID), not as root; root only when asked with --user root (issue 8 case 9).
func TestExecRunsAsInvokingUser(t *testing.T) {
	needLab(t)
	for _, c := range []struct {
		name string
		env  []string
		args []string
		want string
	}{
		{"sudo by uid 65534", []string{"SUDO_UID=65534", "SUDO_GID=65534", "SUDO_USER=nobody"}, nil, "65534 65534"},
		{"sudo, --user root", []string{"SUDO_UID=65534", "SUDO_GID=65534"}, []string{"--user", "root"}, "0 0"},
		{"no sudo: root", nil, nil, "0 0"},
	} {
		t.Run(c.name, func(t *testing.T) {
			args := append([]string{"netns", "exec", nsClient, bin("mcpintercept"), "exec", "--config", labConfig()}, c.args...)
			args = append(args, "--", "sh", "-c", `echo "$(id -u) $(id -g)"`)
			cmd := exec.Command("ip", args...)
			// CI may itself run under sudo: the case decides the SUDO_* variables alone.
			var env []string
			for _, kv := range os.Environ() {
				if !strings.HasPrefix(kv, "SUDO_") {
					env = append(env, kv)
				}
			}
			cmd.Env = append(env, c.env...)
			cmd.Dir = "/"
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("exec: %v\n%s", err, out)
			}
			if got := strings.TrimSpace(string(out)); got != c.want {
				t.Errorf("uid gid = %q, want %q", got, c.want)
			}
		})
	}
}
