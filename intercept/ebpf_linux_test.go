package intercept

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/features"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"mcpintercept/bpf"
	"mcpintercept/intercept/upstream"
)

// The privileged tests build a throwaway network namespace with a dummy link holding 10.99.0.1,
// 10.98.0.1, fd99::1 and fd98::1. Nothing listens on those addresses except a "direct" server on
// port 8080, so a client that reads the appliance's greeting from 10.99.0.1:80 can only have been
// redirected. Clients are this test binary re-executed (TestEBPFHelperProcess) through a symlink
// named mcpi-client, inside the namespace (nsenter) and, when steered, born inside the child
// cgroup (clone3 CLONE_INTO_CGROUP).

const (
	labDst4      = "10.99.0.1"
	labDst6      = "fd99::1"
	labOutside4  = "10.98.0.1" // not in the steered destination set
	labOutside6  = "fd98::1"
	labDirect    = 8080 // a real server on labDst4/labDst6
	labBypass    = 0x539
	helperEnv    = "MCPI_EBPF_HELPER"
	resultMarker = "MCPI-RESULT "
	clientComm   = "mcpi-client"
)

// --- unit tests (no privileges) ---

func TestParseCgroup2Mount(t *testing.T) {
	tests := []struct {
		name, mountinfo, want string
	}{
		{
			name: "hybrid",
			mountinfo: `25 30 0:23 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw
33 25 0:28 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:9 - tmpfs tmpfs ro,mode=755
34 33 0:29 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime shared:10 - cgroup2 cgroup2 rw,nsdelegate
35 33 0:30 / /sys/fs/cgroup/systemd rw,nosuid,nodev,noexec,relatime shared:11 - cgroup cgroup rw,xattr,name=systemd
`,
			want: "/sys/fs/cgroup/unified",
		},
		{
			name:      "unified",
			mountinfo: "30 25 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot\n",
			want:      "/sys/fs/cgroup",
		},
		{
			name: "bind mount of a sub-tree is skipped",
			mountinfo: `40 25 0:26 /system.slice /mnt/sub rw - cgroup2 cgroup2 rw
41 25 0:26 / /mnt/with\040space rw - cgroup2 cgroup2 rw
`,
			want: "/mnt/with space",
		},
		{name: "none", mountinfo: "25 30 0:23 / /sys rw - sysfs sysfs rw\n", want: ""},
		{name: "optional fields", mountinfo: "34 33 0:29 / /cg rw shared:10 master:3 - cgroup2 none rw\n", want: "/cg"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseCgroup2Mount(strings.NewReader(tt.mountinfo))
			if err != nil || got != tt.want {
				t.Fatalf("parseCgroup2Mount = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

func TestParseProcCgroup(t *testing.T) {
	tests := []struct {
		name, in, want string
		wantErr        bool
	}{
		{name: "hybrid", in: "9:name=systemd:/\n4:memory:/x\n0::/user.slice/a.scope\n", want: "/user.slice/a.scope"},
		{name: "root", in: "0::/\n", want: "/"},
		{name: "deleted", in: "0::/mcpintercept-1-1 (deleted)\n", want: "/mcpintercept-1-1"},
		{name: "v1 only", in: "4:memory:/x\n", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseProcCgroup(tt.in)
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Fatalf("parseProcCgroup = %q, %v; want %q (error %v)", got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestPortBitmap(t *testing.T) {
	tests := []struct {
		name    string
		ranges  []PortRange
		in, out []uint16
	}{
		{name: "all", in: []uint16{1, 80, 443, 65535}},
		{name: "ranges", ranges: []PortRange{{From: 80, To: 80}, {From: 8000, To: 8010}, {From: 65535, To: 65535}},
			in: []uint16{80, 8000, 8005, 8010, 65535}, out: []uint16{79, 81, 7999, 8011, 65534, 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ps := portBitmap(tt.ranges)
			has := func(p uint16) bool { return ps.Bits[p>>3]>>(p&7)&1 == 1 }
			for _, p := range tt.in {
				if !has(p) {
					t.Errorf("port %d not set", p)
				}
			}
			for _, p := range tt.out {
				if has(p) {
					t.Errorf("port %d set", p)
				}
			}
		})
	}
}

func TestAddrWordsRoundTrip(t *testing.T) {
	for _, s := range []string{"10.99.0.1", "::1", "fd99::1", "::ffff:127.0.0.1"} {
		a := netip.MustParseAddr(s)
		got := wordsAddr(addrWords(a))
		if got != netip.AddrFrom16(a.As16()) {
			t.Errorf("%s: round trip gave %s", s, got)
		}
	}
	// The last word of an IPv4 address is the network-order value BPF compares with user_ip4.
	w := addrWords(netip.MustParseAddr("127.0.0.1"))
	if *(*[4]byte)(unsafePointer(&w[3])) != [4]byte{127, 0, 0, 1} || *(*[4]byte)(unsafePointer(&w[2])) != [4]byte{0, 0, 0xff, 0xff} {
		t.Errorf("127.0.0.1 as words: %#x", w)
	}
}

func TestCreatorAlive(t *testing.T) {
	tests := []struct {
		name string
		want bool
	}{
		{fmt.Sprintf("%s%d-3", CgroupPrefix, os.Getpid()), true},
		{CgroupPrefix + "junk", false},
		{CgroupPrefix + "0-1", false},
		{CgroupPrefix + "x-1", false},
	}
	for _, tt := range tests {
		if got := creatorAlive(tt.name); got != tt.want {
			t.Errorf("creatorAlive(%q) = %v", tt.name, got)
		}
	}
}

func TestNewEBPFRejectsBadOptions(t *testing.T) {
	dir := t.TempDir() // not a cgroup
	tests := []struct {
		name string
		o    EBPFOptions
		want string
	}{
		{name: "no cgroup", o: EBPFOptions{ListenV4: netip.MustParseAddrPort("127.0.0.1:1")}, want: "no cgroup"},
		{name: "not a cgroup", o: EBPFOptions{CgroupPath: dir, ListenV4: netip.MustParseAddrPort("127.0.0.1:1")}, want: "not a cgroup v2 directory"},
		{name: "missing cgroup", o: EBPFOptions{CgroupPath: filepath.Join(dir, "nope")}, want: "no such file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewEBPF(tt.o)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("NewEBPF error = %v, want it to mention %q", err, tt.want)
			}
		})
	}
}

// --- privileged tests ---

// requireEBPF skips unless the tests can create namespaces, cgroups and cgroup BPF programs.
func requireEBPF(tb testing.TB) {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Skip("eBPF steering tests need root (network namespaces, cgroups, BPF)")
	}
	for _, bin := range []string{"ip", "nsenter"} {
		if _, err := exec.LookPath(bin); err != nil {
			tb.Skipf("eBPF steering tests need %s: %v", bin, err)
		}
	}
	if err := features.HaveProgramType(ebpf.CGroupSockAddr); err != nil {
		tb.Skipf("BPF unavailable (cgroup/connect programs): %v", err)
	}
	if err := features.HaveMapType(ebpf.SkStorage); err != nil {
		tb.Skipf("BPF unavailable (socket storage): %v", err)
	}
	if p, err := findCgroup2(); err != nil || p == "" {
		tb.Skipf("no cgroup v2 hierarchy mounted (%v); the tests do not mount one on the host", err)
	}
}

// acceptRec is what the appliance side of the lab saw for one connection.
type acceptRec struct {
	dst    netip.AddrPort
	id     Identity
	err    error
	client netip.AddrPort
}

type ebpfLab struct {
	ns, nsPath string
	cgroup     string
	cgroupFD   *os.File
	client     string // the mcpi-client symlink to this test binary
	ln4, ln6   *net.TCPListener
	loopPort   uint16 // a loopback server that greets LOOPBACK
	mech       *EBPF
	accepted   chan acceptRec
	delay      atomic.Int64 // per accept, to model a slow appliance
	wg         sync.WaitGroup
}

var labSeq atomic.Int32

// newEBPFLab builds the namespace, the servers, a child cgroup and an installed mechanism
// steering it with opts (the listener addresses are filled in).
func newEBPFLab(tb testing.TB, opts EBPFOptions) *ebpfLab {
	tb.Helper()
	requireEBPF(tb)
	lab := &ebpfLab{accepted: make(chan acceptRec, 4096)}
	lab.ns = fmt.Sprintf("mcpi-ebpf-test-%d-%d", os.Getpid(), labSeq.Add(1))
	lab.nsPath = "/run/netns/" + lab.ns
	run(tb, "ip", "netns", "add", lab.ns)
	tb.Cleanup(func() { exec.Command("ip", "netns", "del", lab.ns).Run() })
	run(tb, "ip", "-n", lab.ns, "link", "set", "lo", "up")
	// Kernels built without the dummy driver get the addresses on lo, which is equivalent here:
	// local addresses where nothing listens, and not loopback addresses.
	dev := "dummy0"
	if err := exec.Command("ip", "-n", lab.ns, "link", "add", dev, "type", "dummy").Run(); err != nil {
		dev = "lo"
	}
	for _, args := range [][]string{
		{"link", "set", dev, "up"},
		{"addr", "add", labDst4 + "/32", "dev", dev},
		{"addr", "add", labOutside4 + "/32", "dev", dev},
		{"addr", "add", labDst6 + "/128", "dev", dev, "nodad"},
		{"addr", "add", labOutside6 + "/128", "dev", dev, "nodad"},
	} {
		run(tb, "ip", append([]string{"-n", lab.ns}, args...)...)
	}

	exe, err := os.Executable()
	if err != nil {
		tb.Fatal(err)
	}
	lab.client = filepath.Join(tb.TempDir(), clientComm)
	if err := os.Symlink(exe, lab.client); err != nil {
		tb.Fatal(err)
	}

	lab.cgroup, err = NewCgroup("")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := RemoveCgroup(lab.cgroup); err != nil {
			tb.Errorf("remove cgroup: %v", err)
		}
	})
	lab.cgroupFD, err = os.Open(lab.cgroup)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { lab.cgroupFD.Close() })

	var servers []net.Listener
	err = inNetns(lab.nsPath, func() error {
		l4, err := net.Listen("tcp4", "127.0.0.1:0")
		if err != nil {
			return err
		}
		lab.ln4 = l4.(*net.TCPListener)
		port := lab.ln4.Addr().(*net.TCPAddr).Port
		l6, err := net.Listen("tcp6", fmt.Sprintf("[::1]:%d", port))
		if err != nil {
			return err
		}
		lab.ln6 = l6.(*net.TCPListener)
		for _, a := range []string{labDst4, "[" + labDst6 + "]"} {
			l, err := net.Listen("tcp", fmt.Sprintf("%s:%d", a, labDirect))
			if err != nil {
				return err
			}
			servers = append(servers, l)
		}
		ll4, err := net.Listen("tcp4", "127.0.0.1:0")
		if err != nil {
			return err
		}
		lab.loopPort = uint16(ll4.Addr().(*net.TCPAddr).Port)
		ll6, err := net.Listen("tcp6", fmt.Sprintf("[::1]:%d", lab.loopPort))
		if err != nil {
			return err
		}
		servers = append(servers, ll4, ll6)

		opts.CgroupPath = lab.cgroup
		opts.ListenV4 = lab.ln4.Addr().(*net.TCPAddr).AddrPort()
		opts.ListenV6 = lab.ln6.Addr().(*net.TCPAddr).AddrPort()
		if opts.BypassMark == 0 {
			opts.BypassMark = labBypass
		}
		lab.mech, err = NewEBPF(opts)
		if err != nil {
			return err
		}
		// Install computes the appliance's netns cookie from the calling thread, which is in
		// the lab namespace here, as the whole appliance process would be in production.
		return lab.mech.Install(context.Background())
	})
	if err != nil {
		for _, s := range servers {
			s.Close()
		}
		if lab.ln4 != nil {
			lab.ln4.Close()
		}
		if lab.ln6 != nil {
			lab.ln6.Close()
		}
		tb.Fatalf("lab: %v", err)
	}
	greet := map[int]string{labDirect: "DIRECT\n", int(lab.loopPort): "LOOPBACK\n"}
	for _, s := range servers {
		lab.wg.Add(1)
		go func() {
			defer lab.wg.Done()
			msg := greet[s.Addr().(*net.TCPAddr).Port]
			for {
				c, err := s.Accept()
				if err != nil {
					return
				}
				io.WriteString(c, msg)
				c.Close()
			}
		}()
	}
	for _, l := range []*net.TCPListener{lab.ln4, lab.ln6} {
		lab.wg.Add(1)
		go func() {
			defer lab.wg.Done()
			lab.serve(l)
		}()
	}
	tb.Cleanup(func() {
		lab.mech.Remove(context.Background())
		lab.ln4.Close()
		lab.ln6.Close()
		for _, s := range servers {
			s.Close()
		}
		lab.wg.Wait()
	})
	return lab
}

// serve is the appliance: accept (slowly when asked), recover the original destination and the
// client's identity, and greet. It never dials the original destination: this process is not in
// the lab namespace, so such a dial would leave the machine (the benchmark's relaying appliance is
// a helper process inside the namespace).
func (lab *ebpfLab) serve(l *net.TCPListener) {
	for {
		if d := time.Duration(lab.delay.Load()); d > 0 {
			time.Sleep(d)
		}
		c, err := l.AcceptTCP()
		if err != nil {
			return
		}
		// Through Origin, as the engine asks: the destination and the process, named ebpf.
		o, err := lab.mech.Origin(c)
		dst, id := o.Dst, Identity{}
		if o.Identity != nil {
			id = *o.Identity
		}
		if err == nil && (o.Mechanism != "ebpf" || o.Identity == nil) {
			err = fmt.Errorf("origin %+v: want mechanism ebpf and an identity", o)
		}
		client, _ := AddrPortOf(c.RemoteAddr())
		select {
		case lab.accepted <- acceptRec{dst: dst, id: id, err: err, client: client}:
		default:
		}
		fmt.Fprintf(c, "APPLIANCE %s\n", dst)
		c.Close()
	}
}

func (lab *ebpfLab) drain() {
	for {
		select {
		case <-lab.accepted:
		default:
			return
		}
	}
}

func (lab *ebpfLab) nextAccept(t *testing.T) acceptRec {
	t.Helper()
	select {
	case r := <-lab.accepted:
		return r
	case <-time.After(5 * time.Second):
		t.Fatal("the appliance accepted nothing")
		return acceptRec{}
	}
}

// helperReq is what a client process is asked to do.
type helperReq struct {
	Mode      string // dial, short, bench, udp, appliance
	Family    string // tcp4, tcp6, mapped, mapped-v6only (dial)
	Addr      string // host:port
	Mark      uint32
	Count     int
	PortBase  int    // short: connection i goes to Addr's host, port PortBase+i
	NsPath    string // the lab namespace the helper must be in
	Cgroup    string // appliance
	ListenTCP string // appliance
	Relay     bool   // appliance: relay the original destination's greeting instead of its own
}

type helperResp struct {
	PID      int
	Greeting string
	Peer     string
	Err      string
	Errno    int
	OK       int
	Errors   []string
	MeanNs   int64
	P50Ns    int64
	P99Ns    int64
	SelfDial string // appliance: what its own dial to labDst4:labDirect answered
}

// runClient runs the helper inside the lab namespace, inside the steered cgroup or not, and
// returns what it reported.
func (lab *ebpfLab) runClient(tb testing.TB, inCgroup bool, req helperReq) helperResp {
	tb.Helper()
	cmd := lab.helperCmd(tb, inCgroup, req)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		tb.Fatalf("client %+v: %v\nstdout: %s\nstderr: %s", req, err, out.String(), errb.String())
	}
	return parseResult(tb, out.String(), errb.String())
}

func (lab *ebpfLab) helperCmd(tb testing.TB, inCgroup bool, req helperReq) *exec.Cmd {
	tb.Helper()
	req.NsPath = lab.nsPath
	b, _ := json.Marshal(req)
	cmd := exec.Command("nsenter", "--net="+lab.nsPath, "--", lab.client, "-test.run=^TestEBPFHelperProcess$")
	cmd.Env = append(os.Environ(), helperEnv+"="+string(b))
	if inCgroup {
		cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(lab.cgroupFD.Fd())}
	}
	return cmd
}

func parseResult(tb testing.TB, out, stderr string) helperResp {
	tb.Helper()
	for line := range strings.SplitSeq(out, "\n") {
		if j, ok := strings.CutPrefix(line, resultMarker); ok {
			var r helperResp
			if err := json.Unmarshal([]byte(j), &r); err != nil {
				tb.Fatalf("helper result %q: %v", j, err)
			}
			return r
		}
	}
	tb.Fatalf("helper printed no result\nstdout: %s\nstderr: %s", out, stderr)
	return helperResp{}
}

func TestEBPFSteering(t *testing.T) {
	lab := newEBPFLab(t, EBPFOptions{
		Destinations: []netip.Prefix{netip.MustParsePrefix("10.99.0.0/24"), netip.MustParsePrefix("fd99::/64")},
		Ports:        []PortRange{{From: 80, To: 80}, {From: labDirect, To: labDirect}, {From: 20000, To: 20999}},
	})
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cgID, err := CgroupID(lab.cgroup)
	if err != nil {
		t.Fatal(err)
	}

	redirected := []struct {
		name, family, addr, wantDst string
		viaV6                       bool
	}{
		{name: "ipv4", family: "tcp4", addr: labDst4 + ":80", wantDst: labDst4 + ":80"},
		{name: "ipv6", family: "tcp6", addr: "[" + labDst6 + "]:80", wantDst: "[" + labDst6 + "]:80", viaV6: true},
		{name: "ipv4-mapped on an IPv6 socket", family: "mapped", addr: "[::ffff:" + labDst4 + "]:80", wantDst: labDst4 + ":80"},
	}
	for _, tt := range redirected {
		t.Run("redirect "+tt.name, func(t *testing.T) {
			lab.drain()
			r := lab.runClient(t, true, helperReq{Mode: "dial", Family: tt.family, Addr: tt.addr})
			if r.Err != "" {
				t.Fatalf("client: %s", r.Err)
			}
			if want := "APPLIANCE " + tt.wantDst; r.Greeting != want {
				t.Fatalf("client read %q, want %q", r.Greeting, want)
			}
			// getpeername4/6 show the application the peer it asked for.
			if want := netip.MustParseAddrPort(tt.addr); r.Peer != want.String() {
				t.Errorf("client's getpeername = %s, want %s", r.Peer, want)
			}
			a := lab.nextAccept(t)
			if a.err != nil {
				t.Fatalf("Lookup: %v", a.err)
			}
			if a.dst.String() != tt.wantDst {
				t.Errorf("Lookup dst = %s, want %s", a.dst, tt.wantDst)
			}
			if a.client.Addr().Is4() == tt.viaV6 {
				t.Errorf("accepted from %s: wrong listener family", a.client)
			}
			want := Identity{PID: uint32(r.PID), Comm: clientComm, CgroupID: cgID, Exe: self}
			if a.id != want {
				t.Errorf("identity = %+v, want %+v", a.id, want)
			}
		})
	}

	notRedirected := []struct {
		name     string
		inCgroup bool
		req      helperReq
		greeting string // "" = connection refused
	}{
		{name: "process outside the cgroup", req: helperReq{Family: "tcp4", Addr: labDst4 + ":80"}},
		{name: "ipv6 process outside the cgroup", req: helperReq{Family: "tcp6", Addr: "[" + labDst6 + "]:80"}},
		{name: "loopback ipv4", inCgroup: true, req: helperReq{Family: "tcp4", Addr: fmt.Sprintf("127.0.0.1:%d", lab.loopPort)}, greeting: "LOOPBACK"},
		{name: "loopback ipv6", inCgroup: true, req: helperReq{Family: "tcp6", Addr: fmt.Sprintf("[::1]:%d", lab.loopPort)}, greeting: "LOOPBACK"},
		{name: "loopback mapped", inCgroup: true, req: helperReq{Family: "mapped", Addr: fmt.Sprintf("[::ffff:127.0.0.1]:%d", lab.loopPort)}, greeting: "LOOPBACK"},
		{name: "destination outside the set", inCgroup: true, req: helperReq{Family: "tcp4", Addr: labOutside4 + ":80"}},
		{name: "ipv6 destination outside the set", inCgroup: true, req: helperReq{Family: "tcp6", Addr: "[" + labOutside6 + "]:80"}},
		{name: "port outside the set", inCgroup: true, req: helperReq{Family: "tcp4", Addr: labDst4 + ":81"}},
		{name: "bypass mark", inCgroup: true, req: helperReq{Family: "tcp4", Addr: fmt.Sprintf("%s:%d", labDst4, labDirect), Mark: labBypass}, greeting: "DIRECT"},
		{name: "bypass mark ipv6", inCgroup: true, req: helperReq{Family: "tcp6", Addr: fmt.Sprintf("[%s]:%d", labDst6, labDirect), Mark: labBypass}, greeting: "DIRECT"},
	}
	for _, tt := range notRedirected {
		t.Run("leave alone "+tt.name, func(t *testing.T) {
			lab.drain()
			tt.req.Mode = "dial"
			r := lab.runClient(t, tt.inCgroup, tt.req)
			if tt.greeting == "" {
				if r.Errno != int(unix.ECONNREFUSED) {
					t.Fatalf("want connection refused (direct connect, nothing listens), got greeting %q err %q", r.Greeting, r.Err)
				}
			} else if r.Greeting != tt.greeting {
				t.Fatalf("client read %q (err %q), want %q", r.Greeting, r.Err, tt.greeting)
			}
			select {
			case a := <-lab.accepted:
				t.Fatalf("the appliance accepted a connection it should not have: %+v", a)
			default:
			}
		})
	}

	// exec says why nothing was intercepted from what the programs counted.
	t.Run("connects left alone are counted by reason", func(t *testing.T) {
		skipped, err := lab.mech.Skipped()
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]string{
			fmt.Sprintf("127.0.0.1:%d", lab.loopPort): SkipLoopback,
			fmt.Sprintf("[::1]:%d", lab.loopPort):     SkipLoopback,
			labOutside4 + ":80":                       SkipDestination,
			"[" + labOutside6 + "]:80":                SkipDestination,
			labDst4 + ":81":                           SkipPort,
		}
		for _, s := range skipped {
			if r, ok := want[s.Dst.String()]; ok && r == s.Reason && s.Count >= 1 {
				delete(want, s.Dst.String())
			}
		}
		if len(want) > 0 {
			t.Errorf("not counted: %v; counted: %+v", want, skipped)
		}
	})

	t.Run("V6ONLY socket keeps refusing IPv4-mapped destinations", func(t *testing.T) {
		r := lab.runClient(t, true, helperReq{Mode: "dial", Family: "mapped-v6only", Addr: "[::ffff:" + labDst4 + "]:80"})
		if r.Errno != int(unix.ENETUNREACH) {
			t.Fatalf("want ENETUNREACH, got greeting %q err %q", r.Greeting, r.Err)
		}
	})

	t.Run("UDP connect is not steered", func(t *testing.T) {
		r := lab.runClient(t, true, helperReq{Mode: "udp", Addr: labDst4 + ":80"})
		if r.Err != "" || r.Peer != labDst4+":80" {
			t.Fatalf("UDP socket connected to %s (err %q), want %s:80", r.Peer, r.Err, labDst4)
		}
	})

	t.Run("200 short connections with a slow accept", func(t *testing.T) {
		lab.drain()
		const n = 200
		lab.delay.Store(int64(2 * time.Millisecond))
		defer lab.delay.Store(0)
		r := lab.runClient(t, true, helperReq{Mode: "short", Addr: labDst4 + ":0", PortBase: 20000, Count: n})
		if r.OK != n {
			t.Fatalf("client completed %d of %d connections: %v", r.OK, n, r.Errors)
		}
		seen := map[uint16]bool{}
		for range n {
			a := lab.nextAccept(t)
			if a.err != nil {
				t.Errorf("Lookup: %v", a.err)
				continue
			}
			if a.dst.Addr() != netip.MustParseAddr(labDst4) || a.dst.Port() < 20000 || a.dst.Port() >= 20000+n || seen[a.dst.Port()] {
				t.Errorf("unexpected original destination %s", a.dst)
			}
			seen[a.dst.Port()] = true
		}
		if len(seen) != n {
			t.Errorf("%d of %d connections arrived with their original destination", len(seen), n)
		}
		// Each record moved to its accepted socket in the kernel: nothing came from the 4-tuple
		// fallback, and the hand-off map holds nothing any more.
		if n := lab.mech.fallbacks.Load(); n != 0 {
			t.Errorf("%d lookups needed the 4-tuple fallback", n)
		}
		var k bpf.SteerTupleKey
		var v bpf.SteerOrigRec
		if it := lab.mech.objs.McpiByTuple.Iterate(); it.Next(&k, &v) {
			t.Errorf("hand-off entries left behind, e.g. %+v", k)
		}
	})

	t.Run("fail-open after Remove", func(t *testing.T) {
		if err := lab.mech.Remove(context.Background()); err != nil {
			t.Fatal(err)
		}
		if err := lab.mech.Remove(context.Background()); err != nil {
			t.Fatalf("second Remove: %v", err)
		}
		for _, addr := range []string{fmt.Sprintf("%s:%d", labDst4, labDirect), fmt.Sprintf("[%s]:%d", labDst6, labDirect)} {
			r := lab.runClient(t, true, helperReq{Mode: "dial", Family: "tcp", Addr: addr})
			if r.Greeting != "DIRECT" {
				t.Errorf("%s after Remove: read %q (err %q), want DIRECT", addr, r.Greeting, r.Err)
			}
		}
		if _, _, err := lab.mech.Lookup(nil); err == nil {
			t.Error("Lookup after Remove succeeded")
		}
	})
}

