package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strings"

	"mcpintercept/config"
)

// The data plane tells its supervisor (supervise_linux.go) two things over an inherited pipe, one
// line each: which steering it is about to install ("steering <mechanism>"), and that its own
// code ran to the end ("exited": the orderly stop ran and removed the steering, or logged why it
// could not). A data plane that dies without the second line died where no Go code runs any more
// (a fatal runtime error, a signal), so the supervisor removes that steering for it.
const (
	reportSteering = "steering"
	reportExited   = "exited"
	// maxReport bounds what the supervisor reads: the data plane writes two short lines.
	maxReport = 4096
)

// supervisorLink is the data plane's end of the pipe; nil when nobody supervises this process.
// Writes are best effort: a supervisor that cannot be told must not stop the data plane.
type supervisorLink struct{ w io.WriteCloser }

// supervisor is set once by main, before realMain, when this process is a supervised data plane.
// It is a package variable so that realMain keeps the signature the tests call.
var supervisor *supervisorLink

// steering announces the mechanism whose steering is about to be installed.
func (l *supervisorLink) steering(m config.Mechanism) {
	if l != nil {
		fmt.Fprintf(l.w, "%s %s\n", reportSteering, m)
	}
}

// exited says the data plane's own code ran to the end; it closes the link.
func (l *supervisorLink) exited() {
	if l != nil {
		fmt.Fprintln(l.w, reportExited)
		l.w.Close()
	}
}

// childReport is what the supervisor learnt from the data plane.
type childReport struct {
	// Mechanism is the steering the data plane announced ("" when it died before installing any).
	Mechanism config.Mechanism
	// Exited: the data plane's orderly exit ran; nothing is left for the supervisor to remove.
	Exited bool
}

// parseReport reads the data plane's lines until EOF (or maxReport bytes). Unknown lines are
// ignored; a mechanism that is not one of config.Mechanisms is kept as written, so that the
// cleanup errs on the side of removing (see cleanupFor).
func parseReport(r io.Reader) childReport {
	var rep childReport
	sc := bufio.NewScanner(io.LimitReader(r, maxReport))
	sc.Buffer(make([]byte, 0, 256), maxReport)
	for sc.Scan() {
		verb, arg, _ := strings.Cut(strings.TrimSpace(sc.Text()), " ")
		switch verb {
		case reportSteering:
			if arg = strings.TrimSpace(arg); arg != "" {
				rep.Mechanism = config.Mechanism(arg)
			}
		case reportExited:
			rep.Exited = true
		}
	}
	return rep
}

// openSupervisorLink is the data plane's side: the pipe whose descriptor the supervisor named in
// envSupervisorFD. The variable is removed from the environment and the descriptor marked
// close-on-exec, so that nothing this process starts (exec's command) inherits either: a command
// holding the pipe would keep the supervisor waiting for its end.
func openSupervisorLink() *supervisorLink {
	v, ok := os.LookupEnv(envSupervisorFD)
	if !ok {
		return nil
	}
	os.Unsetenv(envSupervisorFD)
	var fd int
	if _, err := fmt.Sscanf(v, "%d", &fd); err != nil || fd < 3 {
		return nil
	}
	f := newInheritedFile(fd)
	if f == nil {
		return nil
	}
	return &supervisorLink{w: f}
}
