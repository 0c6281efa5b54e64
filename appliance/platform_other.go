//go:build !linux

package appliance

// checkPlatform refuses early: steering needs netfilter, eBPF and policy routing.
func checkPlatform() error { return ErrNeedsLinux }
