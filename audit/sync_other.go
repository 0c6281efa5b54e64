//go:build !linux

package audit

import "os"

func fdatasync(f *os.File) error { return f.Sync() }
