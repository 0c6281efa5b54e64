//go:build linux || darwin || dragonfly || freebsd || netbsd || openbsd

package pki

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// lockDir takes an exclusive flock(2) on dir/.lock, creating the file 0600 if needed, and returns
// the function that releases it. It blocks while another process or goroutine holds the lock;
// every caller opens its own descriptor, so goroutines of one process exclude each other too.
func lockDir(dir string) (unlock func(), err error) {
	return flockDir(dir, syscall.LOCK_EX, true)
}

// lockDirShared takes a shared lock, so a reader never sees a creation half done. Without a lock
// file (a CA made by hand or by an older version, or a read-only directory) there is no creation
// to wait for, and it returns at once.
func lockDirShared(dir string) (unlock func(), err error) {
	return flockDir(dir, syscall.LOCK_SH, false)
}

func flockDir(dir string, how int, create bool) (func(), error) {
	path := filepath.Join(dir, LockFile)
	flags := os.O_RDONLY | syscall.O_NOFOLLOW
	if create {
		flags = os.O_RDWR | os.O_CREATE | syscall.O_NOFOLLOW
	}
	f, err := os.OpenFile(path, flags, 0o600)
	if err != nil {
		if !create && errors.Is(err, fs.ErrNotExist) {
			return func() {}, nil
		}
		return nil, fmt.Errorf("pki: open lock file %s: %w", path, err)
	}
	rc, err := f.SyscallConn()
	if err == nil {
		var ferr error
		err = rc.Control(func(fd uintptr) {
			for {
				if ferr = syscall.Flock(int(fd), how); ferr != syscall.EINTR {
					return
				}
			}
		})
		if err == nil {
			err = ferr
		}
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("pki: lock %s: %w", path, err)
	}
	// Closing the only descriptor releases the lock (it is close-on-exec, so no child keeps it).
	return func() { f.Close() }, nil
}
