package intercept

import (
	"bufio"
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"

	"mcpintercept/bpf"
	"mcpintercept/origin"
)

// DefaultBPFPinDir is the bpffs directory that would hold pinned objects of ours. The eBPF
// mechanism pins nothing (see EBPF); CleanupEBPF still clears the directory should anything ever
// be left there.
const DefaultBPFPinDir = "/sys/fs/bpf/mcpintercept"

// bpfNamePrefix starts the name of each of our BPF programs (see bpf/steer.c): cleanup recognises
// our links by it without any state.
const bpfNamePrefix = "mcpi_"

// Flags shared with bpf/steer.c (struct config.flags and struct orig_rec.flags).
const (
	cfgV4     = 1 << 0
	cfgV6     = 1 << 1
	cfgAllDst = 1 << 2
	// cfgLoopback steers loopback destinations too (EBPFOptions.Loopback).
	cfgLoopback = 1 << 3

	recClient   = 1 << 0
	recAccepted = 1 << 1
)

// EBPFOptions configures the eBPF cgroup-connect mechanism.
type EBPFOptions struct {
	// CgroupPath is the cgroup v2 directory whose processes (and descendants) are steered. It
	// must exist.
	CgroupPath string
	// Destinations limits steering to these prefixes; empty means every destination except
	// loopback. An IPv4 prefix also covers IPv4-mapped destinations of IPv6 sockets.
	Destinations []netip.Prefix
	// Ports limits steering to these destination ports; empty means every port.
	Ports []PortRange
	// ListenV4 and ListenV6 are the appliance's listeners (e.g. 127.0.0.1:15001 and
	// [::1]:15001). IPv4 and IPv4-mapped destinations go to ListenV4, IPv6 ones to ListenV6; a
	// family without a listener is not steered.
	ListenV4, ListenV6 netip.AddrPort
	// BypassMark: sockets carrying this SO_MARK are never steered (the appliance's upstream
	// dials). 0 disables the check.
	BypassMark uint32
	// SelfTGID is the appliance's own tgid, never steered; 0 means this process.
	SelfTGID uint32
	// ApplianceCgroup is the cgroup v2 directory of the process that created the listeners
	// (accepted sockets inherit the listener's cgroup, and the hand-off program runs there for
	// every TCP connection accepted in it: one hash lookup). Default: this process's cgroup,
	// from /proc/self/cgroup.
	ApplianceCgroup string
	// Loopback steers connects to loopback destinations too (127.0.0.0/8, ::1), except the
	// listeners themselves; off, they go direct and are counted (Skipped).
	Loopback bool
	// PinDir is accepted for configuration compatibility only: the mechanism deliberately pins
	// nothing, so it never needs bpffs (see EBPF). Default DefaultBPFPinDir.
	PinDir string
}

// EBPF steers every TCP connect of the processes in one cgroup v2 to the appliance's listeners
// with cgroup/connect4 and cgroup/connect6 programs, and recovers the original destination and
// the connecting process from socket storage (see bpf/steer.c for the hand-off).
//
// Attachments are bpf_links owned by this process and never pinned. If the appliance dies, even
// by SIGKILL, the kernel closes its link fds and detaches the programs: clients in the cgroup go
// back to connecting directly (fail-open). A pinned link, or a legacy PROG_ATTACH attachment,
// would outlive the appliance and keep redirecting every connect to a listener that no longer
// exists (fail-closed) until `cleanup` ran. That is also why link.AttachCgroup is not used: it
// silently falls back to PROG_ATTACH on kernels without cgroup bpf_link (before 5.7).
type EBPF struct {
	opts EBPFOptions

	mu    sync.RWMutex
	objs  *bpf.SteerObjects
	links []link.Link

	// fallbacks counts lookups served from the 4-tuple hand-off map rather than socket storage
	// (listeners outside ApplianceCgroup); tests assert on it.
	fallbacks atomic.Uint64
}

var _ Mechanism = (*EBPF)(nil)

