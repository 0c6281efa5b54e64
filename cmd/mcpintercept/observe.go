package main

import (
	"fmt"
	"io"
)

// cmdObserve follows a running appliance's decisions live (`mcpintercept observe`).
// CONTRACT STUB: helper H22a implements it.
func cmdObserve(args []string, stdout, stderr io.Writer) int {
	fmt.Fprintln(stderr, "mcpintercept observe: not implemented yet")
	return exitRuntime
}
