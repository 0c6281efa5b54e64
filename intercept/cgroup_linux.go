package intercept

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// CgroupPrefix starts the name of every cgroup mcpintercept creates, so that cleanup can find them
// without state: mcpintercept-<pid of the creator>-<n>.
const CgroupPrefix = "mcpintercept-"

// cgroup2FallbackMount is where a cgroup2 hierarchy is mounted when the host has none mounted
// (cgroup2 is a single hierarchy, so this is the same tree a later mount elsewhere would show).
const cgroup2FallbackMount = "/run/mcpintercept/cgroup2"

var cgroupSeq atomic.Uint32

// Cgroup2Mount returns where the cgroup v2 hierarchy is mounted, read from /proc/self/mountinfo
// (hybrid hosts have it at /sys/fs/cgroup/unified, unified ones at /sys/fs/cgroup). When none is
// mounted it mounts one at /run/mcpintercept/cgroup2 and reports mounted=true, so the caller can
// say so.
func Cgroup2Mount() (path string, mounted bool, err error) {
	if p, err := findCgroup2(); err != nil || p != "" {
		return p, false, err
	}
	if err := os.MkdirAll(cgroup2FallbackMount, 0o755); err != nil {
		return "", false, fmt.Errorf("mount cgroup2: %w", err)
	}
	if err := unix.Mount("cgroup2", cgroup2FallbackMount, "cgroup2", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return "", false, fmt.Errorf("mount cgroup2 at %s: %w", cgroup2FallbackMount, err)
	}
	return cgroup2FallbackMount, true, nil
}

func findCgroup2() (string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", fmt.Errorf("find cgroup2 mount: %w", err)
	}
	defer f.Close()
	return parseCgroup2Mount(f)
}

// parseCgroup2Mount returns the first cgroup2 mount point whose root is the hierarchy's root ("/"):
// a bind mount of a sub-tree would make the paths of /proc/PID/cgroup wrong under it.
func parseCgroup2Mount(r io.Reader) (string, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		// 36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		pf, qf := strings.Fields(pre), strings.Fields(post)
		if len(pf) < 5 || len(qf) < 1 || qf[0] != "cgroup2" || pf[3] != "/" {
			continue
		}
		return unescapeMountinfo(pf[4]), nil
	}
	if err := sc.Err(); err != nil {
		return "", fmt.Errorf("read mountinfo: %w", err)
	}
	return "", nil
}

// unescapeMountinfo undoes the octal escapes (\040 for a space) of mountinfo paths.
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// CgroupOf returns the cgroup v2 directory of process pid (0: this process), from the "0::" line
// of /proc/PID/cgroup joined to the cgroup2 mount point.
func CgroupOf(pid int) (string, error) {
	mnt, _, err := Cgroup2Mount()
	if err != nil {
		return "", err
	}
	p := "/proc/self/cgroup"
	if pid != 0 {
		p = fmt.Sprintf("/proc/%d/cgroup", pid)
	}
	data, err := os.ReadFile(p)
	if err != nil {
		return "", fmt.Errorf("read %s: %w", p, err)
	}
	rel, err := parseProcCgroup(string(data))
	if err != nil {
		return "", fmt.Errorf("%s: %w", p, err)
	}
	return filepath.Join(mnt, rel), nil
}

func parseProcCgroup(s string) (string, error) {
	for line := range strings.SplitSeq(s, "\n") {
		if rest, ok := strings.CutPrefix(line, "0::"); ok {
			// A process whose cgroup was removed under it shows "/path (deleted)".
			rest = strings.TrimSuffix(rest, " (deleted)")
			if !strings.HasPrefix(rest, "/") {
				return "", fmt.Errorf("unexpected cgroup v2 path %q", rest)
			}
			return rest, nil
		}
	}
	return "", errors.New("no cgroup v2 entry (0::) in it: is cgroup v2 enabled?")
}

// NewCgroup creates a child cgroup named mcpintercept-<pid>-<n> under parent (a cgroup v2
// directory; "" means the root of the hierarchy, mounting it if needed) and returns its path.
func NewCgroup(parent string) (string, error) {
	if parent == "" {
		mnt, _, err := Cgroup2Mount()
		if err != nil {
			return "", err
		}
		parent = mnt
	}
	if err := checkCgroup2(parent); err != nil {
		return "", err
	}
	for {
		name := fmt.Sprintf("%s%d-%d", CgroupPrefix, os.Getpid(), cgroupSeq.Add(1))
		if !inInitialPIDNS() {
			// The pid means nothing outside this PID namespace: the name says which one it is in,
			// so that a cleanup elsewhere never takes a live appliance's cgroup for an orphan.
			if ino, err := pidNSInode(0); err == nil {
				name += fmt.Sprintf("-ns%d", ino)
			}
		}
		p := filepath.Join(parent, name)
		err := os.Mkdir(p, 0o755)
		if errors.Is(err, os.ErrExist) {
			continue // left by an earlier process that had our pid
		}
		if err != nil {
			return "", fmt.Errorf("create cgroup %s: %w", p, err)
		}
		return p, nil
	}
}