// NewEBPF checks the options and fills in defaults; nothing is loaded before Install.
func NewEBPF(o EBPFOptions) (*EBPF, error) {
	if o.CgroupPath == "" {
		return nil, errors.New("ebpf: no cgroup to steer")
	}
	if err := checkCgroup2(o.CgroupPath); err != nil {
		return nil, fmt.Errorf("ebpf: %w", err)
	}
	if o.ApplianceCgroup == "" {
		cg, err := CgroupOf(0)
		if err != nil {
			return nil, fmt.Errorf("ebpf: appliance cgroup: %w", err)
		}
		o.ApplianceCgroup = cg
	}
	if err := checkCgroup2(o.ApplianceCgroup); err != nil {
		return nil, fmt.Errorf("ebpf: appliance cgroup: %w", err)
	}
	if o.ListenV4.IsValid() {
		o.ListenV4 = netip.AddrPortFrom(o.ListenV4.Addr().Unmap(), o.ListenV4.Port())
		if !o.ListenV4.Addr().Is4() || o.ListenV4.Port() == 0 {
			return nil, fmt.Errorf("ebpf: IPv4 listener %s is not an IPv4 address and port", o.ListenV4)
		}
	}
	if o.ListenV6.IsValid() && (!o.ListenV6.Addr().Is6() || o.ListenV6.Addr().Is4In6() || o.ListenV6.Port() == 0) {
		return nil, fmt.Errorf("ebpf: IPv6 listener %s is not an IPv6 address and port", o.ListenV6)
	}
	if !o.ListenV4.IsValid() && !o.ListenV6.IsValid() {
		return nil, errors.New("ebpf: no listener address to steer to")
	}
	for _, p := range o.Destinations {
		if !p.IsValid() {
			return nil, fmt.Errorf("ebpf: invalid destination prefix %v", p)
		}
	}
	for _, r := range o.Ports {
		if r.From == 0 || r.From > r.To {
			return nil, fmt.Errorf("ebpf: invalid port range %d-%d", r.From, r.To)
		}
	}
	if o.SelfTGID == 0 {
		o.SelfTGID = uint32(os.Getpid())
	}
	if o.PinDir == "" {
		o.PinDir = DefaultBPFPinDir
	}
	return &EBPF{opts: o}, nil
}

// Name implements Mechanism.
func (e *EBPF) Name() origin.Mechanism { return origin.EBPF }

// Install loads the programs, fills their maps and attaches them. The calling thread's network
// namespace is the appliance's: connects from other namespaces are left alone, since the
// listeners do not exist there. On error nothing stays attached.
func (e *EBPF) Install(ctx context.Context) (err error) {
	if err := ctx.Err(); err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.objs != nil {
		return nil
	}
	// Kernels before 5.11 charge BPF memory to RLIMIT_MEMLOCK; a no-op on later ones.
	if err := rlimit.RemoveMemlock(); err != nil {
		return fmt.Errorf("ebpf: %w", err)
	}
	cookie, err := netnsCookie()
	if err != nil {
		return fmt.Errorf("ebpf: %w", err)
	}
	objs := new(bpf.SteerObjects)
	if err := bpf.LoadSteerObjects(objs, nil); err != nil {
		return fmt.Errorf("ebpf: load programs (needs root, BPF and kernel 5.15 or later): %w", err)
	}
	defer func() {
		if err != nil {
			for i := len(e.links) - 1; i >= 0; i-- {
				e.links[i].Close()
			}
			e.links = nil
			objs.Close()
		}
	}()
	if err := e.fillMaps(objs, cookie); err != nil {
		return fmt.Errorf("ebpf: %w", err)
	}
	// The hand-off programs go first, so that no connect is redirected before its record can
	// reach the accepted socket.
	steps := []struct {
		cgroup string
		prog   *ebpf.Program
		attach ebpf.AttachType
	}{
		{e.opts.ApplianceCgroup, objs.McpiSockopsAp, ebpf.AttachCGroupSockOps},
		{e.opts.CgroupPath, objs.McpiSockopsCl, ebpf.AttachCGroupSockOps},
		{e.opts.CgroupPath, objs.McpiGetpeer4, ebpf.AttachCgroupInet4GetPeername},
		{e.opts.CgroupPath, objs.McpiGetpeer6, ebpf.AttachCgroupInet6GetPeername},
		{e.opts.CgroupPath, objs.McpiConnect4, ebpf.AttachCGroupInet4Connect},
		{e.opts.CgroupPath, objs.McpiConnect6, ebpf.AttachCGroupInet6Connect},
	}
	for _, s := range steps {
		l, err := attachCgroupLink(s.cgroup, s.prog, s.attach)
		if err != nil {
			return fmt.Errorf("ebpf: %w", err)
		}
		e.links = append(e.links, l)
	}
	e.objs = objs
	return nil
}

