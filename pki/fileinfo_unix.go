//go:build unix

package pki

import (
	"io/fs"
	"syscall"
)

// openNoFollow makes opening the key fail (ELOOP) if its last component was swapped for a
// symbolic link after the Lstat that checked it.
const openNoFollow = syscall.O_NOFOLLOW

// fileOwner returns the uid that owns the file fi describes.
func fileOwner(fi fs.FileInfo) (uid int, ok bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return int(st.Uid), true
}
