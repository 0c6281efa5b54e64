//go:build !linux

package main

import (
	"io"
	"os"
)

// envSupervisorFD names the report pipe of a supervised data plane (Linux only).
const envSupervisorFD = "MCPINTERCEPT_SUPERVISOR_FD"

// superviseIfWanted: only Linux installs steering, so elsewhere nothing needs supervising.
func superviseIfWanted([]string, io.Writer) (int, bool) { return 0, false }

func newInheritedFile(fd int) *os.File { return os.NewFile(uintptr(fd), "supervisor") }