func attachCgroupLink(cgroup string, prog *ebpf.Program, attach ebpf.AttachType) (link.Link, error) {
	f, err := os.Open(cgroup)
	if err != nil {
		return nil, fmt.Errorf("open cgroup: %w", err)
	}
	defer f.Close()
	l, err := link.AttachRawLink(link.RawLinkOptions{Target: int(f.Fd()), Program: prog, Attach: attach})
	if err != nil {
		return nil, fmt.Errorf("attach %s to %s (bpf_link, kernel 5.7 or later): %w", attach, cgroup, err)
	}
	return l, nil
}

func (e *EBPF) fillMaps(objs *bpf.SteerObjects, cookie uint64) error {
	cfg := bpf.SteerConfig{
		NetnsCookie: cookie,
		SelfTgid:    e.opts.SelfTGID,
		BypassMark:  e.opts.BypassMark,
	}
	if a := e.opts.ListenV4; a.IsValid() {
		cfg.Flags |= cfgV4
		cfg.ListenIp4 = addrWords(a.Addr())[3]
		cfg.ListenPort4 = a.Port()
	}
	if a := e.opts.ListenV6; a.IsValid() {
		cfg.Flags |= cfgV6
		cfg.ListenIp6 = addrWords(a.Addr())
		cfg.ListenPort6 = a.Port()
	}
	if len(e.opts.Destinations) == 0 {
		cfg.Flags |= cfgAllDst
	}
	if e.opts.Loopback {
		cfg.Flags |= cfgLoopback
	}
	for _, p := range e.opts.Destinations {
		p = p.Masked()
		if a := p.Addr(); a.Is4() || a.Is4In6() {
			bits := p.Bits()
			if a.Is4In6() {
				bits = max(bits-96, 0)
			}
			k := bpf.SteerLpm4Key{Prefixlen: uint32(bits), Addr: addrWords(a)[3]}
			if err := objs.McpiDst4.Put(&k, uint8(1)); err != nil {
				return fmt.Errorf("destination %s: %w", p, err)
			}
			continue
		}
		k := bpf.SteerLpm6Key{Prefixlen: uint32(p.Bits()), Addr: addrWords(p.Addr())}
		if err := objs.McpiDst6.Put(&k, uint8(1)); err != nil {
			return fmt.Errorf("destination %s: %w", p, err)
		}
	}
	ports := portBitmap(e.opts.Ports)
	if err := objs.McpiPorts.Put(uint32(0), ports); err != nil {
		return fmt.Errorf("port set: %w", err)
	}
	if err := objs.McpiConfig.Put(uint32(0), &cfg); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	return nil
}

// portBitmap has bit p set for every steered port p; all of them when no range is given.
func portBitmap(ranges []PortRange) *bpf.SteerPortSet {
	ps := new(bpf.SteerPortSet)
	if len(ranges) == 0 {
		for i := range ps.Bits {
			ps.Bits[i] = 0xff
		}
		return ps
	}
	for _, r := range ranges {
		for p := uint32(r.From); p <= uint32(r.To); p++ {
			ps.Bits[p>>3] |= 1 << (p & 7)
		}
	}
	return ps
}

// Remove detaches every program and frees the maps; connects go direct again at once. It is
// idempotent. Connections already redirected stay with the listeners.
func (e *EBPF) Remove(ctx context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	var errs []error
	// Reverse order: stop redirecting before the hand-off goes away.
	for i := len(e.links) - 1; i >= 0; i-- {
		if err := e.links[i].Close(); err != nil {
			errs = append(errs, fmt.Errorf("ebpf: detach: %w", err))
		}
	}
	e.links = nil
	if e.objs != nil {
		if err := e.objs.Close(); err != nil {
			errs = append(errs, fmt.Errorf("ebpf: close: %w", err))
		}
		e.objs = nil
	}
	return errors.Join(errs...)
}

// Origin implements Mechanism: the destination and the process that made the connect.
func (e *EBPF) Origin(c *net.TCPConn) (origin.Origin, error) {
	dst, id, err := e.Lookup(c)
	if err != nil {
		return origin.Origin{}, err
	}
	return origin.Origin{Dst: dst, Identity: &id, Mechanism: string(origin.EBPF)}, nil
}

