package main

import (
	"fmt"
	"io"
)

// cmdNodeAgent runs the Kubernetes node agent (package nodeagent).
func cmdNodeAgent(args []string, stdout, stderr io.Writer) int {
	fmt.Fprintln(stderr, "node-agent: not built yet")
	return 1
}