// MoveToCgroup moves process pid (all its threads) into the cgroup at path.
func MoveToCgroup(path string, pid int) error {
	if err := os.WriteFile(filepath.Join(path, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil {
		return fmt.Errorf("move pid %d into %s: %w", pid, path, err)
	}
	return nil
}

// CgroupProcs lists the processes in the cgroup at path (not in its children).
func CgroupProcs(path string) ([]int, error) {
	data, err := os.ReadFile(filepath.Join(path, "cgroup.procs"))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	var pids []int
	for f := range strings.FieldsSeq(string(data)) {
		if pid, err := strconv.Atoi(f); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// RemoveCgroup removes the cgroup at path once it is empty. Processes still in it are moved to
// its parent first (a cgroup with members cannot be removed); a process that is exiting can stay
// listed for a moment, so removal is retried for up to a second. A missing cgroup is not an error.
func RemoveCgroup(path string) error {
	deadline := time.Now().Add(time.Second)
	for {
		err := unix.Rmdir(path)
		if err == nil || errors.Is(err, unix.ENOENT) {
			return nil
		}
		if !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) {
			return fmt.Errorf("remove cgroup %s: %w", path, err)
		}
		if pids, _ := CgroupProcs(path); len(pids) > 0 {
			for _, pid := range pids {
				_ = MoveToCgroup(filepath.Dir(path), pid) // an exiting pid refuses; retried
			}
		}
		// Children of ours (none are created) would keep EBUSY until the deadline.
		time.Sleep(10 * time.Millisecond)
	}
}

// CgroupID returns the id of the cgroup at path as BPF sees it (bpf_get_current_cgroup_id,
// bpf_skb_cgroup_id): on cgroup v2 it is the inode number of the cgroup's directory.
func CgroupID(path string) (uint64, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return 0, fmt.Errorf("cgroup id of %s: %w", path, err)
	}
	return st.Ino, nil
}

// checkCgroup2 reports whether path is a directory of a cgroup v2 hierarchy.
func checkCgroup2(path string) error {
	var fs unix.Statfs_t
	if err := unix.Statfs(path, &fs); err != nil {
		return fmt.Errorf("cgroup %s: %w", path, err)
	}
	if fs.Type != unix.CGROUP2_SUPER_MAGIC {
		return fmt.Errorf("%s is not a cgroup v2 directory (filesystem type %#x)", path, fs.Type)
	}
	return nil
}

// removeOurCgroups removes every cgroup named mcpintercept-<pid>-<n> in the hierarchy whose
// creator <pid> no longer runs (a running mcpintercept still owns its cgroup and removes it on
// exit). Processes still inside are moved to the parent cgroup first, so they keep running,
// unsteered.
func removeOurCgroups() ([]string, error) {
	// Mount the hierarchy when this mount namespace shows none (`ip netns exec` remounts /sys
	// without it): cgroups are global, and an orphan must be found from anywhere.
	// The temporary mount goes away again when the walk is done.
	mnt, mounted, err := Cgroup2Mount()
	if err != nil || mnt == "" {
		return nil, err
	}
	if mounted {
		defer unix.Unmount(mnt, unix.MNT_DETACH)
	}
	var found []string
	err = filepath.WalkDir(mnt, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			if p == mnt {
				return err
			}
			return nil // a cgroup removed while we walk
		}
		if !d.IsDir() {
			return nil
		}
		if strings.HasPrefix(d.Name(), CgroupPrefix) && !creatorAlive(d.Name()) {
			found = append(found, p)
			return filepath.SkipDir
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("walk cgroups: %w", err)
	}
	var removed []string
	var errs []error
	for _, p := range found {
		if err := RemoveCgroup(p); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, "cgroup "+p)
	}
	return removed, errors.Join(errs...)
}

// creatorAlive reports whether the creator of a cgroup named mcpintercept-<pid>-<n>[-ns<inode>]
// may still be running. Names that do not parse are treated as abandoned. A pid is only checked
// in the PID namespace it was taken in (no suffix: the initial one); from any other namespace the
// answer is "alive" unless this process sees the whole host (the initial namespace) and no process
// is left in the creator's namespace.
func creatorAlive(name string) bool {
	rest := strings.TrimPrefix(name, CgroupPrefix)
	parts := strings.Split(rest, "-")
	if len(parts) != 2 && len(parts) != 3 {
		return false
	}
	pid, err := strconv.Atoi(parts[0])
	if err != nil || pid <= 0 {
		return false
	}
	if _, err := strconv.ParseUint(parts[1], 10, 32); err != nil {
		return false
	}
	var creatorNS uint64 = initPIDNSInode
	if len(parts) == 3 {
		ns, ok := strings.CutPrefix(parts[2], "ns")
		if creatorNS, err = strconv.ParseUint(ns, 10, 64); !ok || err != nil {
			return false
		}
	}
	self, err := pidNSInode(0)
	if err != nil {
		return true // cannot tell: leave it
	}
	if creatorNS != self {
		return self != initPIDNSInode || pidNSAlive(creatorNS)
	}
	err = unix.Kill(pid, 0)
	return err == nil || errors.Is(err, unix.EPERM)
}

// unmountFallbackCgroup2 detaches the cgroup2 mount Cgroup2Mount may have added.
func unmountFallbackCgroup2() ([]string, error) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	if !strings.Contains(string(data), " "+cgroup2FallbackMount+" ") {
		return nil, nil
	}
	if err := unix.Unmount(cgroup2FallbackMount, unix.MNT_DETACH); err != nil {
		return nil, fmt.Errorf("unmount %s: %w", cgroup2FallbackMount, err)
	}
	return []string{"mount " + cgroup2FallbackMount}, nil
}