// TestEBPFLoopback: with Loopback (exec's default) connects to loopback servers are steered like
// any other, in both families and IPv4-mapped, while a connect to the appliance's own listener
// is never redirected to itself.
func TestEBPFLoopback(t *testing.T) {
	lab := newEBPFLab(t, EBPFOptions{Loopback: true})
	for _, tt := range []struct{ family, addr, wantDst string }{
		{"tcp4", fmt.Sprintf("127.0.0.1:%d", lab.loopPort), fmt.Sprintf("127.0.0.1:%d", lab.loopPort)},
		{"tcp6", fmt.Sprintf("[::1]:%d", lab.loopPort), fmt.Sprintf("[::1]:%d", lab.loopPort)},
		{"mapped", fmt.Sprintf("[::ffff:127.0.0.1]:%d", lab.loopPort), fmt.Sprintf("127.0.0.1:%d", lab.loopPort)},
	} {
		lab.drain()
		lab.runClient(t, true, helperReq{Mode: "dial", Family: tt.family, Addr: tt.addr})
		a := lab.nextAccept(t)
		if a.err != nil || a.dst.String() != tt.wantDst {
			t.Errorf("%s %s: accepted with dst %s err %v, want %s", tt.family, tt.addr, a.dst, a.err, tt.wantDst)
		}
	}
	// The listener itself: reached directly, so the appliance finds no record of a redirect.
	lab.drain()
	lab.runClient(t, true, helperReq{Mode: "dial", Family: "tcp4", Addr: lab.ln4.Addr().String()})
	if a := lab.nextAccept(t); a.err == nil {
		t.Errorf("a connect to the listener itself was redirected (dst %s): a loop", a.dst)
	}
}