// Lookup returns where the accepted connection c was going and who made the connect.
//
// The record is read from the accepted socket's own storage (a user-space lookup in an
// SK_STORAGE map takes the socket's fd as key), where the appliance-side sockops program moved
// it when the handshake completed, before accept() could return. Socket storage dies with the
// socket, so nothing leaks however the connection ends. Only when that program did not see the
// socket (listeners created in a cgroup other than ApplianceCgroup) is the hand-off entry read,
// and removed, by the connection's 4-tuple.
func (e *EBPF) Lookup(c *net.TCPConn) (netip.AddrPort, Identity, error) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.objs == nil {
		return netip.AddrPort{}, Identity{}, errors.New("ebpf: steering is not installed")
	}
	rc, err := c.SyscallConn()
	if err != nil {
		return netip.AddrPort{}, Identity{}, fmt.Errorf("ebpf: %w", err)
	}
	var (
		rec    bpf.SteerOrigRec
		found  bool
		cookie uint64
		serr   error
	)
	err = rc.Control(func(fd uintptr) {
		if e.objs.McpiSkOrig.Lookup(uint32(fd), &rec) == nil && rec.Flags&recAccepted != 0 {
			found = true
			return
		}
		cookie, serr = unix.GetsockoptUint64(int(fd), unix.SOL_SOCKET, unix.SO_NETNS_COOKIE)
	})
	if err != nil {
		return netip.AddrPort{}, Identity{}, fmt.Errorf("ebpf: %w", err)
	}
	if !found {
		if serr != nil {
			return netip.AddrPort{}, Identity{}, fmt.Errorf("ebpf: netns cookie: %w", serr)
		}
		key, err := tupleKey(cookie, c.RemoteAddr(), c.LocalAddr())
		if err != nil {
			return netip.AddrPort{}, Identity{}, fmt.Errorf("ebpf: %w", err)
		}
		if err := e.objs.McpiByTuple.LookupAndDelete(&key, &rec); err != nil {
			return netip.AddrPort{}, Identity{}, fmt.Errorf("ebpf: no record for %s -> %s (not steered by this appliance): %w", c.RemoteAddr(), c.LocalAddr(), err)
		}
		e.fallbacks.Add(1)
	}
	return recordDst(&rec), recordIdentity(&rec), nil
}

func recordDst(r *bpf.SteerOrigRec) netip.AddrPort {
	a := wordsAddr(r.Addr)
	if r.Family == 4 {
		a = a.Unmap()
	}
	return netip.AddrPortFrom(a, r.Port)
}

func recordIdentity(r *bpf.SteerOrigRec) Identity {
	id := Identity{PID: r.Pid, UID: r.Uid, GID: r.Gid, CgroupID: r.CgroupId}
	var comm []byte
	for _, c := range r.Comm {
		if c == 0 {
			break
		}
		comm = append(comm, byte(c))
	}
	id.Comm = string(comm)
	if exe, err := os.Readlink("/proc/" + strconv.FormatUint(uint64(r.Pid), 10) + "/exe"); err == nil {
		id.Exe = exe
	}
	return id
}

// tupleKey builds the hand-off key the way bpf/steer.c's tuple_of does: 16-byte addresses with
// IPv4 mapped, ports in host order.
func tupleKey(cookie uint64, client, listener net.Addr) (bpf.SteerTupleKey, error) {
	c, err := AddrPortOf(client)
	if err != nil {
		return bpf.SteerTupleKey{}, err
	}
	l, err := AddrPortOf(listener)
	if err != nil {
		return bpf.SteerTupleKey{}, err
	}
	return bpf.SteerTupleKey{
		NetnsCookie:  cookie,
		ClientAddr:   addrWords(c.Addr()),
		ListenerAddr: addrWords(l.Addr()),
		ClientPort:   c.Port(),
		ListenerPort: l.Port(),
	}, nil
}

// addrWords is a's 16-byte form (IPv4 mapped) as the four network-order words BPF keeps: the
// words' memory holds the address bytes in order, so they are read in the host's byte order.
func addrWords(a netip.Addr) [4]uint32 {
	b := a.As16()
	var w [4]uint32
	for i := range w {
		w[i] = binary.NativeEndian.Uint32(b[4*i:])
	}
	return w
}

func wordsAddr(w [4]uint32) netip.Addr {
	var b [16]byte
	for i, v := range w {
		binary.NativeEndian.PutUint32(b[4*i:], v)
	}
	return netip.AddrFrom16(b)
}

// netnsCookie identifies the calling thread's network namespace as bpf_get_netns_cookie does.
func netnsCookie() (uint64, error) {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, fmt.Errorf("netns cookie: %w", err)
	}
	defer unix.Close(fd)
	c, err := unix.GetsockoptUint64(fd, unix.SOL_SOCKET, unix.SO_NETNS_COOKIE)
	if err != nil {
		return 0, fmt.Errorf("netns cookie (SO_NETNS_COOKIE, kernel 5.14 or later): %w", err)
	}
	return c, nil
}

