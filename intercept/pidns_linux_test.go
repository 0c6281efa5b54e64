package intercept

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const nestedCleanupEnv = "MCPI_NESTED_CLEANUP_PARENT"

func TestParseNSLink(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want uint64
		ok   bool
	}{
		{"pid:[4026531836]", initPIDNSInode, true},
		{"pid:[12]", 12, true},
		{"pid:4026531836", 0, false},
		{"pid:[x]", 0, false},
		{"", 0, false},
	} {
		got, err := parseNSLink(tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("parseNSLink(%q) = %d, %v", tt.in, got, err)
		}
	}
}

func TestCreatorAliveAcrossPIDNamespaces(t *testing.T) {
	if !inInitialPIDNS() {
		t.Skip("the test runs in a nested PID namespace")
	}
	// A namespace inode no process has: its creator is gone wherever its pid points here.
	gone := fmt.Sprintf("%s%d-1-ns%d", CgroupPrefix, os.Getpid(), uint64(1))
	if creatorAlive(gone) {
		t.Errorf("creatorAlive(%q) = true: no process lives in that PID namespace", gone)
	}
	self := fmt.Sprintf("%s%d-1-ns%d", CgroupPrefix, os.Getpid(), uint64(initPIDNSInode))
	if !creatorAlive(self) {
		t.Errorf("creatorAlive(%q) = false for this process", self)
	}
	for _, bad := range []string{CgroupPrefix + "1-2-3", CgroupPrefix + "1-2-nsx", CgroupPrefix + "1-x", CgroupPrefix + "1-2-ns"} {
		if creatorAlive(bad) {
			t.Errorf("creatorAlive(%q) = true for a name that does not parse", bad)
		}
	}
}

// A cleanup run inside a container (systemd-nspawn's ExecStopPost, a pod) sees neither the host's
// processes nor their fds. It must leave a live host appliance's links and cgroup alone, and still
// name its own cgroups so that an orphan of the container is recognised from the host once the
// container is gone. This is what broke a CI run: the booted-image e2e test's cleanup detached the
// eBPF unit test's links and removed its cgroup.
func TestCleanupFromNestedPIDNamespace(t *testing.T) {
	lab := newEBPFLab(t, EBPFOptions{
		Destinations: []netip.Prefix{netip.MustParsePrefix("10.99.0.0/24")},
		Ports:        []PortRange{{From: 80, To: 80}},
	})
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("no unshare(1)")
	}
	before := ourLinkIDs(t)
	if len(before) == 0 {
		t.Fatal("the lab installed no links")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	parent := filepath.Dir(lab.cgroup)
	cmd := exec.Command("unshare", "--pid", "--fork", "--mount-proc", "--", exe, "-test.run=^TestNestedCleanupHelperProcess$")
	cmd.Env = append(os.Environ(), nestedCleanupEnv+"="+parent)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("nested cleanup: %v\n%s", err, out)
	}
	var res struct {
		Created string
		Removed []string
		Err     string
	}
	for line := range strings.SplitSeq(string(out), "\n") {
		if j, ok := strings.CutPrefix(line, resultMarker); ok {
			if err := json.Unmarshal([]byte(j), &res); err != nil {
				t.Fatal(err)
			}
		}
	}
	if res.Created == "" {
		t.Fatalf("the helper reported nothing:\n%s", out)
	}
	t.Cleanup(func() { RemoveCgroup(res.Created) })
	if res.Err != "" {
		t.Errorf("nested CleanupEBPF: %s", res.Err)
	}
	for _, r := range res.Removed {
		if strings.Contains(r, "bpf link") || strings.Contains(r, lab.cgroup) {
			t.Errorf("a cleanup in a nested PID namespace removed %q, which a live host process holds", r)
		}
	}
	if now := ourLinkIDs(t); !slices.Equal(now, before) {
		t.Errorf("links before %v, after the nested cleanup %v", before, now)
	}
	if _, err := os.Stat(lab.cgroup); err != nil {
		t.Fatalf("the nested cleanup removed the host appliance's cgroup: %v", err)
	}
	r := lab.runClient(t, true, helperReq{Mode: "dial", Family: "tcp4", Addr: labDst4 + ":80"})
	if want := "APPLIANCE " + labDst4 + ":80"; r.Greeting != want {
		t.Fatalf("after the nested cleanup the client read %q (err %q), want %q", r.Greeting, r.Err, want)
	}
	lab.drain()

	// The container's cgroup carries its namespace; with the namespace gone, the host's cleanup
	// knows it for an orphan.
	if !strings.Contains(filepath.Base(res.Created), "-ns") {
		t.Errorf("a cgroup created in a nested PID namespace is named %s, without its namespace", res.Created)
	}
	removed, err := CleanupEBPF()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(removed, "cgroup "+res.Created) {
		t.Errorf("host cleanup removed %q, want the dead container's cgroup %s", removed, res.Created)
	}
	if _, err := os.Stat(res.Created); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the dead container's cgroup is still there: %v", err)
	}
	if _, err := os.Stat(lab.cgroup); err != nil {
		t.Errorf("host cleanup removed the live appliance's cgroup: %v", err)
	}
}

// TestNestedCleanupHelperProcess runs in a new PID namespace: it creates a cgroup of its own and
// runs the stateless cleanup, as a container's ExecStopPost would.
func TestNestedCleanupHelperProcess(t *testing.T) {
	parent := os.Getenv(nestedCleanupEnv)
	if parent == "" {
		t.Skip("helper process for TestCleanupFromNestedPIDNamespace")
	}
	var res struct {
		Created string
		Removed []string
		Err     string
	}
	var err error
	if res.Created, err = NewCgroup(parent); err != nil {
		res.Err = err.Error()
	} else if res.Removed, err = CleanupEBPF(); err != nil {
		res.Err = err.Error()
	}
	b, _ := json.Marshal(res)
	fmt.Printf("%s%s\n", resultMarker, b)
}