// TestEBPFApplianceCrash runs the appliance as its own process, inside the steered cgroup (so its
// self-exclusion by tgid is exercised), and SIGKILLs it: the kernel must detach the programs with
// its link fds, and clients go direct again.
func TestEBPFApplianceCrash(t *testing.T) {
	lab := newEBPFLab(t, EBPFOptions{})
	before := ourLinkIDs(t)
	cmd, ready := lab.startAppliance(t, true, false)
	if ready.SelfDial != "DIRECT" {
		t.Errorf("the appliance's own dial from inside the steered cgroup answered %q, want DIRECT (not looped)", ready.SelfDial)
	}

	target := fmt.Sprintf("%s:%d", labDst4, labDirect)
	r := lab.runClient(t, true, helperReq{Mode: "dial", Family: "tcp4", Addr: target})
	if want := "APPLIANCE " + target; r.Greeting != want {
		t.Fatalf("with the appliance running, client read %q (err %q), want %q", r.Greeting, r.Err, want)
	}
	// Compared as sets, so that links of other mcpintercept processes running meanwhile on this
	// machine do not count.
	var theirs []link.ID
	for _, id := range ourLinkIDs(t) {
		if !slices.Contains(before, id) {
			theirs = append(theirs, id)
		}
	}
	if len(theirs) != 6 {
		t.Errorf("the appliance holds %d new links of ours, want 6", len(theirs))
	}

	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	// Link release after the process is reaped is asynchronous (deferred fput); allow a moment.
	deadline := time.Now().Add(3 * time.Second)
	for {
		r = lab.runClient(t, true, helperReq{Mode: "dial", Family: "tcp4", Addr: target})
		if r.Greeting == "DIRECT" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after SIGKILL of the appliance, client still reads %q (err %q): fail-closed", r.Greeting, r.Err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	now := ourLinkIDs(t)
	for _, id := range theirs {
		if slices.Contains(now, id) {
			t.Errorf("link %d of the appliance outlived it", id)
		}
	}

	// cleanup removes a cgroup whose creator is gone, moving what still runs in it out.
	orphan := filepath.Join(filepath.Dir(lab.cgroup), fmt.Sprintf("%s%d-1", CgroupPrefix, cmd.Process.Pid))
	if err := os.Mkdir(orphan, 0o755); err != nil {
		t.Fatal(err)
	}
	defer RemoveCgroup(orphan)
	ofd, err := os.Open(orphan)
	if err != nil {
		t.Fatal(err)
	}
	sleeper := exec.Command("sleep", "30")
	sleeper.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(ofd.Fd())}
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	ofd.Close()
	defer func() {
		sleeper.Process.Kill()
		sleeper.Wait()
	}()
	removed, err := CleanupEBPF()
	if err != nil {
		t.Fatalf("CleanupEBPF: %v", err)
	}
	if !slices.Contains(removed, "cgroup "+orphan) {
		t.Errorf("CleanupEBPF removed %q, want the orphan cgroup %s among them", removed, orphan)
	}
	if _, err := os.Stat(orphan); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("orphan cgroup still there: %v", err)
	}
	if _, err := os.Stat(lab.cgroup); err != nil {
		t.Errorf("CleanupEBPF removed the cgroup of a running creator: %v", err)
	}
	if err := sleeper.Process.Signal(syscall.Signal(0)); err != nil {
		t.Errorf("a process of the orphan cgroup did not survive cleanup: %v", err)
	}
	again, err := CleanupEBPF()
	if err != nil || slices.Contains(again, "cgroup "+orphan) {
		t.Errorf("second CleanupEBPF = %q, %v", again, err)
	}
}

