//go:build nonodeagent

package main

import (
	"fmt"
	"io"
)

// cmdNodeAgent in a build without the node agent (`make demo` builds with -tags nonodeagent: the
// Kubernetes client library is most of a cold build's time, and the demo does not use it).
func cmdNodeAgent(_ []string, _, stderr io.Writer) int {
	fmt.Fprintln(stderr, "mcpintercept node-agent: not in this build (built by `make demo` without the Kubernetes client); `make build` builds the full binary")
	return exitUsage
}
