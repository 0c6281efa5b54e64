//go:build !unix

package appliance

import "io/fs"

func fileOwner(fs.FileInfo) (int, bool) { return 0, false }

func writable(string) error { return nil }