// startAppliance runs helperAppliance inside the lab namespace (inside the steered cgroup or not)
// after taking the in-process mechanism away, and waits until it steers. The process is killed
// when the test ends.
func (lab *ebpfLab) startAppliance(tb testing.TB, inCgroup, relay bool) (*exec.Cmd, helperResp) {
	tb.Helper()
	if err := lab.mech.Remove(context.Background()); err != nil {
		tb.Fatal(err)
	}
	var port int
	err := inNetns(lab.nsPath, func() error {
		l, err := net.Listen("tcp4", "127.0.0.1:0")
		if err != nil {
			return err
		}
		port = l.Addr().(*net.TCPAddr).Port
		return l.Close()
	})
	if err != nil {
		tb.Fatal(err)
	}
	cmd := lab.helperCmd(tb, inCgroup, helperReq{Mode: "appliance", Cgroup: lab.cgroup, ListenTCP: fmt.Sprintf("127.0.0.1:%d", port), Relay: relay})
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		tb.Fatalf("appliance did not start: %v\n%s", err, stderr.String())
	}
	ready := parseResult(tb, line, stderr.String())
	if ready.Err != "" {
		tb.Fatalf("appliance: %s", ready.Err)
	}
	return cmd, ready
}

func TestEBPFInstallFailureLeavesNothing(t *testing.T) {
	requireEBPF(t)
	cg, err := NewCgroup("")
	if err != nil {
		t.Fatal(err)
	}
	defer RemoveCgroup(cg)
	before := ourLinkIDs(t)
	e, err := NewEBPF(EBPFOptions{CgroupPath: cg, ListenV4: netip.MustParseAddrPort("127.0.0.1:15001")})
	if err != nil {
		t.Fatal(err)
	}
	// The target cgroup goes away between construction and Install: the appliance-side program
	// attaches first, then the first attach to the target fails and must take it back.
	if err := RemoveCgroup(cg); err != nil {
		t.Fatal(err)
	}
	err = e.Install(context.Background())
	if err == nil {
		e.Remove(context.Background())
		t.Fatal("Install succeeded without its cgroup")
	}
	if !strings.Contains(err.Error(), "open cgroup") {
		t.Errorf("Install failed for another reason than the missing cgroup: %v", err)
	}
	for _, id := range ourLinkIDs(t) {
		if !slices.Contains(before, id) {
			t.Errorf("a failed Install left link %d attached", id)
		}
	}
	if err := e.Remove(context.Background()); err != nil {
		t.Errorf("Remove after a failed Install: %v", err)
	}
}

