//go:build unix

package appliance

import (
	"fmt"
	"io/fs"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// fileOwner returns the uid that owns the file fi describes.
func fileOwner(fi fs.FileInfo) (uid int, ok bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return int(st.Uid), true
}

// writable says whether the running user may write path (access(2): a read-only mount, such as
// systemd's ProtectSystem=strict outside ReadWritePaths, says no as well).
func writable(path string) error {
	if err := unix.Access(path, unix.W_OK); err != nil {
		return fmt.Errorf("not writable by uid %d: %w", os.Geteuid(), err)
	}
	return nil
}
