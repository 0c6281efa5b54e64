//go:build unix

package integrity

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// lockDir takes an exclusive lock on dir/lock for the life of the Guard: two appliances sharing
// a state directory would overwrite each other's state.json, so the second refuses to open it.
// The kernel releases the lock when the process dies, so a crash leaves nothing to clean up.
func lockDir(dir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("integrity: state directory lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("integrity: state directory %s is in use by another process (%v): each appliance needs its own tool_integrity.dir", dir, err)
	}
	return f, nil
}
