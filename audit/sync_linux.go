package audit

import (
	"os"

	"golang.org/x/sys/unix"
)

// fdatasync makes the file's data durable without forcing a metadata-only
// update such as its mtime, which is what keeps group commit cheap.
func fdatasync(f *os.File) error { return unix.Fdatasync(int(f.Fd())) }

// freeBytes is the space left on f's file system for an unprivileged writer.
func freeBytes(f *os.File) (int64, error) {
	var st unix.Statfs_t
	if err := unix.Fstatfs(int(f.Fd()), &st); err != nil {
		return 0, err
	}
	return int64(st.Bavail) * int64(st.Bsize), nil
}
