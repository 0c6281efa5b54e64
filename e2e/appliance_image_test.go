//go:build linux

package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The appliance as an operator gets it: the .deb (make deb) installed by apt into a Debian 12 root
// filesystem built from Debian's packages (scripts/image.sh), booted with systemd-nspawn --boot as
// the lab's appliance (the container lives in the mcpi-appliance network namespace, with the
// veths to the client and server namespaces), and driven with systemctl inside it.

// TestApplianceUnitSecurity: `systemd-analyze security` rates the packaged unit's exposure below
// 3.0 (offline: the unit file as shipped; TestApplianceImage rates the loaded unit too).
func TestApplianceUnitSecurity(t *testing.T) {
	if _, err := exec.LookPath("systemd-analyze"); err != nil {
		t.Skip("systemd-analyze is not installed (package systemd)")
	}
	unit := filepath.Join(repoRoot, "packaging", "systemd", "mcpintercept.service")
	out, _ := exec.Command("systemd-analyze", "security", "--offline=true", "--no-pager", unit).CombinedOutput()
	score := exposure(t, string(out))
	t.Logf("systemd-analyze security --offline=true: exposure %.1f", score)
	if score >= 3.0 {
		t.Errorf("exposure %.1f, want < 3.0:\n%s", score, out)
	}
}

// TestVagrantfile: `vagrant validate` accepts vagrant/Vagrantfile (provider settings aside: no
// VirtualBox or libvirt is needed to validate).
func TestVagrantfile(t *testing.T) {
	if _, err := exec.LookPath("vagrant"); err != nil {
		t.Skip("vagrant is not installed (apt-get install vagrant); vagrant/Vagrantfile not validated")
	}
	tmp := t.TempDir()
	cmd := exec.Command("vagrant", "validate", "--ignore-provider")
	cmd.Dir = filepath.Join(repoRoot, "vagrant")
	cmd.Env = append(os.Environ(), "VAGRANT_DOTFILE_PATH="+filepath.Join(tmp, "dot"), "VAGRANT_HOME="+filepath.Join(tmp, "home"))
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "Vagrantfile validated successfully") {
		t.Errorf("vagrant validate: %v\n%s", err, out)
	}
}

var exposureRE = regexp.MustCompile(`Overall exposure level for mcpintercept\.service: ([0-9.]+)`)

func exposure(t *testing.T, out string) float64 {
	t.Helper()
	m := exposureRE.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no exposure level in systemd-analyze output:\n%s", out)
	}
	f, _ := strconv.ParseFloat(m[1], 64)
	return f
}

// image is a booted appliance image.
type image struct {
	t      *testing.T
	root   string // the container's root (an overlay over the cached base)
	work   string
	boot   *exec.Cmd
	done   chan struct{}
	leader int // the container's PID 1, as the host sees it
	log    *syncBuf
}

