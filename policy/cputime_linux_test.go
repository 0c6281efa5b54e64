package policy

import (
	"syscall"
	"time"
)

// rusageThread is RUSAGE_THREAD, which package syscall does not name.
const rusageThread = 1

// threadCPU returns the CPU time of the calling OS thread. Benchmarks lock their goroutine to a
// thread and report it besides wall time, because on a shared machine wall time per op mostly
// measures the other tenants.
func threadCPU() (time.Duration, bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(rusageThread, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