// TestEBPFLookupFallback: when the listeners live in another cgroup than ApplianceCgroup, the
// hand-off program never sees the accepted socket, and Lookup reads (and removes) the entry the
// client side published under the connection's 4-tuple.
func TestEBPFLookupFallback(t *testing.T) {
	requireEBPF(t)
	elsewhere, err := NewCgroup("")
	if err != nil {
		t.Fatal(err)
	}
	defer RemoveCgroup(elsewhere)
	lab := newEBPFLab(t, EBPFOptions{ApplianceCgroup: elsewhere})
	r := lab.runClient(t, true, helperReq{Mode: "dial", Family: "tcp4", Addr: labDst4 + ":443"})
	if r.Greeting != "APPLIANCE "+labDst4+":443" {
		t.Fatalf("client read %q (err %q)", r.Greeting, r.Err)
	}
	a := lab.nextAccept(t)
	if a.err != nil || a.id.PID != uint32(r.PID) || a.id.Comm != clientComm {
		t.Fatalf("fallback Lookup = %s %+v, %v", a.dst, a.id, a.err)
	}
	if n := lab.mech.fallbacks.Load(); n != 1 {
		t.Errorf("fallback lookups = %d, want 1", n)
	}
	// The entry was taken, not copied: nothing is left to leak.
	var k bpf.SteerTupleKey
	var v bpf.SteerOrigRec
	if it := lab.mech.objs.McpiByTuple.Iterate(); it.Next(&k, &v) {
		t.Errorf("hand-off entry left after Lookup: %+v", k)
	}
}

