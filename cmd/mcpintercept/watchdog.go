package main

// The watchdog: see watchdog_linux.go.
const (
	envWatchdog = "MCPINTERCEPT_WATCHDOG" // "off" opts out; "child" marks the watchdog itself
	watchdogArg = "child"
)

// wantWatchdog says whether this invocation should start a watchdog.
func wantWatchdog(args []string, getenv func(string) string) bool {
	if len(args) == 0 || (args[0] != "run" && args[0] != "exec") {
		return false
	}
	if getenv("NOTIFY_SOCKET") != "" {
		return false
	}
	v := getenv(envWatchdog)
	return v != "off" && v != watchdogArg
}