// CleanupEBPF removes whatever of ours the eBPF mechanism and `exec` can leave behind, without
// state, and returns a line per removed object:
//   - pinned objects under DefaultBPFPinDir (nothing of ours pins; this clears old or manual pins),
//   - links of our programs that no process holds any more (kept only by a pin elsewhere),
//   - cgroups named mcpintercept-<pid>-<n> whose creating process is gone (processes still in
//     them are moved to the parent cgroup, where nothing steers them),
//   - the cgroup2 mount at /run/mcpintercept/cgroup2 once no cgroup of ours is left in it.
//
// Links held by a running process belong to a live appliance, which detaches them when it exits
// or dies; they are left alone, as are the cgroups of running creators. Run inside a container (a
// nested PID namespace, where the host's processes are invisible), it takes only the links that
// steer its own network namespace and only cgroups named for its own PID namespace.
func CleanupEBPF() ([]string, error) {
	var removed []string
	var errs []error
	for _, step := range []func() ([]string, error){removePins, detachOrphanLinks, removeOurCgroups, unmountUnusedFallback} {
		r, err := step()
		removed = append(removed, r...)
		if err != nil {
			errs = append(errs, err)
		}
	}
	return removed, errors.Join(errs...)
}

func removePins() ([]string, error) {
	if _, err := os.Lstat(DefaultBPFPinDir); errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	var files []string
	err := filepath.WalkDir(DefaultBPFPinDir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("ebpf pins: %w", err)
	}
	var removed []string
	for _, f := range files {
		if err := os.Remove(f); err != nil {
			return removed, fmt.Errorf("ebpf pins: %w", err)
		}
		removed = append(removed, "bpf pin "+f)
	}
	if err := os.RemoveAll(DefaultBPFPinDir); err != nil {
		return removed, fmt.Errorf("ebpf pins: %w", err)
	}
	return append(removed, "bpf pin directory "+DefaultBPFPinDir), nil
}

// ourLinkProgram reports whether the iterator's current link runs one of our programs (their
// names carry bpfNamePrefix), and that program's name.
func ourLinkProgram(it *link.Iterator) (string, bool) {
	info, err := it.Link.Info()
	if err != nil {
		return "", false
	}
	prog, err := ebpf.NewProgramFromID(info.Program)
	if err != nil {
		return "", false
	}
	pi, err := prog.Info()
	prog.Close()
	if err != nil || !strings.HasPrefix(pi.Name, bpfNamePrefix) {
		return "", false
	}
	return pi.Name, true
}

func detachOrphanLinks() ([]string, error) {
	type cand struct {
		id   link.ID
		name string
		l    link.Link
	}
	var cands []cand
	it := new(link.Iterator)
	defer it.Close()
	for it.Next() {
		name, ok := ourLinkProgram(it)
		if !ok {
			continue
		}
		cands = append(cands, cand{it.ID, name, it.Take()})
	}
	if err := it.Err(); err != nil {
		for _, c := range cands {
			c.l.Close()
		}
		return nil, fmt.Errorf("ebpf links: %w", err)
	}
	if len(cands) == 0 {
		return nil, nil
	}
	held := linkHolders()
	// Inside a container the holders of other namespaces' links are invisible: only the links
	// steering this network namespace can be this appliance's (see linkOwnedHere).
	whole := inInitialPIDNS()
	var removed []string
	var errs []error
	for _, c := range cands {
		if held[uint32(c.id)] || !whole && !linkOwnedHere(c.l) {
			c.l.Close()
			continue
		}
		if d, ok := c.l.(interface{ Detach() error }); ok {
			if err := d.Detach(); err != nil {
				errs = append(errs, fmt.Errorf("ebpf link %d (%s): %w", c.id, c.name, err))
			} else {
				removed = append(removed, fmt.Sprintf("bpf link %d (%s)", c.id, c.name))
			}
		}
		c.l.Close()
	}
	return removed, errors.Join(errs...)
}

