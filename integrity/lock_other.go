//go:build !unix

package integrity

import "os"

// lockDir is a no-op where flock does not exist.
func lockDir(string) (*os.File, error) { return nil, nil }