func TestCgroupHelpers(t *testing.T) {
	requireEBPF(t)
	cg, err := NewCgroup("")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(filepath.Base(cg), fmt.Sprintf("%s%d-", CgroupPrefix, os.Getpid())) {
		t.Errorf("cgroup name %s", cg)
	}
	sleeper := exec.Command("sleep", "30")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		sleeper.Process.Kill()
		sleeper.Wait()
	}()
	if err := MoveToCgroup(cg, sleeper.Process.Pid); err != nil {
		t.Fatal(err)
	}
	got, err := CgroupOf(sleeper.Process.Pid)
	if err != nil || got != cg {
		t.Fatalf("CgroupOf(sleeper) = %q, %v; want %q", got, err, cg)
	}
	if pids, _ := CgroupProcs(cg); !slices.Equal(pids, []int{sleeper.Process.Pid}) {
		t.Errorf("CgroupProcs = %v", pids)
	}
	if id, err := CgroupID(cg); err != nil || id == 0 {
		t.Errorf("CgroupID = %d, %v", id, err)
	}
	// Removal moves the remaining process to the parent.
	if err := RemoveCgroup(cg); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(cg); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("cgroup still exists: %v", err)
	}
	if err := RemoveCgroup(cg); err != nil {
		t.Errorf("RemoveCgroup of a missing cgroup: %v", err)
	}
}