// linkOwnedHere reports whether the link's program steers for this network namespace: its
// mcpi_config map holds this namespace's cookie. Any doubt (no such map, an unreadable one) is
// "not ours", so that a cleanup in a container never detaches the host's or a neighbour's links.
func linkOwnedHere(l link.Link) bool {
	cookie, err := netnsCookie()
	if err != nil {
		return false
	}
	info, err := l.Info()
	if err != nil {
		return false
	}
	prog, err := ebpf.NewProgramFromID(info.Program)
	if err != nil {
		return false
	}
	defer prog.Close()
	pi, err := prog.Info()
	if err != nil {
		return false
	}
	ids, ok := pi.MapIDs()
	if !ok {
		return false
	}
	for _, id := range ids {
		m, err := ebpf.NewMapFromID(id)
		if err != nil {
			continue
		}
		mi, err := m.Info()
		if err != nil || mi.Name != "mcpi_config" {
			m.Close()
			continue
		}
		var cfg bpf.SteerConfig
		err = m.Lookup(uint32(0), &cfg)
		m.Close()
		return err == nil && cfg.NetnsCookie == cookie
	}
	return false
}

// linkHolders returns the ids of the BPF links that some process other than this one (which only
// opened them to look) has an fd for, from /proc/*/fdinfo.
func linkHolders() map[uint32]bool {
	held := map[uint32]bool{}
	self := strconv.Itoa(os.Getpid())
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		if p.Name() == self || p.Name()[0] < '0' || p.Name()[0] > '9' {
			continue
		}
		fdDir := filepath.Join("/proc", p.Name(), "fd")
		fds, _ := os.ReadDir(fdDir)
		for _, fd := range fds {
			target, err := os.Readlink(filepath.Join(fdDir, fd.Name()))
			if err != nil || target != "anon_inode:bpf_link" {
				continue
			}
			if id, ok := fdinfoLinkID(filepath.Join("/proc", p.Name(), "fdinfo", fd.Name())); ok {
				held[id] = true
			}
		}
	}
	return held
}

func fdinfoLinkID(path string) (uint32, bool) {
	f, err := os.Open(path)
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "link_id:"); ok {
			id, err := strconv.ParseUint(strings.TrimSpace(v), 10, 32)
			return uint32(id), err == nil
		}
	}
	return 0, false
}

func unmountUnusedFallback() ([]string, error) {
	entries, err := os.ReadDir(cgroup2FallbackMount)
	if err != nil {
		return nil, nil
	}
	for _, e := range entries {
		if e.IsDir() && strings.HasPrefix(e.Name(), CgroupPrefix) {
			return nil, nil // a running mcpintercept still uses it
		}
	}
	return unmountFallbackCgroup2()
}

// newEBPFFromOptions steers o.Cgroup: the destination set (empty: everything but loopback) and
// the first listen address per family.
func newEBPFFromOptions(o Options) (Mechanism, error) {
	e := EBPFOptions{CgroupPath: o.Cgroup, Destinations: o.Destinations, Ports: o.Ports, BypassMark: o.BypassMark, Loopback: o.Loopback}
	v4, v6 := o.listenTargets()
	if v4.IsValid() {
		e.ListenV4 = netip.AddrPortFrom(v4, o.Port)
	}
	if v6.IsValid() {
		e.ListenV6 = netip.AddrPortFrom(v6, o.Port)
	}
	return NewEBPF(e)
}

// Skipped lists the connects of steered processes that were left alone since Install, by
// destination and reason, most frequent first (at most 1024 destinations are remembered).
func (e *EBPF) Skipped() ([]SkippedConnect, error) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.objs == nil {
		return nil, nil
	}
	var out []SkippedConnect
	var k bpf.SteerSkipKey
	var n uint64
	it := e.objs.McpiSkipped.Iterate()
	for it.Next(&k, &n) {
		var b [16]byte
		for i, w := range k.Addr {
			binary.NativeEndian.PutUint32(b[4*i:], w)
		}
		a := netip.AddrFrom16(b).Unmap()
		out = append(out, SkippedConnect{Dst: netip.AddrPortFrom(a, k.Port), Reason: skipReasons[k.Reason], Count: n})
	}
	if err := it.Err(); err != nil {
		return out, fmt.Errorf("ebpf: skipped connects: %w", err)
	}
	slices.SortFunc(out, func(x, y SkippedConnect) int {
		if x.Count != y.Count {
			return cmp.Compare(y.Count, x.Count)
		}
		return cmp.Compare(x.Dst.String(), y.Dst.String())
	})
	return out, nil
}

// skipReasons name bpf/steer.c's SKIP_* codes.
var skipReasons = map[uint8]string{1: SkipLoopback, 2: SkipPort, 3: SkipDestination}