// TestApplianceImage boots the packaged appliance for real and checks what an operator relies on:
// the service reaches READY at boot (Type=notify) as the mcpintercept user with two capabilities;
// MCP calls through terminate + Level 1/2 give the results they give directly; `systemctl reload`
// applies a rule change on an open connection; `systemctl kill -s KILL` is cleaned up by
// ExecStopPost and restarted without a duplicate rule; `systemctl stop` leaves the network as it
// was; `apt-get install` on the running system starts nothing; `apt-get remove --purge` leaves no
// file, user, rule or route.
func TestApplianceImage(t *testing.T) {
	needLab(t)
	if os.Getenv("MCPI_SKIP_IMAGE") != "" {
		t.Skip("MCPI_SKIP_IMAGE is set")
	}
	t0 := time.Now()
	lap := func(what string, since time.Time) { t.Logf("timing: %-40s %6.1f s", what, time.Since(since).Seconds()) }

	// The package, built as `make deb` builds it.
	step := time.Now()
	debDir := t.TempDir()
	out, err := exec.Command(filepath.Join(repoRoot, "packaging", "build.sh"), "deb", debDir).CombinedOutput()
	if err != nil {
		t.Fatalf("packaging/build.sh deb: %v\n%s", err, out)
	}
	deb := strings.TrimSpace(lastLine(string(out)))
	lap("make deb", step)

	// The base root filesystem (cached), then the .deb installed by apt from the local file.
	step = time.Now()
	cmd := exec.Command(filepath.Join(repoRoot, "scripts", "image.sh"), "rootfs")
	var rootfsErr strings.Builder
	cmd.Stderr = &rootfsErr
	if err := cmd.Run(); err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) && ee.ExitCode() == 3 {
			t.Skipf("appliance image: cannot build the Debian 12 root filesystem, the package mirror is unreachable (%s)", strings.TrimSpace(rootfsErr.String()))
		}
		t.Fatalf("scripts/image.sh rootfs: %v\n%s", err, rootfsErr.String())
	}
	lap("base root filesystem (debootstrap or cache)", step)

	step = time.Now()
	img := prepareImage(t, deb)
	lap("apt-get install the .deb into the image", step)

	// The lab's configuration, as an operator would adapt it: CA in the state directory, the lab
	// server's CA trusted upstream, the flow log in the journal.
	cfg := labImageConfig(t)
	img.writeConfig(cfg)
	caPEM, err := os.ReadFile(labPKI("server-ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	img.writeFile("/etc/mcpintercept/lab-server-ca.pem", caPEM, 0o640)
	if out, err := exec.Command("chroot", img.root, "systemctl", "enable", "mcpintercept.service").CombinedOutput(); err != nil {
		t.Fatalf("systemctl enable (offline): %v\n%s", err, out)
	}

	// Peers, and the direct results to compare with.
	tlsServer(t)
	goServer(t)
	statelessServer(t)
	type peer struct{ name, url string }
	peers := []peer{
		{"terminate + Level 2", "https://mcp.lab.test:8444/mcp"},
		{"terminate + Level 1", "https://mcp.lab.test:8443/mcp"},
		{"plaintext + Level 2", "http://10.200.2.2:3011/mcp"},
	}
	runPeer := func(url, ca string) string {
		args := []string{"-url", url}
		if strings.HasPrefix(url, "https") {
			args = append(args, "-ca", ca)
		}
		return runT(t, 60*time.Second, nsClient, bin("mcpclient"), args...)
	}
	direct := map[string]string{}
	for _, p := range peers {
		direct[p.name] = runPeer(p.url, labPKI("server-ca.pem"))
	}
	before := steeringState(t)

	// Boot; the service is enabled, so it starts at boot and is active only after READY=1.
	step = time.Now()
	img.bootIn(nsAppliance)
	img.waitActive(90 * time.Second)
	lap("boot to READY (systemctl is-active)", step)
	if s := img.sh("systemctl show -p StatusText --value mcpintercept"); s != "steering installed; serving" {
		t.Errorf("StatusText %q: READY=1 did not come with the status the daemon sends", s)
	}
	pid := img.mainPID()
	status := img.sh("cat /proc/" + pid + "/status")
	if !strings.Contains(status, "\nUid:\t"+img.uid()+"\t") || !strings.Contains(status, "\nCapEff:\t0000000000003000\n") {
		t.Errorf("the daemon should run as mcpintercept (uid %s) with CAP_NET_ADMIN and CAP_NET_RAW only:\n%s", img.uid(), status)
	}
	if out := img.shErr("systemd-analyze verify mcpintercept.service"); out != "" {
		t.Errorf("systemd-analyze verify mcpintercept.service:\n%s", out)
	}
	score := exposure(t, img.shAny("systemd-analyze security --no-pager mcpintercept.service"))
	t.Logf("systemd-analyze security (loaded unit, in the image): exposure %.1f", score)
	if score >= 3.0 {
		t.Errorf("exposure %.1f in the image, want < 3.0", score)
	}

	// Gateway mode on the lab's two links: clients on mcpi-c1, the way out on mcpi-s1.
	img.sh("/usr/share/mcpintercept/gateway.sh up --client-if mcpi-c1 --upstream-if mcpi-s1")
	t.Cleanup(func() {
		exec.Command("ip", "netns", "exec", nsAppliance, "nft", "delete", "table", "inet", "mcpi-gateway").Run()
	})
	if !strings.Contains(img.sh("nft list tables"), "table inet mcpi-gateway") {
		t.Error("gateway.sh up installed no upstream guard table")
	}

	// MCP through the appliance, with the CA exported the documented way.
	step = time.Now()
	applianceCA := filepath.Join(t.TempDir(), "appliance-ca.pem")
	exported := img.sh("runuser -u mcpintercept -- mcpintercept ca export --config /etc/mcpintercept/mcpintercept.yaml")
	if err := os.WriteFile(applianceCA, []byte(exported+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range peers {
		// Level 2 routes hide the tools policy denies (denied_*) from the list: compare without them.
		if got := runPeer(p.url, applianceCA); withoutDeniedTools(got) != withoutDeniedTools(direct[p.name]) {
			t.Errorf("%s through the booted appliance differs from direct:\n%s\nwant\n%s", p.name, got, direct[p.name])
		}
	}
	recs := img.flowRecords()
	var l2, l1 int
	for _, r := range recs {
		switch {
		// Level 2 reads the body: the tool is known whatever headers the client sent.
		case r.TLS == "terminate" && *r.Level == 2 && strings.HasSuffix(r.OrigDst, ":8444") && r.MCPMethod == "tools/call" && r.MCPName == "echo":
			l2++
		// Level 1 reads headers, which this 2025-11-25 client does not send: requests, not tools.
		case r.TLS == "terminate" && *r.Level == 1 && strings.HasSuffix(r.OrigDst, ":8443") && r.Status == 200:
			l1++
		}
	}
	if l2 == 0 || l1 == 0 {
		t.Errorf("journal flow records: %d terminate + Level 2 echo calls, %d terminate + Level 1 requests; want both (%d records)", l2, l1, len(recs))
	}
	lap("MCP calls through, compared with direct", step)

	// systemctl reload applies a rule change; the connection opened before it stays usable.
	step = time.Now()
	c := dialInNS(t, nsClient, "10.200.2.2:3002")
	br := bufio.NewReader(c)
	if s := toolsCall(t, c, br, "echo"); s != 200 {
		t.Fatalf("echo before the reload: %d", s)
	}
	img.writeConfig(strings.Replace(cfg, "  lab:\n", "  lab:\n    - name: no-echo-after-reload\n      when: mcp.name == \"echo\"\n      action: deny\n", 1))
	reloadsBefore := strings.Count(img.journal(), "reloaded routes and rules")
	img.sh("systemctl reload mcpintercept")
	img.waitJournal("reloaded routes and rules", reloadsBefore+1, 15*time.Second)
	if s := toolsCall(t, c, br, "echo"); s != 403 {
		t.Errorf("echo after systemctl reload, same connection: %d, want 403", s)
	}
	if s := toolsCall(t, c, br, "add"); s != 200 {
		t.Errorf("another tool after the reload, same connection: %d, want 200", s)
	}
	c.Close()
	lap("systemctl reload", step)

	// SIGKILL: ExecStopPost removes the steering, Restart=on-failure brings the service back, and
	// exactly one table and one rule per family are installed.
	step = time.Now()
	oldPID := img.mainPID()
	cleanupsBefore := strings.Count(img.journal(), "removed nftables table inet mcpintercept")
	img.sh("systemctl kill -s KILL mcpintercept")
	img.waitJournal("removed nftables table inet mcpintercept", cleanupsBefore+1, 15*time.Second)
	deadline := time.Now().Add(30 * time.Second)
	for img.mainPID() == oldPID || img.shAny("systemctl is-active mcpintercept") != "active" {
		if time.Now().After(deadline) {
			t.Fatalf("the service did not come back after SIGKILL:\n%s", img.shAny("systemctl status --no-pager mcpintercept"))
		}
		time.Sleep(100 * time.Millisecond)
	}
	if n := img.sh("systemctl show -p NRestarts --value mcpintercept"); n != "1" {
		t.Errorf("NRestarts %s after one SIGKILL, want 1", n)
	}
	state := steeringState(t)
	if n := strings.Count(state, "table inet mcpintercept"); n != 1 {
		t.Errorf("after the restart, %d nftables tables of ours, want 1:\n%s", n, state)
	}
	for _, fam := range []string{"-4", "-6"} {
		if n := strings.Count(img.sh("ip "+fam+" rule show"), "proto 245"); n != 1 {
			t.Errorf("after the restart, %d policy rules of ours (ip %s rule), want 1", n, fam)
		}
	}
	if got := runPeer(peers[0].url, applianceCA); withoutDeniedTools(got) != withoutDeniedTools(direct[peers[0].name]) {
		t.Errorf("after the restart, %s differs from direct:\n%s", peers[0].name, got)
	}
	lap("systemctl kill -s KILL, cleanup, restart", step)

	// systemctl stop: the network as it was before the appliance booted.
	step = time.Now()
	img.sh("/usr/share/mcpintercept/gateway.sh down")
	img.sh("systemctl stop mcpintercept")
	if s := img.shAny("systemctl is-active mcpintercept"); s != "inactive" {
		t.Errorf("after systemctl stop the unit is %q, want inactive (a failed cleanup marks it failed):\n%s", s, img.journal())
	}
	if left := oursLeft(steeringState(t)); len(left) > 0 {
		t.Errorf("after systemctl stop, steering remains:\n%s", strings.Join(left, "\n"))
	}
	if after := steeringState(t); after != before {
		t.Errorf("after systemctl stop the network state differs from before boot:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	lap("systemctl stop", step)

	// iptables REDIRECT also works as the service user with the two capabilities (the iptables
	// binary it runs inherits them as ambient capabilities).
	step = time.Now()
	img.writeConfig(strings.Replace(cfg, "mechanism: nftables-tproxy", "mechanism: iptables-redirect", 1))
	img.sh("systemctl start mcpintercept")
	if !strings.Contains(steeringState(t), "chain MCPINTERCEPT") {
		t.Errorf("iptables-redirect as the service user installed no chain:\n%s\n%s", steeringState(t), img.journalTail())
	}
	if got := runPeer(peers[0].url, applianceCA); withoutDeniedTools(got) != withoutDeniedTools(direct[peers[0].name]) {
		t.Errorf("%s through iptables-redirect differs from direct:\n%s", peers[0].name, got)
	}
	img.sh("systemctl stop mcpintercept")
	if left := oursLeft(steeringState(t)); len(left) > 0 {
		t.Errorf("after stopping iptables-redirect, steering remains:\n%s", strings.Join(left, "\n"))
	}
	lap("iptables-redirect as the service user", step)

	// Purge, then install again on the running system: postinst enables and starts nothing; purge
	// again: no file, user, rule or route of ours remains.
	step = time.Now()
	img.purge()
	debBytes, err := os.ReadFile(deb)
	if err != nil {
		t.Fatal(err)
	}
	img.writeFile("/var/tmp/mcpintercept.deb", debBytes, 0o644)
	img.sh("DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends /var/tmp/mcpintercept.deb")
	img.sh("rm /var/tmp/mcpintercept.deb")
	if s := img.shAny("systemctl is-enabled mcpintercept"); s != "disabled" {
		t.Errorf("after apt-get install on a running system the unit is %q, want disabled", s)
	}
	if s := img.shAny("systemctl is-active mcpintercept"); s != "inactive" {
		t.Errorf("after apt-get install on a running system the unit is %q, want inactive", s)
	}
	if left := oursLeft(steeringState(t)); len(left) > 0 {
		t.Errorf("apt-get install changed the network:\n%s", strings.Join(left, "\n"))
	}
	img.purge()
	lap("install on the running system, purge", step)
	t.Logf("timing: %-40s %6.1f s", "whole test", time.Since(t0).Seconds())
}

// prepareImage overlays a writable copy of the cached base and installs deb into it with apt.
func prepareImage(t *testing.T, deb string) *image {
	t.Helper()
	work, err := os.MkdirTemp("/var/tmp", "mcpi-image-")
	if err != nil {
		t.Fatal(err)
	}
	img := &image{t: t, work: work, log: &syncBuf{}}
	t.Cleanup(func() {
		img.shutdown()
		if out, err := exec.Command(filepath.Join(repoRoot, "scripts", "image.sh"), "release", work).CombinedOutput(); err != nil {
			t.Errorf("image.sh release: %v\n%s", err, out)
		}
	})
	out, err := exec.Command(filepath.Join(repoRoot, "scripts", "image.sh"), "prepare", deb, work).Output()
	if err != nil {
		var stderr []byte
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			stderr = ee.Stderr
		}
		t.Fatalf("image.sh prepare: %v\n%s", err, stderr)
	}
	img.root = strings.TrimSpace(lastLine(string(out)))
	return img
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// labImageConfig is examples/lab.yaml with the paths of an installed appliance.
func labImageConfig(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "examples", "lab.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	s := regexp.MustCompile(`(?m)^  dir: \.\./\.lab/appliance-ca.*$`).ReplaceAllString(string(b), "  dir: /var/lib/mcpintercept/ca")
	s = strings.Replace(s, "extra_cas: [../.lab/pki/server-ca.pem]", "extra_cas: [/etc/mcpintercept/lab-server-ca.pem]", 1)
	if !strings.Contains(s, "dir: /var/lib/mcpintercept/ca") || !strings.Contains(s, "/etc/mcpintercept/lab-server-ca.pem") {
		t.Fatalf("examples/lab.yaml changed shape; adapt labImageConfig:\n%s", s)
	}
	return s
}

func (img *image) writeFile(path string, data []byte, mode os.FileMode) {
	img.t.Helper()
	p := filepath.Join(img.root, path)
	if err := os.WriteFile(p, data, mode); err != nil {
		img.t.Fatal(err)
	}
	if strings.HasPrefix(path, "/etc/mcpintercept/") {
		gid, err := strconv.Atoi(img.gid())
		if err != nil {
			img.t.Fatal(err)
		}
		os.Chown(p, 0, gid)
		os.Chmod(p, mode)
	}
}

// writeConfig replaces the appliance's configuration (root:mcpintercept 0640, as postinst leaves it).
func (img *image) writeConfig(cfg string) {
	img.writeFile("/etc/mcpintercept/mcpintercept.yaml", []byte(cfg), 0o640)
}

// uid and gid of the mcpintercept user in the image.
func (img *image) uid() string { return img.passwdField("passwd", 2) }
func (img *image) gid() string { return img.passwdField("group", 2) }

func (img *image) passwdField(file string, field int) string {
	img.t.Helper()
	b, err := os.ReadFile(filepath.Join(img.root, "etc", file))
	if err != nil {
		img.t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Split(l, ":")
		if f[0] == "mcpintercept" && len(f) > field {
			return f[field]
		}
	}
	img.t.Fatalf("no mcpintercept entry in the image's /etc/%s", file)
	return ""
}

// bootIn boots the image with systemd-nspawn in the network namespace ns and finds its PID 1.
func (img *image) bootIn(ns string) {
	img.t.Helper()
	cmd := exec.Command(filepath.Join(repoRoot, "scripts", "image.sh"), "boot", img.root, ns)
	cmd.Stdout, cmd.Stderr = img.log, img.log
	// If the test binary dies, the container dies with it (and lab.sh down kills what is left in
	// the namespace).
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		img.t.Fatal(err)
	}
	img.boot, img.done = cmd, make(chan struct{})
	go func() { cmd.Wait(); close(img.done) }()
	deadline := time.Now().Add(30 * time.Second)
	for img.leader == 0 {
		select {
		case <-img.done:
			img.t.Fatalf("systemd-nspawn exited during boot:\n%s", img.log)
		default:
		}
		if time.Now().After(deadline) {
			img.t.Fatalf("no systemd inside the container after 30 s:\n%s", img.log)
		}
		kids, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", cmd.Process.Pid, cmd.Process.Pid))
		for _, k := range strings.Fields(string(kids)) {
			comm, _ := os.ReadFile("/proc/" + k + "/comm")
			if strings.TrimSpace(string(comm)) == "systemd" {
				img.leader, _ = strconv.Atoi(k)
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// shutdown powers the container off (SIGTERM to nspawn: an orderly halt), SIGKILL after 30 s.
func (img *image) shutdown() {
	if img.boot == nil {
		return
	}
	select {
	case <-img.done:
		return
	default:
	}
	img.boot.Process.Signal(syscall.SIGTERM)
	select {
	case <-img.done:
	case <-time.After(30 * time.Second):
		img.boot.Process.Kill()
		<-img.done
	}
}

// exec runs a shell command inside the booted container.
func (img *image) exec(command string) (string, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "nsenter", "-t", strconv.Itoa(img.leader), "-m", "-u", "-i", "-n", "-p",
		"/usr/bin/env", "-i", "PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8", "/bin/sh", "-c", command)
	var o, e strings.Builder
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	return strings.TrimSpace(o.String()), strings.TrimSpace(e.String()), err
}

// sh runs command in the container and fails the test when it fails.
func (img *image) sh(command string) string {
	img.t.Helper()
	o, e, err := img.exec(command)
	if err != nil {
		img.t.Fatalf("in the image: %s: %v\nstdout:\n%s\nstderr:\n%s\njournal:\n%s", command, err, o, e, img.journalTail())
	}
	return o
}

// shAny runs command and returns its output whatever its exit status.
func (img *image) shAny(command string) string {
	o, _, _ := img.exec(command)
	return o
}

// shErr runs command and returns its stderr (and the error), "" when it succeeded silently.
func (img *image) shErr(command string) string {
	_, e, err := img.exec(command)
	if err != nil {
		return fmt.Sprintf("%v\n%s", err, e)
	}
	return e
}

func (img *image) mainPID() string {
	img.t.Helper()
	return img.sh("systemctl show -p MainPID --value mcpintercept")
}

func (img *image) journal() string { return img.shAny("journalctl -u mcpintercept -o cat --no-pager") }

func (img *image) journalTail() string {
	return img.shAny("journalctl -u mcpintercept -o cat --no-pager -n 40")
}

// waitActive waits until the unit is active: for Type=notify, READY=1 has arrived.
func (img *image) waitActive(timeout time.Duration) {
	img.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		s := img.shAny("systemctl is-active mcpintercept")
		if s == "active" {
			return
		}
		if s == "failed" || time.Now().After(deadline) {
			img.t.Fatalf("mcpintercept is %q at boot:\n%s\nconsole:\n%s", s, img.shAny("systemctl status --no-pager -l mcpintercept"), img.log)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitJournal waits until the unit's journal holds substr at least n times.
func (img *image) waitJournal(substr string, n int, timeout time.Duration) {
	img.t.Helper()
	deadline := time.Now().Add(timeout)
	for strings.Count(img.journal(), substr) < n {
		if time.Now().After(deadline) {
			img.t.Fatalf("no %q (x%d) in the journal within %v:\n%s", substr, n, timeout, img.journalTail())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// flowRecords are the flow log lines the daemon wrote to the journal (log.flows: stdout).
func (img *image) flowRecords() []flowRecord {
	img.t.Helper()
	var lines []string
	for _, l := range strings.Split(img.journal(), "\n") {
		if strings.HasPrefix(l, "{") {
			lines = append(lines, l)
		}
	}
	return parseFlowLog(img.t, strings.Join(lines, "\n"))
}

// purge removes the package with apt-get remove --purge and checks nothing of it remains: no
// file (in the overlay's upper layer, where every change to the base lands), no user or group,
// no enabled or loaded unit, no steering.
func (img *image) purge() {
	img.t.Helper()
	img.sh("DEBIAN_FRONTEND=noninteractive apt-get remove --purge -y -q mcpintercept")
	if o := img.shAny("getent passwd mcpintercept; getent group mcpintercept"); o != "" {
		img.t.Errorf("after purge the user or group remains: %s", o)
	}
	if s := img.shAny("systemctl show -p LoadState --value mcpintercept"); s != "not-found" {
		img.t.Errorf("after purge the unit's LoadState is %q, want not-found", s)
	}
	var left []string
	filepath.Walk(filepath.Join(img.work, "upper"), func(p string, fi os.FileInfo, err error) error {
		if err == nil && strings.Contains(filepath.Base(p), "mcpintercept") {
			left = append(left, strings.TrimPrefix(p, filepath.Join(img.work, "upper")))
		}
		return nil
	})
	if len(left) > 0 {
		img.t.Errorf("after purge these files remain:\n%s", strings.Join(left, "\n"))
	}
	if left := oursLeft(steeringState(img.t)); len(left) > 0 {
		img.t.Errorf("after purge, steering remains:\n%s", strings.Join(left, "\n"))
	}
}
