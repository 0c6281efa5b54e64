package main

import (
	"fmt"
	"io"
)

// cmdPolicy is `mcpintercept policy test --config F --input sample.jsonl`.
// CONTRACT STUB: helper H22b implements it.
func cmdPolicy(args []string, stdout, stderr io.Writer) int {
	fmt.Fprintln(stderr, "mcpintercept policy: not implemented yet")
	return exitRuntime
}
