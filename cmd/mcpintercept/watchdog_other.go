//go:build !linux

package main

import "io"

// Only Linux installs steering, so elsewhere nothing needs watching.

func runWatchdogIfAsked(io.Writer) (int, bool) { return 0, false }

func startWatchdog([]string, io.Writer) *watchdogLink { return nil }