// ourLinkIDs lists the BPF links of our programs that exist right now.
func ourLinkIDs(tb testing.TB) []link.ID {
	tb.Helper()
	var ids []link.ID
	it := new(link.Iterator)
	defer it.Close()
	for it.Next() {
		if _, ok := ourLinkProgram(it); ok {
			ids = append(ids, it.ID)
		}
	}
	if err := it.Err(); err != nil {
		tb.Fatal(err)
	}
	return ids
}

// BenchmarkConnectRedirect compares connect-to-first-byte latency of sequential connections
// (run with -benchtime 2000x for 2000 of them); the appliance is a process inside the lab
// namespace, outside the steered cgroup:
//   - direct: a client connects to the server, which writes on accept (no steering installed);
//   - redirect: the client is steered to the appliance, which looks the connection up and writes
//     its own first byte (the cost of the steering itself);
//   - redirect+upstream: the appliance also dials the original destination with the bypass mark
//     and relays its first byte, as the engine does (adds the second loopback handshake).
func BenchmarkConnectRedirect(b *testing.B) {
	lab := newEBPFLab(b, EBPFOptions{})
	if err := lab.mech.Remove(context.Background()); err != nil { // "direct" runs unsteered
		b.Fatal(err)
	}
	target := fmt.Sprintf("%s:%d", labDst4, labDirect)
	bench := func(b *testing.B, inCgroup bool) {
		r := lab.runClient(b, inCgroup, helperReq{Mode: "bench", Addr: target, Count: b.N})
		if r.OK != b.N {
			b.Fatalf("%d of %d connections completed: %v", r.OK, b.N, r.Errors)
		}
		b.ReportMetric(float64(r.MeanNs), "ns/op")
		b.ReportMetric(float64(r.P50Ns), "p50-ns")
		b.ReportMetric(float64(r.P99Ns), "p99-ns")
	}
	b.Run("direct", func(b *testing.B) { bench(b, true) })
	for _, relay := range []bool{false, true} {
		name := "redirect"
		if relay {
			name = "redirect+upstream"
		}
		b.Run(name, func(b *testing.B) {
			cmd, _ := lab.startAppliance(b, false, relay)
			bench(b, true)
			cmd.Process.Kill()
			cmd.Wait()
		})
	}
}

// --- helpers ---

func run(tb testing.TB, name string, args ...string) {
	tb.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		tb.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

// inNetns runs f on an OS thread switched into the network namespace at nsPath. Sockets f
// creates stay in that namespace wherever they are used later.
func inNetns(nsPath string, f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer orig.Close()
		target, err := os.Open(nsPath)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("setns %s: %w", nsPath, err)
			return
		}
		ferr := f()
		// A thread that cannot go back stays locked, so the runtime discards it.
		if unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		errc <- ferr
	}()
	return <-errc
}

// TestEBPFHelperProcess is not a test: it is the client (or appliance) process the privileged
// tests start, selected by the MCPI_EBPF_HELPER environment variable.
func TestEBPFHelperProcess(t *testing.T) {
	spec := os.Getenv(helperEnv)
	if spec == "" {
		t.Skip("helper process for the eBPF tests")
	}
	var req helperReq
	if err := json.Unmarshal([]byte(spec), &req); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	// Every address the helpers dial exists only inside the lab namespace; from the host's
	// namespace they would be routed off the machine. Refuse to run there.
	var self, lab unix.Stat_t
	err1 := unix.Stat("/proc/self/ns/net", &self)
	err2 := unix.Stat(req.NsPath, &lab)
	if req.NsPath == "" || err1 != nil || err2 != nil || self.Ino != lab.Ino || self.Dev != lab.Dev {
		fmt.Fprintln(os.Stderr, "eBPF test helper: not inside the lab network namespace; refusing to dial")
		os.Exit(2)
	}
	resp := helperResp{PID: os.Getpid()}
	switch req.Mode {
	case "dial":
		helperDial(req, &resp)
	case "udp":
		helperUDP(req, &resp)
	case "short":
		helperShort(req, &resp)
	case "bench":
		helperBench(req, &resp)
	case "appliance":
		helperAppliance(req, &resp) // only returns on error
	default:
		resp.Err = "unknown mode " + req.Mode
	}
	b, _ := json.Marshal(resp)
	fmt.Printf("%s%s\n", resultMarker, b)
	os.Exit(0)
}

func helperDial(req helperReq, resp *helperResp) {
	c, err := rawDial(req.Family, netip.MustParseAddrPort(req.Addr), req.Mark)
	if err != nil {
		resp.Err = err.Error()
		var errno unix.Errno
		if errors.As(err, &errno) {
			resp.Errno = int(errno)
		}
		return
	}
	defer c.Close()
	resp.Peer = rawPeer(c)
	c.SetDeadline(time.Now().Add(3 * time.Second))
	b, err := io.ReadAll(c)
	resp.Greeting = strings.TrimSpace(string(b))
	if err != nil {
		resp.Err = err.Error()
	}
}

