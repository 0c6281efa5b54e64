package intercept

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// initPIDNSInode is the inode number of the initial PID namespace (the kernel's PROC_PID_INIT_INO,
// fixed since Linux 3.8): /proc/self/ns/pid reads "pid:[4026531836]" outside any container.
const initPIDNSInode = 0xEFFFFFFC

// pidNSInode returns the inode of the PID namespace of process pid (0: this process).
func pidNSInode(pid int) (uint64, error) {
	p := "/proc/self/ns/pid"
	if pid != 0 {
		p = fmt.Sprintf("/proc/%d/ns/pid", pid)
	}
	target, err := os.Readlink(p)
	if err != nil {
		return 0, err
	}
	return parseNSLink(target)
}

// parseNSLink reads the inode out of a namespace link target such as "pid:[4026531836]".
func parseNSLink(target string) (uint64, error) {
	_, rest, ok := strings.Cut(target, ":[")
	num, ok2 := strings.CutSuffix(rest, "]")
	if !ok || !ok2 {
		return 0, fmt.Errorf("namespace link %q: unexpected form", target)
	}
	return strconv.ParseUint(num, 10, 64)
}

// inInitialPIDNS reports whether this process sees every process of the host: only then can a
// scan of /proc tell an orphan from an object some other process holds. Inside a container (a
// nested PID namespace: systemd-nspawn, a pod) the processes of the host and of other containers
// are invisible, so their links and cgroups must not be judged abandoned. An unreadable link counts
// as nested: the cautious answer.
func inInitialPIDNS() bool {
	ino, err := pidNSInode(0)
	return err == nil && ino == initPIDNSInode
}

// pidNSAlive reports whether any visible process still lives in the PID namespace with inode ino.
// Called from the initial namespace, it sees every process, so false means the namespace is gone.
func pidNSAlive(ino uint64) bool {
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		if p.Name()[0] < '0' || p.Name()[0] > '9' {
			continue
		}
		target, err := os.Readlink(filepath.Join("/proc", p.Name(), "ns", "pid"))
		if err != nil {
			continue
		}
		if got, err := parseNSLink(target); err == nil && got == ino {
			return true
		}
	}
	return false
}
