package nodeagent

import (
	"context"
	"fmt"
	"net"
	"os"
	"runtime"

	"golang.org/x/sys/unix"

	"mcpintercept/intercept/upstream"
)

// NS is an open network namespace (a pod's): holding the file keeps the namespace alive, so its
// steering can be removed even after the runtime has unmounted the path.
type NS struct {
	Path string
	f    *os.File
}

// OpenNS opens the network namespace at path (/var/run/netns/NAME, /proc/PID/ns/net).
func OpenNS(path string) (*NS, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open network namespace: %w", err)
	}
	var st unix.Statfs_t
	if err := unix.Fstatfs(int(f.Fd()), &st); err != nil {
		f.Close()
		return nil, fmt.Errorf("network namespace %s: %w", path, err)
	}
	if st.Type != unix.NSFS_MAGIC && st.Type != unix.PROC_SUPER_MAGIC {
		f.Close()
		return nil, fmt.Errorf("%s is not a network namespace", path)
	}
	return &NS{Path: path, f: f}, nil
}

// Close releases the namespace.
func (n *NS) Close() error { return n.f.Close() }

// Inode identifies the namespace (two paths of one namespace have the same).
func (n *NS) Inode() uint64 {
	var st unix.Stat_t
	if unix.Fstat(int(n.f.Fd()), &st) != nil {
		return 0
	}
	return st.Ino
}

// Do runs fn on an OS thread of its own inside the namespace: every socket fn opens (netlink,
// listeners, dials) belongs to the namespace for its life. The thread goes back to the agent's
// namespace afterwards; one that cannot is left locked, so the runtime discards it rather than
// run other goroutines in the pod's namespace.
func (n *NS) Do(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		self, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("open own network namespace: %w", err)
			return
		}
		defer self.Close()
		if err := unix.Setns(int(n.f.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("enter network namespace %s (needs CAP_SYS_ADMIN): %w", n.Path, err)
			return
		}
		ferr := fn()
		if unix.Setns(int(self.Fd()), unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		errc <- ferr
	}()
	return <-errc
}

// nsDialer dials from inside a namespace: the upstream connection of a pod's flow leaves from the
// pod, with the pod's address, as the client's own connection would have.
type nsDialer struct {
	ns   *NS
	base upstream.ContextDialer
}

func (d *nsDialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	var c net.Conn
	err := d.ns.Do(func() error {
		var err error
		c, err = d.base.DialContext(ctx, network, address)
		return err
	})
	return c, err
}