// rawDial connects a socket of the family asked for; "mapped" is an IPv6 socket connecting to an
// IPv4-mapped address, which net.Dial cannot produce. It returns the connect errno unwrapped.
func rawDial(family string, dst netip.AddrPort, mark uint32) (net.Conn, error) {
	domain := unix.AF_INET6
	if family == "tcp4" || (family == "tcp" && dst.Addr().Is4()) {
		domain = unix.AF_INET
	}
	fd, err := unix.Socket(domain, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), "dial")
	defer f.Close()
	if mark != 0 {
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_MARK, int(mark)); err != nil {
			return nil, err
		}
	}
	if domain == unix.AF_INET6 {
		v6only := 0
		if family == "mapped-v6only" || family == "tcp6" {
			v6only = 1
		}
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, v6only); err != nil {
			return nil, err
		}
	}
	tv := unix.Timeval{Sec: 3}
	unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_SNDTIMEO, &tv)
	var sa unix.Sockaddr
	if domain == unix.AF_INET {
		sa = &unix.SockaddrInet4{Port: int(dst.Port()), Addr: dst.Addr().Unmap().As4()}
	} else {
		sa = &unix.SockaddrInet6{Port: int(dst.Port()), Addr: dst.Addr().As16()}
	}
	if err := unix.Connect(fd, sa); err != nil {
		return nil, err
	}
	return net.FileConn(f) // its RemoteAddr comes from getpeername
}

// rawPeer is getpeername as the application sees it, IPv4-mapped addresses kept (net.Conn's
// RemoteAddr would print them as IPv4).
func rawPeer(c net.Conn) string {
	rc, err := c.(syscall.Conn).SyscallConn()
	if err != nil {
		return err.Error()
	}
	var sa unix.Sockaddr
	var serr error
	rc.Control(func(fd uintptr) { sa, serr = unix.Getpeername(int(fd)) })
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		return netip.AddrPortFrom(netip.AddrFrom4(a.Addr), uint16(a.Port)).String()
	case *unix.SockaddrInet6:
		return netip.AddrPortFrom(netip.AddrFrom16(a.Addr), uint16(a.Port)).String()
	}
	return fmt.Sprintf("getpeername: %v %v", sa, serr)
}

func helperUDP(req helperReq, resp *helperResp) {
	c, err := net.Dial("udp4", req.Addr)
	if err != nil {
		resp.Err = err.Error()
		return
	}
	defer c.Close()
	resp.Peer = c.RemoteAddr().String()
}

func helperShort(req helperReq, resp *helperResp) {
	host, _, _ := net.SplitHostPort(req.Addr)
	d := net.Dialer{Timeout: 3 * time.Second}
	for i := range req.Count {
		c, err := d.Dial("tcp", net.JoinHostPort(host, strconv.Itoa(req.PortBase+i)))
		if err == nil {
			_, err = c.Write([]byte{'x'})
			c.Close()
		}
		if err != nil {
			if len(resp.Errors) < 5 {
				resp.Errors = append(resp.Errors, err.Error())
			}
			continue
		}
		resp.OK++
	}
}

func helperBench(req helperReq, resp *helperResp) {
	d := net.Dialer{Timeout: 3 * time.Second}
	lat := make([]time.Duration, 0, req.Count)
	var buf [1]byte
	for range req.Count {
		start := time.Now()
		c, err := d.Dial("tcp", req.Addr)
		if err == nil {
			_, err = io.ReadFull(c, buf[:])
			c.Close()
		}
		if err != nil {
			if len(resp.Errors) < 5 {
				resp.Errors = append(resp.Errors, err.Error())
			}
			continue
		}
		lat = append(lat, time.Since(start))
		resp.OK++
	}
	if len(lat) == 0 {
		return
	}
	var sum time.Duration
	for _, l := range lat {
		sum += l
	}
	slices.Sort(lat)
	resp.MeanNs = int64(sum) / int64(len(lat))
	resp.P50Ns = int64(lat[len(lat)/2])
	resp.P99Ns = int64(lat[len(lat)*99/100])
}

// helperAppliance is a whole appliance in one process: steering for its own cgroup (it runs
// inside the steered cgroup, so only its tgid keeps it from steering itself), one listener, and a
// greeting per connection. It reports readiness, then serves until killed.
func helperAppliance(req helperReq, resp *helperResp) {
	l, err := net.Listen("tcp4", req.ListenTCP)
	if err != nil {
		resp.Err = err.Error()
		return
	}
	e, err := NewEBPF(EBPFOptions{CgroupPath: req.Cgroup, ListenV4: l.Addr().(*net.TCPAddr).AddrPort(), BypassMark: labBypass})
	if err != nil {
		resp.Err = err.Error()
		return
	}
	if err := e.Install(context.Background()); err != nil {
		resp.Err = err.Error()
		return
	}
	var self helperResp
	helperDial(helperReq{Family: "tcp4", Addr: fmt.Sprintf("%s:%d", labDst4, labDirect)}, &self)
	resp.SelfDial = self.Greeting
	b, _ := json.Marshal(resp)
	fmt.Printf("%s%s\n", resultMarker, b)
	for {
		c, err := l.Accept()
		if err != nil {
			os.Exit(1)
		}
		dst, _, err := e.Lookup(c.(*net.TCPConn))
		switch {
		case err != nil:
			fmt.Fprintf(c, "ERROR %v\n", err)
		case req.Relay:
			// This whole process is in the lab namespace, so the dial stays inside it.
			up, err := upstream.BypassDialer(labBypass, 2*time.Second).Dial("tcp", dst.String())
			if err != nil {
				fmt.Fprintf(c, "ERROR %v\n", err)
				break
			}
			io.Copy(c, up)
			up.Close()
		default:
			fmt.Fprintf(c, "APPLIANCE %s\n", dst)
		}
		c.Close()
	}
}
