//go:build faultinject

package main

import (
	"fmt"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
)

// envFault arms a fault in a data plane built with `-tags faultinject` (never in a release
// build): SIGUSR2 then kills the process with a fatal runtime error that recover cannot catch.
//
//	MCPINTERCEPT_FAULT=concurrent-map-writes   fatal error: concurrent map writes
//	MCPINTERCEPT_FAULT=stack-overflow          fatal error: stack overflow
const envFault = "MCPINTERCEPT_FAULT"

// armFault waits for SIGUSR2 and then provokes the fault named by $MCPINTERCEPT_FAULT. It is
// only called in the data plane (main calls it after the supervisor has been split off).
func armFault() {
	kind := os.Getenv(envFault)
	if kind == "" {
		return
	}
	os.Unsetenv(envFault) // exec's command must not inherit it
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGUSR2)
	go func() {
		<-c
		fmt.Fprintf(os.Stderr, "faultinject: provoking %s\n", kind)
		switch kind {
		case "stack-overflow":
			debug.SetMaxStack(1 << 20) // reach the limit in microseconds, not after 1 GB
			recurse(0)
		default:
			concurrentMapWrites()
		}
	}()
}

//go:noinline
func recurse(n int) int {
	var pad [64]byte
	pad[n%64] = byte(n)
	return recurse(n+1) + int(pad[0])
}

// concurrentMapWrites writes one map from two goroutines until the runtime's check throws.
func concurrentMapWrites() {
	m := map[int]int{}
	for g := 0; g < 2; g++ {
		go func() {
			for i := 0; ; i++ {
				m[i%1024] = i
			}
		}()
	}
	select {}
}
