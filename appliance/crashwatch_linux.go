package appliance

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"syscall"

	"mcpintercept/intercept"
	"mcpintercept/origin"
)

// A fatal runtime error (stack overflow, out of memory, concurrent map writes) ends a Go process
// without running a deferred function or a recover: `run` and `exec` would die with their
// steering installed and the host's traffic sent to a listener that is gone. So `run` and `exec`
// started outside systemd start a watchdog: the same binary, re-executed as a child that holds
// no steering state. The runtime writes its crash report to the watchdog as well as to stderr
// (runtime/debug.SetCrashOutput, the monitor pattern of its documentation); when the data plane
// is gone and a crash report came, the watchdog removes what the data plane announced it had
// installed, as `mcpintercept cleanup` would, and exits.
//
// The data plane stays the process that was started: its pid, signals (SIGINT/SIGTERM stop,
// SIGHUP reloads, SIGUSR1 reopens), exit status, readiness line and sd_notify are those of before.
// A death without a crash report is left alone: an orderly exit removed the steering itself, and
// SIGKILL (or the kernel's OOM killer) stays what it was, fixed by `mcpintercept cleanup` or the
// unit's ExecStopPost. Under systemd (NOTIFY_SOCKET set) no watchdog runs: ExecStopPost runs
// `cleanup` after every stop, with the privileges the sandboxed service lacks.
// MCPINTERCEPT_WATCHDOG=off turns it off (debugging: one process, as before).

// IsWatchdog says whether this process is a watchdog StartWatchdog started.
func IsWatchdog() bool { return os.Getenv(EnvWatchdog) == WatchdogChild }

// RunWatchdog is the watchdog (IsWatchdog): it waits for its parent, the data plane, to end and
// removes its steering after a crash. An error: it was not started with its pipes.
func RunWatchdog(stderr io.Writer) error {
	report, crash := os.NewFile(3, "report"), os.NewFile(4, "crash")
	if report == nil || crash == nil {
		return errors.New("no report or crash pipe")
	}
	log := NewLogger("info", stderr).With("component", "watchdog")
	watch(report, crash, os.Getppid(), log)
	return nil
}

// watch waits for the data plane (pid) to end, reading what it announced and whether it crashed,
// and removes its steering after a crash. The signals a terminal or a process group may send
// are ignored: the watchdog outlives the data plane by design, and ends with it.
func watch(report, crash io.Reader, pid int, log *slog.Logger) {
	signal.Ignore(syscall.SIGINT, syscall.SIGQUIT, syscall.SIGHUP, syscall.SIGTERM, syscall.SIGUSR1,
		syscall.SIGUSR2, syscall.SIGPIPE, syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU)
	var rep childReport
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); rep = parseReport(report) }()
	crashed, _ := io.Copy(io.Discard, crash) // EOF: every copy of the write end is closed
	wg.Wait()
	if crashed == 0 {
		return
	}
	removeAfterCrash(rep, pid, log)
}

// removeAfterCrash removes what a crashed data plane announced.
func removeAfterCrash(rep childReport, pid int, log *slog.Logger) {
	if rep.Mechanism == "" {
		log.Error("the appliance crashed before installing steering; nothing to remove", "pid", pid)
		return
	}
	log.Error("the appliance crashed (a fatal runtime error); removing its steering", "pid", pid, "mechanism", rep.Mechanism)
	var errs []error
	for _, cg := range rep.Cgroups {
		// Only a cgroup of ours: the report is trusted no further than that.
		if !strings.HasPrefix(filepath.Base(cg), intercept.CgroupPrefix) {
			continue
		}
		if err := intercept.RemoveCgroup(cg); err != nil {
			errs = append(errs, err)
		} else {
			log.Info("removed cgroup " + cg)
		}
	}
	// Narrowed to what that mechanism installs (the registry's sweeps for it), so that the
	// cleanup never takes another instance's steering with it.
	removed, err := intercept.CleanupFor(context.Background(), origin.Mechanism(rep.Mechanism))
	if rep.Inbound {
		r, ierr := intercept.CleanupInbound(context.Background())
		removed, err = append(removed, r...), errors.Join(err, ierr)
	}
	for _, what := range removed {
		log.Info("removed " + what)
	}
	if err = errors.Join(append(errs, err)...); err != nil {
		log.Error("remove steering; run `mcpintercept cleanup`", "err", err)
		return
	}
	log.Info("steering removed after the crash", "mechanism", rep.Mechanism)
}

// StartWatchdog starts the watchdog for this process (the data plane of command) and routes the
// runtime's crash report to it. Nil when none is wanted (WantWatchdog) or it cannot start
// (logged: the appliance runs unwatched rather than not at all).
func StartWatchdog(command string, stderr io.Writer) *WatchdogLink {
	if !WantWatchdog(command, os.Getenv) {
		return nil
	}
	link, err := spawnWatchdog(stderr)
	if err != nil {
		NewLogger("info", stderr).Warn("no watchdog; a fatal runtime error would leave the steering to `mcpintercept cleanup`", "err", err)
		return nil
	}
	return link
}

func spawnWatchdog(stderr io.Writer) (*WatchdogLink, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find own executable: %w", err)
	}
	reportR, reportW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("report pipe: %w", err)
	}
	crashR, crashW, err := os.Pipe()
	if err != nil {
		reportR.Close()
		reportW.Close()
		return nil, fmt.Errorf("crash pipe: %w", err)
	}
	defer crashW.Close() // the runtime keeps its own close-on-exec copy
	cmd := exec.Command(exe)
	cmd.Args = []string{os.Args[0] + " (watchdog)"}
	cmd.Env = append(os.Environ(), EnvWatchdog+"="+WatchdogChild)
	cmd.Stderr = stderr
	cmd.ExtraFiles = []*os.File{reportR, crashR} // 3 and 4; the write ends are close-on-exec
	err = cmd.Start()
	reportR.Close()
	crashR.Close()
	if err != nil {
		reportW.Close()
		return nil, fmt.Errorf("start watchdog: %w", err)
	}
	go cmd.Wait() // reaped should it ever end first
	if err := debug.SetCrashOutput(crashW, debug.CrashOptions{}); err != nil {
		reportW.Close()
		return nil, fmt.Errorf("crash output: %w", err)
	}
	return &WatchdogLink{w: reportW}, nil
}
