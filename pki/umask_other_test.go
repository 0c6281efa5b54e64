//go:build !unix

package pki

// Elsewhere there is no umask to vary; the mode tests still run with the process default.
func setUmask(int) int { return 0 }
