//go:build !(linux || darwin || dragonfly || freebsd || netbsd || openbsd)

package pki

// Stub: this platform has no flock(2). The appliance runs only on Linux; the package builds
// here for tooling. Creation still stages both files and renames them, so a crash leaves no
// mismatched pair, but two concurrent `ca init` runs on one directory are NOT serialized here:
// run one at a time.

func lockDir(string) (unlock func(), err error) { return func() {}, nil }

func lockDirShared(string) (unlock func(), err error) { return func() {}, nil }
