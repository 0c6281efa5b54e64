package appliance

import (
	"bufio"
	"fmt"
	"io"
	"strings"

	"mcpintercept/origin"
)

// The crash watchdog of `run` and `exec`: see crashwatch_linux.go.
const (
	EnvWatchdog   = "MCPINTERCEPT_WATCHDOG" // "off" opts out; "child" marks the watchdog itself
	WatchdogChild = "child"
)

// WantWatchdog says whether an invocation of command (the CLI's subcommand, "" for none) should
// start a watchdog.
func WantWatchdog(command string, getenv func(string) string) bool {
	if command != "run" && command != "exec" {
		return false
	}
	if getenv("NOTIFY_SOCKET") != "" {
		return false
	}
	v := getenv(EnvWatchdog)
	return v != "off" && v != WatchdogChild
}

// The data plane tells its watchdog (crashwatch_linux.go) what it installs, one line each, before
// installing it: "steering <mechanism>" and, for exec, "cgroup <path>". The watchdog acts on
// them only if the data plane crashes.
const (
	reportSteering = "steering"
	reportCgroup   = "cgroup"
	// maxReport bounds what the watchdog keeps: the data plane writes a few short lines.
	maxReport = 64 << 10
)

// WatchdogLink is the data plane's end of the report pipe; nil when no watchdog runs. Writes are
// best effort: a watchdog that cannot be told must not stop the data plane.
type WatchdogLink struct{ w io.WriteCloser }

// Steering announces the mechanism whose steering is about to be installed.
func (l *WatchdogLink) Steering(m origin.Mechanism) { l.say(reportSteering, string(m)) }

// Cgroup announces a cgroup exec created for its command.
func (l *WatchdogLink) Cgroup(path string) { l.say(reportCgroup, path) }

func (l *WatchdogLink) say(verb, arg string) {
	if l != nil && !strings.ContainsAny(arg, "\n\r") {
		fmt.Fprintf(l.w, "%s %s\n", verb, arg)
	}
}

// childReport is what the watchdog learnt from the data plane.
type childReport struct {
	// Mechanism is the steering the data plane announced ("" when it installed none).
	Mechanism origin.Mechanism
	// Cgroups are the cgroups exec created.
	Cgroups []string
	// Inbound says Sidecar mode's steering was announced too ("steering nftables-inbound").
	Inbound bool
}

// parseReport reads the data plane's lines until EOF, keeping the first maxReport bytes (and
// discarding the rest, so that the writer never blocks on a full pipe). Unknown lines are
// ignored; a mechanism that is not one of origin.Mechanisms is kept as written, so that the
// cleanup errs on the side of removing (see intercept.CleanupFor).
func parseReport(r io.Reader) childReport {
	var rep childReport
	sc := bufio.NewScanner(io.LimitReader(r, maxReport))
	sc.Buffer(make([]byte, 0, 256), maxReport)
	for sc.Scan() {
		verb, arg, _ := strings.Cut(strings.TrimRight(sc.Text(), "\r"), " ")
		if arg == "" {
			continue
		}
		switch verb {
		case reportSteering:
			if m := origin.Mechanism(strings.TrimSpace(arg)); m == origin.Inbound {
				rep.Inbound = true
			} else {
				rep.Mechanism = m
			}
		case reportCgroup:
			rep.Cgroups = append(rep.Cgroups, arg)
		}
	}
	io.Copy(io.Discard, r)
	return rep
}
