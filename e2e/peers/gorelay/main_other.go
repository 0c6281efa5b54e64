//go:build !linux

// Command gorelay is the benchmark's minimal Go transparent relay; it needs Linux (TPROXY,
// IP_TRANSPARENT, SO_MARK).
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "gorelay: Linux only")
	os.Exit(2)
}
